// ParallelLayout (spec/layout.h): the one label, and the one reader of the layout's sizes that plan.yaml,
// its runners_up and launch.yaml share.
#include <yaml-cpp/yaml.h>

#include "spec/launch_plan.h"
#include "spec/layout.h"
#include "spec/plan.h"
#include "spec/yaml_reader.h"
#include "tests/test_util.h"

namespace planner {
namespace {

TEST_CASE("the layout label: every dimension, the interleave and the state after the ZeRO stage") {
  ParallelLayout l;
  l.config = "16";
  l.tp = 8, l.pp = 8, l.dp = 16, l.cp = 2, l.ep = 4, l.etp = 1, l.sequence_parallel = true;
  l.microbatch_size = 1, l.num_microbatches = 128, l.schedule = Schedule::kInterleaved, l.interleave = 2;
  l.recompute = Recompute::kFull, l.recompute_num_layers = 3, l.zero_stage = ZeroStage::kOptimizer;
  CHECK(l.ParallelString() == "8-8-16");
  CHECK(l.Label() ==
        "tp-pp-dp 8-8-16 | cp 2 | sp on | replication 16 | microbatch 1 x 128 | schedule interleaved (v=2) | "
        "recompute full:3 | ZeRO 1 | ep 4 etp 1");
  CHECK(l.Label(" | gradients fp32") ==
        "tp-pp-dp 8-8-16 | cp 2 | sp on | replication 16 | microbatch 1 x 128 | schedule interleaved "
        "(v=2) | recompute full:3 | ZeRO 1 | gradients fp32 | ep 4 etp 1");
  l.interleave = 1, l.schedule = Schedule::k1F1B, l.recompute = Recompute::kSelective,
  l.recompute_modules = kDefaultRecomputeModules;
  CHECK(l.Label().find("| schedule 1f1b | recompute selective | ZeRO 1 |") != std::string::npos);
}

TEST_CASE("Plan, PlanSummary and LaunchPlan are one layout type") {
  Plan p;
  p.tp = 4, p.pp = 2, p.dp = 8;
  const ParallelLayout& as_layout = p;
  CHECK(as_layout.ParallelString() == "4-2-8");
  PlanSummary s;
  static_cast<ParallelLayout&>(s) = as_layout;
  CHECK(s.ParallelString() == "4-2-8");
  LaunchPlan L;
  static_cast<ParallelLayout&>(L) = as_layout;
  CHECK(L.tp * L.pp * L.dp == 64);
}

Status Read(const std::string& text, const std::string& prefix, bool required, ParallelLayout* out) {
  const YAML::Node n = YAML::Load(text);
  return ReadLayoutSizes(YamlReader("f.yaml"), n, prefix, required, out);
}

TEST_CASE("ReadLayoutSizes: values, defaults, required fields and bounds, each named with its prefix") {
  ParallelLayout l;
  REQUIRE(Read("{tp: 2, pp: 4, dp: 8, cp: 2, sequence_parallel: true, microbatch_size: 2, num_microbatches: 16}", "",
               true, &l)
              .ok());
  CHECK(l.tp == 2);
  CHECK(l.pp == 4);
  CHECK(l.dp == 8);
  CHECK(l.cp == 2);
  CHECK(l.ep == 1);  // optional: left as it was
  CHECK(l.sequence_parallel);
  CHECK(l.num_microbatches == 16);
  ParallelLayout m;
  CHECK(Read("{tp: 2}", "runners_up[1].", false, &m).ok());  // a runner-up needs none of them
  CHECK(m.tp == 2);
  CHECK(m.pp == 1);
  const Status missing = Read("{tp: 2, dp: 1, microbatch_size: 1, num_microbatches: 1}", "", true, &m);
  CHECK(missing.message().find("field 'pp'") != std::string::npos);
  const Status zero = Read("{tp: 0}", "runners_up[1].", false, &m);
  CHECK(zero.message().find("field 'runners_up[1].tp'") != std::string::npos);
  const Status huge = Read("{ep: 99999999999999}", "", false, &m);
  CHECK(huge.message().find("field 'ep': must be at most") != std::string::npos);
}

}  // namespace
}  // namespace planner
