// The memory model of the joint search against the engines it stands for
// (docs/cost_model.md sections 1 and 5): the vocab-parallel logits, the tied
// embedding, and the ZeRO stages an engine runs with pipelining.
#include <string>

#include "dp_solver/evaluate.h"
#include "dp_solver/search.h"
#include "tests/test_util.h"

namespace planner {
namespace {

struct MemFixture {
  ModelSpec model;
  ClusterSpec cluster;
  MemFixture(const char* m, const char* c) {
    REQUIRE_OK(LoadModelSpec(testing::SourcePath(std::string("configs/models/") + m), &model));
    REQUIRE_OK(LoadClusterSpec(testing::SourcePath(std::string("configs/clusters/") + c), &cluster));
  }
  CostSource Source() const {
    CostSource s;
    s.model = &model;
    s.cluster = &cluster;
    return s;
  }
  size_t Row(const std::string& name) const {
    for (size_t i = 0; i < model.layers.size(); ++i) {
      if (model.layers[i].name == name) return i;
    }
    FAIL("no layer " << name);
    return 0;
  }
};

TEST_CASE("full recompute keeps the fp32 logits split over the TP ranks (vocab-parallel cross-entropy: 4 s b V / t)") {
  MemFixture f("gpt3-175b.yaml", "dgx-a100.yaml");
  const double s = 2048, v = 51200;
  const size_t loss = f.Row("loss");
  for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    for (int64_t t : {1, 2, 8}) {
      for (int64_t b : {1, 4}) {
        CostTable table;
        REQUIRE_OK(BuildCostTable(f.Source(), b, t, rc, CostOptions{}, &table));
        INFO("recompute " << static_cast<int>(rc) << " t " << t << " b " << b);
        CHECK(table.rows[loss].stash_bytes ==
              doctest::Approx(4 * s * static_cast<double>(b) * v / static_cast<double>(t)).epsilon(1e-12));
      }
    }
  }
  // The recomputed blocks still keep their input whole on every TP rank (Korthikanti Table 2: 2sbh).
  CostTable table;
  REQUIRE_OK(BuildCostTable(f.Source(), 1, 8, Recompute::kFull, CostOptions{}, &table));
  CHECK(table.rows[f.Row("block0")].stash_bytes == doctest::Approx(2 * s * 12288).epsilon(1e-12));
}

TEST_CASE("a tied embedding is held once on the stage that holds both it and the lm_head, twice across stages") {
  MemFixture f("tiny-gpt.yaml", "local-cpu.yaml");
  const double v = 512, h = 128;
  const int64_t n = static_cast<int64_t>(f.model.layers.size());
  const int64_t head = static_cast<int64_t>(f.Row("lm_head"));
  CostTable table;
  REQUIRE_OK(BuildCostTable(f.Source(), 1, 1, Recompute::kNone, CostOptions{}, &table));
  // One stage: the shared V x h matrix once, as the model's total counts it.
  CHECK(table.Params(0, n) == doctest::Approx(f.model.TotalParams()).epsilon(1e-12));
  // The embedding and the head on different stages: Megatron keeps a copy on each.
  CHECK(table.Params(0, head) + table.Params(head, n) == doctest::Approx(f.model.TotalParams() + v * h).epsilon(1e-12));
  CHECK(table.Params(1, n) == doctest::Approx(f.model.TotalParams() - table.rows[0].params + v * h).epsilon(1e-12));
  // At t = 2 each rank holds half of the one matrix, not half of each of two.
  REQUIRE_OK(BuildCostTable(f.Source(), 1, 2, Recompute::kNone, CostOptions{}, &table));
  CHECK(table.rows[static_cast<size_t>(head)].params == doctest::Approx(v * h / 2).epsilon(1e-12));
  CHECK(table.Params(0, n) == doctest::Approx(table.pre_params[static_cast<size_t>(n)] - v * h / 2).epsilon(1e-12));

  // Untied: two matrices wherever they sit.
  ModelSpec untied;
  GptConfig g = f.model.gpt;
  g.tie_embeddings = false;
  REQUIRE_OK(BuildGptModel(g, f.model.dtype, &untied));
  CostSource us = f.Source();
  us.model = &untied;
  REQUIRE_OK(BuildCostTable(us, 1, 1, Recompute::kNone, CostOptions{}, &table));
  CHECK(table.Params(0, n) == doctest::Approx(f.model.TotalParams() + v * h).epsilon(1e-12));
  CHECK(untied.TotalParams() == doctest::Approx(f.model.TotalParams() + v * h).epsilon(1e-12));

  // The plan without pipelining: weights and states of the parameters once.
  SearchOptions o;
  o.gpus = 1;
  o.pp = {1};
  Plan p;
  REQUIRE_OK(SolveAuto(f.Source(), o, &p));
  REQUIRE(p.stages.size() == 1);
  CHECK(p.stages[0].weights_bytes == doctest::Approx(f.model.TotalParams() * 4).epsilon(1e-12));
  CHECK(p.stages[0].weights_bytes + p.stages[0].optimizer_bytes ==
        doctest::Approx(f.model.TotalParams() * 16).epsilon(1e-12));
}

TEST_CASE(
    "the search takes no ZeRO-2/3 with pipelining (DeepSpeed refuses it, Megatron's distributed optimizer is ZeRO-1)") {
  MemFixture f("gpt3-175b.yaml", "dgx-a100.yaml");
  // 256 GPUs: the fastest plan was tp=2 pp=4 dp=32 with ZeRO-3 and one gradient all-reduce per iteration.
  for (bool forced_pp : {false, true}) {
    SearchOptions o;
    o.gpus = 256;
    if (forced_pp) o.pp = {4};
    Plan p;
    REQUIRE_OK(SolveAuto(f.Source(), o, &p));
    INFO("forced pp " << forced_pp << ": tp " << p.tp << " pp " << p.pp << " dp " << p.dp);
    if (forced_pp) CHECK(p.pp == 4);
    if (p.pp > 1) CHECK(ZeroStageNumber(p.zero_stage) <= 1);
    for (const auto& r : p.runners_up) {
      if (r.pp > 1) CHECK(ZeroStageNumber(r.zero_stage) <= 1);
    }
  }
  // Without pipelining ZeRO-3 stays (64 GPUs, pp = 1: nothing lower fits).
  {
    SearchOptions o;
    o.gpus = 64;
    o.pp = {1};
    Plan p;
    REQUIRE_OK(SolveAuto(f.Source(), o, &p));
    CHECK(ZeroStageNumber(p.zero_stage) == 3);
  }
  // 128 GPUs at pp = 2 fit only with ZeRO-2/3: the error says so instead of a plan no engine runs.
  {
    SearchOptions o;
    o.gpus = 128;
    o.pp = {2};
    o.schedules = {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1};  // the uniform family
    o.cost.grad_dtype = DType::kFp32;  // 18 bytes per parameter (fp16's own 2-byte gradients let ZeRO-1 fit here)
    Plan p;
    Status s = SolveAuto(f.Source(), o, &p);
    CHECK(s.code() == StatusCode::kInfeasible);
    CHECK(s.message().find("pp=2") != std::string::npos);
    CHECK(s.message().find("ZeRO-1; ZeRO-2/3 are not run with pipelining") != std::string::npos);
  }
}

TEST_CASE(
    "FSDP under pipelining (torchtitan's fsdp_with_pp): ZeRO-3 with pp, whole weights, gradients accumulated whole in "
    "their dtype") {
  MemFixture f("gpt3-175b.yaml", "dgx-a100.yaml");
  SearchOptions o;
  o.gpus = 256;
  o.pp = {2};
  o.tp = {8};
  o.microbatch = {1};
  o.schedules = {Schedule::k1F1B};
  o.recompute = {Recompute::kFull};
  o.cost.grad_dtype = DType::kFp32;
  o.top_k = 1;
  // Without the engine's FSDP-under-PP, ZeRO-3 is not taken with pp > 1.
  o.zero = {3};
  Plan refused;
  CHECK(!SolveAuto(f.Source(), o, &refused).ok());
  o.cost.fsdp_with_pp = true;
  Plan p;
  REQUIRE_OK(SolveAuto(f.Source(), o, &p));
  CHECK(p.pp == 2);
  CHECK(ZeroStageNumber(p.zero_stage) == 3);
  // Model state per device: whole 2-byte weights and the gradients FSDP2 accumulates whole across the microbatches in
  // the reduce dtype (fp32 here: 4 bytes; FSDPParam.to_accumulated_grad_if_needed), then the fp32 weights, Adam's
  // moments and the fp32 gradient shard (4 + 8 + 4 bytes) over dp; ZeRO-1 keeps 2 + 4 whole and 12 / dp.
  // 16-bit gradients (this fp16 model's own) accumulate in fp16: 2 bytes whole.
  o.cost.grad_dtype = DType::kFp16;
  Plan p16;
  REQUIRE_OK(SolveAuto(f.Source(), o, &p16));
  o.cost.grad_dtype = DType::kFp32;
  o.zero = {1};
  o.cost.fsdp_with_pp = false;
  Plan z1;
  REQUIRE_OK(SolveAuto(f.Source(), o, &z1));
  const double dp = static_cast<double>(p.dp);
  REQUIRE(p16.stages.size() == p.stages.size());
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const double params = p.stages[i].weights_bytes / 2;  // 2-byte weights
    CHECK(p.stages[i].weights_bytes + p.stages[i].optimizer_bytes == doctest::Approx(params * (6 + 16 / dp)));
    CHECK(p16.stages[i].weights_bytes + p16.stages[i].optimizer_bytes == doctest::Approx(params * (4 + 16 / dp)));
    CHECK(z1.stages[i].weights_bytes + z1.stages[i].optimizer_bytes == doctest::Approx(params * (6 + 12 / dp)));
    // The same traffic as ZeRO-1 (one gather, one reduce-scatter per iteration).
    CHECK(p.stages[i].dp_allreduce_s == doctest::Approx(z1.stages[i].dp_allreduce_s));
  }
}

