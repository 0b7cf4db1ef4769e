// FP8 weights in memory (docs/cost_model.md section 5, "FP8 weight copies and FP8 parameters"): Transformer
// Engine's cached FP8 copy beside the bf16 weight, sized by the kernel table's recipe (Hopper: data + transpose,
// Blackwell per-tensor: data, MXFP8: both orientations and their scales), and FP8 parameters (solve
// --fp8-param-gather) holding that copy alone with gathers in FP8; closed forms on the model state, then one forced
// layout solved both ways.
#include <string>

#include "dp_solver/cost_model.h"
#include "dp_solver/evaluate.h"
#include "dp_solver/search.h"
#include "tests/dp_solver/forced_layout.h"
#include "spec/engine_spec.h"
#include "spec/kernel_table.h"
#include "spec/model_state.h"
#include "tests/test_util.h"

namespace planner {
namespace {

const char* kFp8 =
    "name: x\nglobal_batch: 64\nprecision: fp8\ngpt: {layers: 8, hidden: 1024, heads: 16, kv_heads: 4, ffn: 4096, "
    "ffn_act: swiglu, norm: rmsnorm, position: rope, bias: false, tie_embeddings: false, dropout: 0, seq: 2048, "
    "vocab: 32000}\n";

struct Sources {
  ModelSpec model;
  ClusterSpec cluster;
  KernelTable kernels;
  EngineSpec engine;
  Sources(const char* table, const char* engine_name, const char* cluster_file = "dgx-h100.yaml") {
    REQUIRE_OK(ParseModelSpec("m.yaml", kFp8, &model));
    REQUIRE_OK(LoadClusterSpec(testing::SourcePath(std::string("configs/clusters/") + cluster_file), &cluster));
    REQUIRE_OK(LoadKernelTable(table, &kernels));
    REQUIRE_OK(LoadEngineSpec(engine_name, &engine));
  }
  CostSource Source() const {
    CostSource s;
    s.model = &model;
    s.cluster = &cluster;
    s.kernels = &kernels;
    s.engine = &engine;
    return s;
  }
  StateBytes State(bool fp8_params, double bytes_per_param = 0) const {
    SearchOptions o;
    o.cost.fp8_params = fp8_params;
    o.cost.bytes_per_param = bytes_per_param;
    return MakeStateBytes(Source(), o);
  }
};

TEST_CASE("KeepFp8Params: the FP8 weight alone, no copy, gathers in FP8; a user's total keeps its bytes") {
  ModelSpec m;
  REQUIRE_OK(ParseModelSpec("m.yaml", kFp8, &m));
  const StateBytes base = ModelStateBytes(&m, std::nullopt, 0);
  CHECK(base.weight == 2);  // the bf16 weight
  CHECK(base.fp8_weight_copy == 2);
  CHECK(base.param_gather == 2);
  CHECK(base.total == 2 + 4 + 12);
  StateBytes p = base;
  KeepFp8Params(1.5, 1, false, &p);  // a made-up recipe's bytes: the weight and the total follow them
  CHECK(p.fp8_params);
  CHECK(p.weight == 1.5);
  CHECK(p.fp8_weight_copy == 0);
  CHECK(p.param_gather == 1);
  CHECK(p.total == 1.5 + 4 + 12);
  p = base;
  KeepFp8Params(2, 1, false, &p);
  // ZeRO-1 over 8: 4 B of bf16 weight and FP8 copy become the 2 B FP8 weight (data + transpose on Hopper).
  CHECK(StateBytesPerParam(base, 1, 8) - StateBytesPerParam(p, 1, 8) == doctest::Approx(2));
  StateBytes q = base;
  KeepFp8Params(1, 1, false, &q);  // Blackwell per-tensor: no transpose
  CHECK(StateBytesPerParam(q, 1, 8) == doctest::Approx(1 + 4 + 12.0 / 8));
  // --bytes-per-param 16: the total stays, the FP8 weight part of it (the gradients and optimizer what is left).
  StateBytes u = ModelStateBytes(&m, std::nullopt, 16);
  KeepFp8Params(2.0625, 2, true, &u);
  CHECK(u.total == 16);
  CHECK(u.weight == 2.0625);
  CHECK(u.fp8_weight_copy == 0);
  CHECK(u.param_gather == 2);
  CHECK(StateBytesPerParam(u, 0, 1) == 16);
  // NeMo 1.x's SFT as its launcher 24.07 ran it: FP8 parameters, bf16 gradients, Apex's bf16 master and moments:
  // 2 + 2 + 6 = 10 B per parameter where the fp32 state holds 16, 4 + 6 / d at ZeRO-1.
  StateBytes n = ModelStateBytes(&m, DType::kBf16, 0, OptimizerState::kBf16Master);
  KeepFp8Params(2, 1, false, &n);
  CHECK(n.total == 2 + 2 + 6);
  CHECK(StateBytesPerParam(n, 0, 1) == 10);
  CHECK(StateBytesPerParam(n, 1, 4) == doctest::Approx(4 + 6.0 / 4));
  StateBytes n32 = ModelStateBytes(&m, DType::kBf16, 0, OptimizerState::kFp32);
  KeepFp8Params(2, 1, false, &n32);
  CHECK(StateBytesPerParam(n32, 0, 1) - StateBytesPerParam(n, 0, 1) == 6);
  // Apex's bf16 states step on the bf16 gradient shard as it is; Megatron's fp32 path casts it to fp32 first.
  CHECK(n.step_grad_copy == 0);
  CHECK(ModelStateBytes(&m, DType::kBf16, 0, OptimizerState::kBf16).step_grad_copy == 0);
  CHECK(n32.step_grad_copy == 4);
}

TEST_CASE("the cached FP8 copy and FP8 parameters follow the kernel table's recipe per GPU") {
  // Hopper: data + transpose (TN-only FP8 GEMMs); delayed scaling is Megatron-Core's default recipe.
  Sources h("h100", "megatron-core");
  REQUIRE(h.engine.fp8_weight_from_recipe);
  REQUIRE(h.kernels.fp8_recipes.at(h.engine.fp8_recipe).weight_bytes == 2);  // the table's figure, not the default
  CHECK(h.State(false).fp8_weight_copy == 2);
  CHECK(h.State(false).weight == 2);
  const StateBytes hp = h.State(true);
  CHECK(hp.weight == 2);
  CHECK(hp.fp8_weight_copy == 0);
  CHECK(hp.param_gather == 1);
  // The lookup reads the table: another figure in it moves both (and --bytes-per-param keeps the engine's copy).
  h.kernels.fp8_recipes[h.engine.fp8_recipe].weight_bytes = 3;
  h.kernels.fp8_recipes[h.engine.fp8_recipe].param_gather_bytes = 2;
  CHECK(h.State(false).fp8_weight_copy == 3);
  CHECK(h.State(false, 18).fp8_weight_copy == 3);
  CHECK(h.State(true).weight == 3);
  CHECK(h.State(true).param_gather == 2);
  // Blackwell per-tensor: the data alone.
  Sources b("b200", "megatron-core", "b200.yaml");
  CHECK(b.State(false).fp8_weight_copy == 1);
  CHECK(b.State(true).weight == 1);
  CHECK(b.State(true).param_gather == 1);
  // MXFP8: both orientations and a scale per 32 elements each; gathered as bf16.
  b.engine.fp8_recipe = "mxfp8";
  CHECK(b.State(false).fp8_weight_copy == doctest::Approx(2.0625));
  CHECK(b.State(true).weight == doctest::Approx(2.0625));
  CHECK(b.State(true).param_gather == 2);
  // An engine that casts per use keeps no copy (torchao float8: memory.fp8_weight_bytes 0).
  Sources t("h100", "torchtitan");
  CHECK_FALSE(t.engine.CachesFp8Weights());
  CHECK(t.State(false).fp8_weight_copy == 0);
  CHECK(t.engine.fp8_param_gather.empty());
  // A bf16 model has no FP8 weights to keep either way.
  Sources bf("h100", "megatron-core");
  REQUIRE_OK(BuildGptModel(bf.model.gpt, DType::kBf16, &bf.model));
  CHECK(bf.State(false).fp8_weight_copy == 0);
  CHECK_FALSE(bf.State(true).fp8_params);
}

TEST_CASE("FP8 parameters on one forced layout: 2 B per parameter less on Hopper, gathers halved, compute equal") {
  const Sources h("h100", "megatron-core");
  SearchOptions o = testing::ForcedLayout(8, 1, 1, 1);
  o.cost.overlap_param_gather = false;  // the gather exposed, to compare it whole
  Plan a, b;
  REQUIRE_OK(SolveAuto(h.Source(), o, &a));
  o.cost.fp8_params = true;
  REQUIRE_OK(SolveAuto(h.Source(), o, &b));
  CHECK_FALSE(a.fp8_param_gather);
  CHECK(b.fp8_param_gather);
  const PlanStage &sa = a.stages[0], &sb = b.stages[0];
  const double params = h.model.TotalParams();
  // weights_bytes: bf16 weight + its FP8 copy (2 + 2) against the FP8 weight alone (2).
  CHECK(sa.weights_bytes == doctest::Approx(4 * params).epsilon(1e-9));
  CHECK(sb.weights_bytes == doctest::Approx(2 * params).epsilon(1e-9));
  CHECK(a.predicted.peak_memory_bytes - b.predicted.peak_memory_bytes == doctest::Approx(2 * params).epsilon(1e-6));
  CHECK(sa.forward_s == sb.forward_s);
  CHECK(sa.backward_input_s + sa.backward_weight_s == sb.backward_input_s + sb.backward_weight_s);
  // The parameter all-gather moves 1 B per parameter instead of 2: less data-parallel time, the gradients' equal.
  CHECK(sb.dp_allreduce_s < sa.dp_allreduce_s);
  CHECK(b.predicted.iteration_s < a.predicted.iteration_s);
}

TEST_CASE("LoRA under FP8 parameters: the frozen base in FP8, the bf16 adapters gathered at 2 B as without them") {
  Sources h("h100", "megatron-core");
  // Llama 3 70B's widths over 8 layers: 19M adapter parameters, 38 MB a gather (bytes, not latency, decide it).
  const std::string text =
      "name: x\nglobal_batch: 64\nprecision: fp8\ngpt: {layers: 8, hidden: 8192, heads: 64, kv_heads: 8, ffn: 28672, "
      "ffn_act: swiglu, norm: rmsnorm, position: rope, bias: false, tie_embeddings: false, dropout: 0, seq: 2048, "
      "vocab: 32000, lora: {rank: 16}}\n";
  REQUIRE_OK(ParseModelSpec("m.yaml", text, &h.model));
  REQUIRE(h.model.TrainableParams() < 0.05 * h.model.TotalParams());
  SearchOptions o = testing::ForcedLayout(8, 1, 1, 1);
  o.cost.overlap_param_gather = false;
  o.cost.overlap_grad_reduce = false;
  Plan a, b;
  REQUIRE_OK(SolveAuto(h.Source(), o, &a));
  o.cost.fp8_params = true;
  REQUIRE_OK(SolveAuto(h.Source(), o, &b));
  // ZeRO-1 gathers what the step updated, the adapters, in bf16 either way; the reduce-scatter is theirs too (the
  // gather's per-call latency scales with the bytes' share as LoRA's does: within 1%; at 1 B it would be ~1/6 less).
  CHECK(b.stages[0].dp_allreduce_s / a.stages[0].dp_allreduce_s == doctest::Approx(1).epsilon(0.01).scale(0));
  CHECK(b.stages[0].dp_allreduce_s > 1e-4);  // bytes-bound: 38 MB at NVLink's rate
  // The frozen weights: bf16 + the FP8 copy (4 B) against the FP8 weight (2 B).
  CHECK(a.predicted.peak_memory_bytes - b.predicted.peak_memory_bytes ==
        doctest::Approx(2 * h.model.TotalParams()).epsilon(1e-6));
}

TEST_CASE(
    "FP8 parameters over one data-parallel rank run at ZeRO-0's cost (the distributed optimizer shards nothing)") {
  const Sources h("h100", "megatron-core");
  SearchOptions o = testing::ForcedLayout(8, 4, 2, 1);
  o.cost.fp8_params = true;
  Plan p;
  REQUIRE_OK(SolveAuto(h.Source(), o, &p));
  CHECK(p.zero_stage == ZeroStage::kNone);
  CHECK(p.fp8_param_gather);
}

}  // namespace
}  // namespace planner
