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

std::vector<std::string> Fp8RecipeNames() {
  return {"delayed", "current", "tensorwise", "rowwise", "blockwise", "mxfp8"};
}

std::vector<std::string> RecomputeNames() {
  std::vector<std::string> v;
  for (Recompute r : kAllRecomputes) v.emplace_back(RecomputeName(r));
  return v;
}

const char* RecomputeModuleName(RecomputeModule m) {
  switch (m) {
    case RecomputeModule::kCoreAttn: return "core_attn";
    case RecomputeModule::kLayernorm: return "layernorm";
    case RecomputeModule::kMlaUpProj: return "mla_up_proj";
    case RecomputeModule::kMoeAct: return "moe_act";
    case RecomputeModule::kMlp: return "mlp";
    case RecomputeModule::kMoe: return "moe";
    case RecomputeModule::kSharedExperts: return "shared_experts";
    case RecomputeModule::kOpSac: return "op_sac";
  }
  return "core_attn";
}

bool ParseRecomputeModule(std::string_view t, RecomputeModule* out) {
  for (int i = 0; i < kRecomputeModuleCount; ++i) {
    if (t == RecomputeModuleName(static_cast<RecomputeModule>(i))) {
      *out = static_cast<RecomputeModule>(i);
      return true;
    }
  }
  return false;
}

std::vector<std::string> RecomputeModuleNames() { return RecomputeModuleList((1u << kRecomputeModuleCount) - 1); }

std::vector<std::string> RecomputeModuleList(uint32_t mask) {
  std::vector<std::string> v;
  for (int i = 0; i < kRecomputeModuleCount; ++i) {
    if (mask & (1u << i)) v.emplace_back(RecomputeModuleName(static_cast<RecomputeModule>(i)));
  }
  return v;
}

bool ZeroStageFromNumber(long long n, ZeroStage* out) {
  if (n < 0 || n > 3) return false;
  *out = static_cast<ZeroStage>(n);
  return true;
}

bool MegatronOverlapsMoe(int64_t pp, int64_t v, Recompute rc) { return (pp <= 1 || v > 1) && rc != Recompute::kFull; }

const char* CpCommTypeName(CpCommType c) { return c == CpCommType::kAllGather ? "allgather" : "p2p"; }
bool ParseCpCommType(std::string_view text, CpCommType* out) {
  if (text == "p2p") {
    *out = CpCommType::kP2P;
    return true;
  }
  if (text == "allgather") {
    *out = CpCommType::kAllGather;
    return true;
  }
  return false;
}

const char* MoeDispatcherName(MoeDispatcher d) { return d == MoeDispatcher::kFlex ? "flex" : "alltoall"; }
bool ParseMoeDispatcher(std::string_view text, MoeDispatcher* out) {
  if (text == "alltoall") {
    *out = MoeDispatcher::kAllToAll;
    return true;
  }
  if (text == "flex") {
    *out = MoeDispatcher::kFlex;
    return true;
  }
  return false;
}

const char* PlanModeName(PlanMode m) { return m == PlanMode::kPipeDream ? "pipedream" : "auto"; }
bool ParsePlanMode(std::string_view text, PlanMode* out) {
  if (text == "auto") {
    *out = PlanMode::kAuto;
    return true;
  }
  if (text == "pipedream") {
    *out = PlanMode::kPipeDream;
    return true;
  }
  return false;
}

const char* CostSourceKindName(CostSourceKind c) { return c == CostSourceKind::kProfile ? "profile" : "analytic"; }
bool ParseCostSourceKind(std::string_view text, CostSourceKind* out) {
  if (text == "analytic") {
    *out = CostSourceKind::kAnalytic;
    return true;
  }
  if (text == "profile") {
    *out = CostSourceKind::kProfile;
    return true;
  }
  return false;
}

const char* DeviceName(Device d) { return d == Device::kCuda ? "cuda" : "cpu"; }
bool ParseDevice(std::string_view text, Device* out) {
  if (text == "cpu") {
    *out = Device::kCpu;
    return true;
  }
  if (text == "cuda") {
    *out = Device::kCuda;
    return true;
  }
  return false;
}

}  // namespace planner