TEST_CASE("FSDP under pipelining with LoRA: whole gradients and sharded state for the adapters' share alone") {
  MemFixture f("llama3-70b-lora.yaml", "dgx-h100.yaml");
  const double share = f.model.TrainableParams() / f.model.TotalParams();
  REQUIRE(share > 0);
  REQUIRE(share < 0.01);
  SearchOptions o;
  o.gpus = 64;
  o.pp = {4};
  o.tp = {8};
  o.microbatch = {1};
  o.schedules = {Schedule::k1F1B};
  o.recompute = {Recompute::kFull};
  o.cost.grad_dtype = DType::kFp32;
  o.cost.fsdp_with_pp = true;
  o.zero = {3};
  o.top_k = 1;
  Plan p;
  REQUIRE_OK(SolveAuto(f.Source(), o, &p));
  REQUIRE(p.pp == 4);
  const double dp = static_cast<double>(p.dp);
  // Per parameter of the model: the 2-byte weight, the adapters' fp32 gradient whole (4 x share), their fp32
  // weights, moments and gradient shard over dp ((12 + 4) x share / dp).
  for (const auto& s : p.stages) {
    const double params = s.weights_bytes / 2;
    CHECK(s.weights_bytes + s.optimizer_bytes == doctest::Approx(params * (2 + 4 * share + 16 * share / dp)));
  }
}

