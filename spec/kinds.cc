#include "spec/kinds.h"

namespace planner {

const char* ScheduleName(Schedule s) {
  switch (s) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::k1F1B: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kZbH1: return "zb-h1";
    case Schedule::kPipeDream: return "pipedream";
    case Schedule::kDualPipeV: return "dualpipev";
  }
  return "1f1b";
}

bool ParseSchedule(std::string_view t, Schedule* out) {
  for (Schedule s : kAllSchedules) {
    if (t == ScheduleName(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

std::string ScheduleChoices() { return "gpipe, 1f1b, interleaved, zb-h1, pipedream or dualpipev"; }

std::vector<std::string> ScheduleNames() {
  std::vector<std::string> v;
  for (Schedule s : kAllSchedules) v.emplace_back(ScheduleName(s));
  return v;
}

int64_t StagePosition(Schedule s, int64_t q, int64_t p) {
  if (s == Schedule::kDualPipeV) return q < p ? q : 2 * p - 1 - q;
  return q % p;
}

int64_t ChunkStage(Schedule s, int64_t c, int64_t r, int64_t p) {
  if (s == Schedule::kDualPipeV) return c == 0 ? r : 2 * p - 1 - r;
  return c * p + r;
}

const char* RecomputeName(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "none";
}

bool ParseRecompute(std::string_view t, Recompute* out) {
  for (Recompute r : kAllRecomputes) {
    if (t == RecomputeName(r)) {
      *out = r;
      return true;
    }
  }
  return false;
}

std::vector<std::string> RecomputeNames() {
  std::vector<std::string> v;
  for (Recompute r : kAllRecomputes) v.emplace_back(RecomputeName(r));
  return v;
}

bool ZeroStageFromNumber(long long n, ZeroStage* out) {
  if (n < 0 || n > 3) return false;
  *out = static_cast<ZeroStage>(n);
  return true;
}

}  // namespace planner
