// The kinds a plan is made of, as enums: pipeline schedule, activation
// recompute and ZeRO stage. Parsed once, where a file or flag is read
// (plan.yaml, launch.yaml, `solve --schedule`); everything past the reader
// compares enums, never names. Names are the spellings of docs/formats.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace planner {

enum class Schedule { kGpipe, k1F1B, kInterleaved, kZbH1, kPipeDream, kDualPipeV };
inline constexpr Schedule kAllSchedules[] = {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1,
                                             Schedule::kPipeDream, Schedule::kDualPipeV};
const char* ScheduleName(Schedule s);  // gpipe | 1f1b | interleaved | zb-h1 | pipedream | dualpipev
bool ParseSchedule(std::string_view text, Schedule* out);
// "gpipe, 1f1b, interleaved, zb-h1, pipedream or dualpipev": for error messages.
std::string ScheduleChoices();
// Every spelling, in kAllSchedules order (for readers that take one of them).
std::vector<std::string> ScheduleNames();

// Where the virtual stages of a synchronous pipeline of p positions (ranks) run.
// Megatron's loop (every schedule but dualpipev): virtual stage q on position
// q % p, chunk q / p. DualPipeV's V (torch's "v" stage-to-rank style): p
// positions, 2p stages, position r holds stages r (chunk 0) and 2p - 1 - r
// (chunk 1), so stages p - 1 and p share the last position and the loss
// (stage 2p - 1) is on position 0. The chunk is q / p in both.
int64_t StagePosition(Schedule s, int64_t q, int64_t p);
// The virtual stage of chunk c on position r (inverse of StagePosition).
int64_t ChunkStage(Schedule s, int64_t c, int64_t r, int64_t p);

enum class Recompute { kNone, kSelective, kFull };
inline constexpr Recompute kAllRecomputes[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
const char* RecomputeName(Recompute r);  // none | selective | full
bool ParseRecompute(std::string_view text, Recompute* out);
std::vector<std::string> RecomputeNames();  // in kAllRecomputes order

// ZeRO stage: what the data-parallel ranks shard (DeepSpeed's numbering).
enum class ZeroStage { kNone = 0, kOptimizer = 1, kGradients = 2, kParameters = 3 };
inline int ZeroStageNumber(ZeroStage z) { return static_cast<int>(z); }
bool ZeroStageFromNumber(long long n, ZeroStage* out);  // 0..3

}  // namespace planner