TEST_CASE("HSDP: the ZeRO state sharded over dp cp / r ranks and replicated r times; the replicas all-reduce") {
  MemFixture f("llama3-8b.yaml", "dgx-h100.yaml");
  SearchOptions o;
  o.gpus = 64;
  o.tp = {1};
  o.pp = {1};
  o.cp = {1};
  o.microbatch = {1};
  o.recompute = {Recompute::kNone};
  o.schedules = {Schedule::k1F1B};
  o.zero = {3};
  o.top_k = 1;
  o.hsdp_zero = 1u << 3;
  auto solve = [&](int64_t r) {
    SearchOptions x = o;
    x.dp_replicate = {r};
    Plan p;
    REQUIRE_OK(SolveAuto(f.Source(), x, &p));
    return p;
  };
  const Plan full = solve(1), hsdp = solve(8);
  CHECK(full.dp_replicate == 1);
  CHECK(hsdp.dp_replicate == 8);
  CHECK(hsdp.Label().find("ZeRO 3 (HSDP 8 x 8)") != std::string::npos);
  // ZeRO-3's 18 bytes per parameter (2 + 4 + 12) over the shard group: 64 ranks, then 8.
  const double params = f.model.TotalParams();
  CHECK(full.stages[0].weights_bytes + full.stages[0].optimizer_bytes == doctest::Approx(params * 18 / 64));
  CHECK(hsdp.stages[0].weights_bytes + hsdp.stages[0].optimizer_bytes == doctest::Approx(params * 18 / 8));
  CHECK(hsdp.stages[0].weights_bytes == doctest::Approx(params * 2 / 8));
  // Its traffic: gathers and reduce-scatters inside a node (8 ranks) plus each shard's all-reduce over the
  // 8 replicas; the all-reduce crosses nodes, so it costs more than nothing and the plans differ.
  CHECK(hsdp.stages[0].dp_allreduce_s != doctest::Approx(full.stages[0].dp_allreduce_s));
  // Without the engine's hierarchical stages a forced r > 1 leaves no ZeRO-3 plan.
  SearchOptions none = o;
  none.hsdp_zero = 0;
  none.dp_replicate = {8};
  Plan p;
  CHECK(!SolveAuto(f.Source(), none, &p).ok());
  // By default the search tries 1 and the degree whose shard group fills one node (8 GPUs / tp 1).
  SearchOptions def = o;
  Plan d;
  REQUIRE_OK(SolveAuto(f.Source(), def, &d));
  CHECK((d.dp_replicate == 1 || d.dp_replicate == 8));
  CHECK(d.predicted.iteration_s == doctest::Approx(std::min(full.predicted.iteration_s, hsdp.predicted.iteration_s)));
}

}  // namespace
}  // namespace planner
