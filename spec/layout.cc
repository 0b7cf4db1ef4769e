#include "spec/layout.h"

#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "spec/input_limits.h"
#include "spec/yaml_reader.h"

namespace planner {

std::string ParallelLayout::ParallelString() const { return fmt::format("{}-{}-{}", tp, pp, dp); }

std::string ParallelLayout::Label(const std::string& state) const {
  return fmt::format(
      "tp-pp-dp {} | cp {} | sp {} | replication {} | microbatch {} x {} | schedule {}{} | recompute {} | ZeRO {}{} | "
      "ep {} etp {}",
      ParallelString(), cp, sequence_parallel ? "on" : "off", config, microbatch_size, num_microbatches,
      ScheduleName(schedule), interleave > 1 ? fmt::format(" (v={})", interleave) : "",
      RecomputeLabel(recompute, recompute_num_layers, recompute_modules),
      dp_replicate > 1
          ? fmt::format("{} (HSDP {} x {})", ZeroStageNumber(zero_stage), dp_replicate, dp * cp / dp_replicate)
          : std::to_string(ZeroStageNumber(zero_stage)),
      state, ep, etp);
}

Status ReadLayoutSizes(const YamlReader& r, const YAML::Node& map, const std::string& prefix, bool required,
                       ParallelLayout* out) {
  for (auto [key, size, need] : {std::tuple{"tp", &out->tp, required},
                                 {"pp", &out->pp, required},
                                 {"dp", &out->dp, required},
                                 {"cp", &out->cp, false},
                                 {"ep", &out->ep, false},
                                 {"etp", &out->etp, false},
                                 {"dp_replicate", &out->dp_replicate, false}}) {
    PLANNER_RETURN_IF_ERROR(GetIntInRange(r, map, key, prefix + key, size, need, 1, kMaxRanks));
  }
  if ((out->dp * out->cp) % out->dp_replicate != 0)
    return r.FieldError(
        map["dp_replicate"], prefix + "dp_replicate",
        fmt::format("{} does not divide dp x cp = {}; give a divisor", out->dp_replicate, out->dp * out->cp));
  PLANNER_RETURN_IF_ERROR(
      r.GetBool(map, "sequence_parallel", prefix + "sequence_parallel", &out->sequence_parallel, false));
  PLANNER_RETURN_IF_ERROR(GetIntInRange(r, map, "microbatch_size", prefix + "microbatch_size", &out->microbatch_size,
                                        required, 1, kMaxBatch));
  return GetIntInRange(r, map, "num_microbatches", prefix + "num_microbatches", &out->num_microbatches, required, 1,
                       kMaxMicrobatches);
}

std::string RecomputeLabel(Recompute r, int64_t num_layers) {
  if (r == Recompute::kFull && num_layers > 0) return "full:" + std::to_string(num_layers);
  return RecomputeName(r);
}

std::string RecomputeLabel(Recompute r, int64_t num_layers, uint32_t modules) {
  if (r != Recompute::kSelective || modules == kDefaultRecomputeModules) return RecomputeLabel(r, num_layers);
  return fmt::format("selective:{}", fmt::join(RecomputeModuleList(modules), "+"));
}

}  // namespace planner
