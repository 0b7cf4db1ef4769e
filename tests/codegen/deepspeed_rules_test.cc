// The DeepSpeed export's self-checks (codegen/deepspeed.cc; docs/exports.md "DeepSpeed"): one test per
// rule of DeepSpeed 0.19.8 (DeepSpeedConfig's batch assertion, PipeModelDataParallelTopology's world,
// PipelineEngine's ZeRO limit, PipelineModule's parts), each with settings breaking exactly that rule;
// the stage boundaries of multi-chunk plans; the refusals.
#include <string>
#include <utility>
#include <vector>

#include "codegen/exports.h"
#include "tests/test_util.h"

namespace planner {
namespace {

using codegen_internal::DeepSpeedCheck;
using codegen_internal::DeepSpeedRuleViolation;

// pp 2 x tp 2 x dp 2, 8 layers split [0, 3, 8], batch 2 x 4 x 2 = 16: every rule holds.
DeepSpeedCheck Good() {
  DeepSpeedCheck c;
  c.world = 8;
  c.pp = 2;
  c.tp = 2;
  c.dp = 2;
  c.train_batch = 16;
  c.micro_batch = 2;
  c.grad_accum = 4;
  c.zero_stage = 1;
  c.bf16 = true;
  c.num_layers = 8;
  c.parts = {0, 3, 8};
  return c;
}

bool Says(const std::string& v, const std::string& what) { return v.find(what) != std::string::npos; }

TEST_CASE("deepspeed rules: the reference settings break none") { CHECK(DeepSpeedRuleViolation(Good()) == ""); }

TEST_CASE("deepspeed rule: the topology spans every rank (world = pp x tp x dp)") {
  DeepSpeedCheck c = Good();
  c.world = 12;
  CHECK(DeepSpeedRuleViolation(c) ==
        "world size 12 is not pipe 2 x model 2 x data 2 (PipeModelDataParallelTopology spans every rank)");
}

TEST_CASE("deepspeed rule: train_batch_size = micro x accumulation x data-parallel size") {
  DeepSpeedCheck c = Good();
  c.train_batch = 32;  // 2 x 4 x 2 = 16: the tp ranks do not multiply it
  CHECK(Says(DeepSpeedRuleViolation(c),
             "train_batch_size 32 != train_micro_batch_size_per_gpu 2 x gradient_accumulation_steps 4 x data-parallel "
             "size 2"));
  c.train_batch = 0;  // not written (AutoTP): nothing to check
  CHECK(DeepSpeedRuleViolation(c) == "");
}

TEST_CASE("deepspeed rule: micro batch and accumulation are positive") {
  DeepSpeedCheck c = Good();
  c.train_batch = 0;
  c.grad_accum = 0;
  CHECK(DeepSpeedRuleViolation(c) == "micro batch 2 and gradient accumulation 0 must be positive");
}

TEST_CASE("deepspeed rule: ZeRO stage 0-3") {
  DeepSpeedCheck c = Good();
  c.zero_stage = 4;
  CHECK(DeepSpeedRuleViolation(c) == "zero_optimization.stage 4 is not 0-3");
}

TEST_CASE("deepspeed rule: the pipeline engine runs ZeRO-0 or 1") {
  DeepSpeedCheck c = Good();
  c.zero_stage = 2;
  CHECK(DeepSpeedRuleViolation(c) ==
        "zero_optimization.stage 2 with 2 pipeline stages: PipelineEngine allows ZeRO-0 or 1");
  c.pp = 1;
  c.dp = 4;
  c.parts = {0, 8};
  c.train_batch = 32;
  CHECK(DeepSpeedRuleViolation(c) == "");  // without pipelining ZeRO-2 runs
}

TEST_CASE("deepspeed rule: fp16 and bf16 exclusive") {
  DeepSpeedCheck c = Good();
  c.fp16 = true;
  CHECK(DeepSpeedRuleViolation(c) == "fp16 and bf16 both enabled (DeepSpeedConfig asserts at most one)");
}

TEST_CASE("deepspeed rule: pp + 1 boundaries from 0 to the layer count") {
  DeepSpeedCheck c = Good();
  c.parts = {0, 3, 7};
  CHECK(DeepSpeedRuleViolation(c) == "parts [0, 3, 7] are not 2 + 1 boundaries from 0 to the model's 8 layers");
  c.parts = {0, 2, 5, 8};
  CHECK(Says(DeepSpeedRuleViolation(c), "are not 2 + 1 boundaries"));
}

TEST_CASE("deepspeed rule: every stage holds a layer") {
  DeepSpeedCheck c = Good();
  c.parts = {0, 8, 8};
  CHECK(DeepSpeedRuleViolation(c) ==
        "parts [0, 8, 8]: stage 1 holds no layer (PipelineModule needs every stage non-empty)");
}

TEST_CASE("deepspeed rule: AutoTP runs without PipelineModule") {
  DeepSpeedCheck c = Good();
  c.autotp = 2;
  CHECK(Says(DeepSpeedRuleViolation(c), "tensor_parallel.autotp_size 2 with 2 pipeline stages"));
}

// pp 2 ranks, the given stages (layer counts) in model order.
LaunchPlan Stages(Schedule s, const std::vector<int64_t>& sizes) {
  LaunchPlan L;
  L.schedule = s;
  L.pp = 2;
  L.interleave = static_cast<int64_t>(sizes.size()) / 2;
  int64_t first = 0;
  for (int64_t n : sizes) {
    LaunchStage st;
    st.first_layer = first;
    st.last_layer = first + n - 1;
    first += n;
    L.stages.push_back(st);
  }
  return L;
}

ModelSpec Layers(int64_t n) {
  ModelSpec m;
  m.layers.resize(static_cast<size_t>(n));
  return m;
}

TEST_CASE("deepspeed parts: one stage per rank keeps the plan's boundaries") {
  CHECK(codegen_internal::DeepSpeedParts(Layers(8), Stages(Schedule::k1F1B, {3, 5})) == std::vector<int64_t>{0, 3, 8});
}

TEST_CASE("deepspeed parts: interleaved chunks become one stage per rank with the rank's layer count") {
  // chunks 1, 2, 3, 4 layers: rank 0 holds chunks 0 and 2 (1 + 3), rank 1 chunks 1 and 3 (2 + 4).
  CHECK(codegen_internal::DeepSpeedParts(Layers(10), Stages(Schedule::kInterleaved, {1, 2, 3, 4})) ==
        std::vector<int64_t>{0, 4, 10});
  // the V: rank 0 holds chunks 0 and 3 (1 + 4), rank 1 chunks 1 and 2 (2 + 3).
  CHECK(codegen_internal::DeepSpeedParts(Layers(10), Stages(Schedule::kDualPipeV, {1, 2, 3, 4})) ==
        std::vector<int64_t>{0, 5, 10});
}

TEST_CASE("deepspeed export: PipeDream's asynchronous schedule is refused in a file and one note") {
  LaunchPlan L = Stages(Schedule::kPipeDream, {3, 5});
  L.interleave = 1;
  L.dp = 1;
  L.tp = 1;
  L.ranks.resize(2);
  codegen_internal::Files files;
  std::vector<std::string> notes;
  codegen_internal::AddDeepSpeedFiles(Plan{}, Layers(8), L, &files, &notes);
  REQUIRE(files.size() == 1);
  CHECK(files[0].first == "deepspeed/refused.txt");
  CHECK(Says(files[0].second, "PipeDream's asynchronous schedule"));
  REQUIRE(notes.size() == 1);
  CHECK(Says(notes[0], "deepspeed: not written: PipeDream's asynchronous schedule"));
}

}  // namespace
}  // namespace planner
