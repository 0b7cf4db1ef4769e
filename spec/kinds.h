// The kinds a plan is made of, as enums: pipeline schedule, activation
// recompute, ZeRO stage, the plan's mode and cost source, the device it runs on. Parsed once, where a file or flag is read
// (plan.yaml, launch.yaml, `solve --schedule`); everything past the reader
// compares enums, never names. Names are the spellings of docs/formats.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace planner {

enum class Schedule { kGpipe, k1F1B, kInterleaved, kZbH1, kPipeDream, kDualPipeV };
inline constexpr Schedule kAllSchedules[] = {Schedule::kGpipe, Schedule::k1F1B,      Schedule::kInterleaved,
                                             Schedule::kZbH1,  Schedule::kPipeDream, Schedule::kDualPipeV};
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

// FP8 scaling recipes, Transformer Engine's and torchao's names (engine files' fp8_recipe, kernel tables'
// fp8_recipes, solve --fp8-recipe, plan.yaml inputs.fp8_recipe; docs/formats.md): delayed | current | tensorwise |
// rowwise | blockwise | mxfp8. Strings past the readers (the kernel tables key their figures by them).
std::vector<std::string> Fp8RecipeNames();

enum class Recompute { kNone, kSelective, kFull };
inline constexpr Recompute kAllRecomputes[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
const char* RecomputeName(Recompute r);  // none | selective | full
bool ParseRecompute(std::string_view text, Recompute* out);
std::vector<std::string> RecomputeNames();  // in kAllRecomputes order

// Megatron-Core's selective recompute modules (--recompute-modules; docs/cost_model.md section 5,
// "Recompute modules"). A set of them is a bit mask (1 << module); selective recompute's default
// is core_attn alone.
// kOpSac: torchtitan's op-level selective activation checkpointing (selective_ac_option "op"): a policy, not
// a module; it keeps every other matmul's output and the attention kernel's, recomputes the rest. Alone in a
// set, and run only by an engine that lists it (configs/engines/torchtitan*.yaml `recompute_modules`).
enum class RecomputeModule { kCoreAttn, kLayernorm, kMlaUpProj, kMoeAct, kMlp, kMoe, kSharedExperts, kOpSac };
inline constexpr int kRecomputeModuleCount = 8;
inline constexpr uint32_t RecomputeBit(RecomputeModule m) { return 1u << static_cast<int>(m); }
inline constexpr uint32_t kDefaultRecomputeModules = RecomputeBit(RecomputeModule::kCoreAttn);
// DeepSeek-V3's set (section 3.2.3): core_attn, layernorm, mla_up_proj, moe_act.
inline constexpr uint32_t kDeepSeekRecomputeModules =
    RecomputeBit(RecomputeModule::kCoreAttn) | RecomputeBit(RecomputeModule::kLayernorm) |
    RecomputeBit(RecomputeModule::kMlaUpProj) | RecomputeBit(RecomputeModule::kMoeAct);
const char* RecomputeModuleName(
    RecomputeModule m);  // core_attn | layernorm | mla_up_proj | moe_act | mlp | moe | shared_experts | op_sac
bool ParseRecomputeModule(std::string_view text, RecomputeModule* out);
std::vector<std::string> RecomputeModuleNames();              // in enum order
std::vector<std::string> RecomputeModuleList(uint32_t mask);  // the names of the set, in enum order
inline bool HasRecomputeModule(uint32_t mask, RecomputeModule m) { return (mask & RecomputeBit(m)) != 0; }

// ZeRO stage: what the data-parallel ranks shard (DeepSpeed's numbering).
enum class ZeroStage { kNone = 0, kOptimizer = 1, kGradients = 2, kParameters = 3 };
inline int ZeroStageNumber(ZeroStage z) { return static_cast<int>(z); }
bool ZeroStageFromNumber(long long n, ZeroStage* out);  // 0..3

// What a plan came from: the joint search or PipeDream's optimizer (plan.yaml `mode`).
enum class PlanMode { kAuto, kPipeDream };
const char* PlanModeName(PlanMode m);  // auto | pipedream
bool ParsePlanMode(std::string_view text, PlanMode* out);

// How context parallelism exchanges keys and values (Megatron --cp-comm-type; plan.yaml
// `inputs.cp_comm_type`): p2p, the ring (one K, V chunk pair per step, partial outputs merged
// between steps); allgather, K and V all-gathered once per layer and each local query chunk's
// attention run in one kernel (Transformer Engine's AttnFuncWithCPAndKVAllGather, Llama 3's CP).
enum class CpCommType { kP2P, kAllGather };
// Whether Megatron-Core runs its EP all-to-all overlap (--overlap-moe-expert-parallel-comm) on a layout of pp
// pipeline ranks with v chunks each and recompute rc: pp 1 or v > 1, and no full (or block) recompute
// (TransformerConfig's checks, megatron-core 0.16).
bool MegatronOverlapsMoe(int64_t pp, int64_t v, Recompute rc);

const char* CpCommTypeName(CpCommType c);  // p2p | allgather
bool ParseCpCommType(std::string_view text, CpCommType* out);

// How an MoE layer's tokens reach their experts (--moe-dispatcher; plan.yaml `inputs.moe_dispatcher`; an engine's
// `moe_dispatchers`): alltoall, Megatron's NCCL all_to_all_single dispatcher (one copy per routed expert, the
// received copies regrouped by local expert); flex, a deduplicating dispatcher (DeepEP, HybridEP: one copy per node
// and per GPU reached). docs/cost_model.md section 3, "All-to-all".
enum class MoeDispatcher { kAllToAll, kFlex };
const char* MoeDispatcherName(MoeDispatcher d);  // alltoall | flex
bool ParseMoeDispatcher(std::string_view text, MoeDispatcher* out);

// Where a plan's layer times came from (plan.yaml `inputs.cost_source`).
enum class CostSourceKind { kAnalytic, kProfile };
const char* CostSourceKindName(CostSourceKind c);  // analytic | profile
bool ParseCostSourceKind(std::string_view text, CostSourceKind* out);

// What `planner run` executes on (launch.yaml `device`, codegen --device; the runtime's tensors).
enum class Device { kCpu, kCuda };
const char* DeviceName(Device d);  // cpu | cuda
bool ParseDevice(std::string_view text, Device* out);

}  // namespace planner
