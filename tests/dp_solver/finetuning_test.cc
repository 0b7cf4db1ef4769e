// Fine-tuning costs (docs/cost_model.md "LoRA" and "Packed samples"): a LoRA model against the same model trained
// whole at one forced layout: the same forward, a backward without the base's weight-gradient GEMMs, gradients,
// optimizer state and data-parallel traffic for the adapters alone (closed forms on the model state), a solve that
// fits where training every weight does not; packed samples shorten the attention core and nothing else.
#include <string>

#include "dp_solver/cost_model.h"
#include "dp_solver/search.h"
#include "tests/dp_solver/forced_layout.h"
#include "spec/model_state.h"
#include "tests/test_util.h"

namespace planner {
namespace {

const char* kBase =
    "name: x\nglobal_batch: 64\nprecision: bf16\ngpt: {layers: 8, hidden: 1024, heads: 16, kv_heads: 4, ffn: 4096, "
    "ffn_act: swiglu, norm: rmsnorm, position: rope, bias: false, tie_embeddings: false, dropout: 0, seq: 2048, "
    "vocab: 32000";

ModelSpec Model(const std::string& extra) {
  ModelSpec m;
  REQUIRE_OK(ParseModelSpec("m.yaml", std::string(kBase) + extra + "}\n", &m));
  return m;
}

ClusterSpec H100() {
  ClusterSpec c;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-h100.yaml"), &c));
  return c;
}

Plan Solve(const ModelSpec& m, const ClusterSpec& c, const SearchOptions& o) {
  CostSource src;
  src.model = &m;
  src.cluster = &c;
  Plan plan;
  REQUIRE_OK(SolveAuto(src, o, &plan));
  return plan;
}

TEST_CASE("LoRA's model state: gradients and optimizer state for the trainable share alone, the weights whole") {
  const ModelSpec full = Model(""), lora = Model(", lora: {rank: 16}");
  const double f = lora.TrainableParams() / lora.TotalParams();
  CHECK(f > 0);
  CHECK(f < 0.05);
  const StateBytes a = ModelStateBytes(&full, std::nullopt, 0), b = ModelStateBytes(&lora, std::nullopt, 0);
  CHECK(a.trainable == 1);
  CHECK(b.trainable == doctest::Approx(f).epsilon(1e-12));
  CHECK(b.weight == a.weight);  // every weight held in bf16
  CHECK(b.grad == doctest::Approx(a.grad * f));
  CHECK(b.optimizer == doctest::Approx(a.optimizer * f));
  CHECK(b.grad_comm == doctest::Approx(a.grad_comm * f));
  CHECK(b.total == doctest::Approx(a.weight + f * (a.grad + a.optimizer)));
  // The distributed optimizer (ZeRO-1) over 8: weights + gradients + optimizer / 8, of which the adapters' only.
  CHECK(StateBytesPerParam(b, 1, 8) == doctest::Approx(a.weight + f * a.grad + f * a.optimizer / 8));
  // --bytes-per-param is the memory as the user counts it; the gradients reduced are still the adapters'.
  const StateBytes u = ModelStateBytes(&lora, std::nullopt, 14);
  CHECK(u.total == 14);
  CHECK(u.trainable == doctest::Approx(f).epsilon(1e-12));
  CHECK(u.grad_comm == doctest::Approx(a.grad_comm * f));
}

TEST_CASE("LoRA against training every weight, one layout: forward equal, backward less, DP traffic the adapters'") {
  const ClusterSpec c = H100();
  // The recipes' LoRA (rank 16 on linear_qkv alone: Megatron-Bridge's and NeMo's performance recipes).
  const ModelSpec full = Model(""), lora = Model(", lora: {rank: 16, targets: [qkv]}");
  const SearchOptions o = testing::ForcedLayout(8, 1, 1, 1);
  const Plan pf = Solve(full, c, o), pl = Solve(lora, c, o);
  const PlanStage &sf = pf.stages[0], &sl = pl.stages[0];
  // The adapter's GEMMs are small (rank 16 of a 1024-wide input), its scale and add pass over the QKV output five
  // times: a few percent of this small layer's forward.
  CHECK(sl.forward_s > sf.forward_s);
  CHECK(sl.forward_s < 1.08 * sf.forward_s);
  // The base's weight gradients gone: the backward loses most of the weight pass (what is left of it: the adapters'
  // weight gradients and half the backward's memory-bound work, which the flat model splits evenly between B and W).
  const double bwd_full = sf.backward_input_s + sf.backward_weight_s,
               bwd_lora = sl.backward_input_s + sl.backward_weight_s;
  CHECK(bwd_full - bwd_lora > 0.5 * sf.backward_weight_s);
  CHECK(sl.backward_weight_s < 0.5 * sf.backward_weight_s);
  CHECK(pl.predicted.iteration_s < pf.predicted.iteration_s);
  // Gradients reduce-scattered and parameters gathered for the trainable share: far less data-parallel time.
  CHECK(sl.dp_allreduce_s < 0.2 * sf.dp_allreduce_s);
  CHECK(sl.optimizer_bytes < 0.05 * sf.optimizer_bytes);
  CHECK(sl.weights_bytes == doctest::Approx(sf.weights_bytes).epsilon(0.05));  // the weights, adapters included
}

TEST_CASE("LoRA fits where training every weight does not: 8 GPUs, ZeRO-0, a model whose Adam state is 16 B/param") {
  const ClusterSpec c = H100();
  // 48 layers of hidden 4096: ~10B parameters, 160 GB of weights, gradients and Adam state on one GPU of each TP 8
  // group... at TP 1 and DP 8 with ZeRO-0 every GPU holds it all.
  const std::string big =
      "name: x\nglobal_batch: 64\nprecision: bf16\ngpt: {layers: 48, hidden: 4096, heads: 32, "
      "kv_heads: 8, ffn: 14336, ffn_act: swiglu, norm: rmsnorm, position: rope, bias: false, "
      "tie_embeddings: false, dropout: 0, seq: 2048, vocab: 32000";
  ModelSpec full, lora;
  REQUIRE_OK(ParseModelSpec("f.yaml", big + "}\n", &full));
  REQUIRE_OK(ParseModelSpec("l.yaml", big + ", lora: {rank: 16, targets: [qkv]}}\n", &lora));
  CostSource src;
  src.cluster = &c;
  src.model = &full;
  Plan plan;
  const Status st = SolveAuto(src, testing::ForcedLayout(8, 1, 1, 0), &plan);
  CHECK(st.code() == StatusCode::kInfeasible);
  const Plan pl = Solve(lora, c, testing::ForcedLayout(8, 1, 1, 0));
  CHECK(pl.predicted.peak_memory_bytes < c.UsableMemoryBytes());
}

// One block's row (the second layer: block0) at tp 2, with or without SP.
LayerCostRow BlockRow(const ModelSpec& m, const ClusterSpec& c, bool sp) {
  CostSource src;
  src.model = &m;
  src.cluster = &c;
  TableShape shape;
  shape.tp = 2;
  shape.sp = sp;
  CostTable t;
  REQUIRE_OK(BuildCostTable(src, shape, CostOptions{}, &t));
  REQUIRE(t.names[1] == "block0");
  return t.rows[1];
}

TEST_CASE("LoRA's adapters under TP: their own collectives and, with SP, their gathered input kept whole") {
  const ClusterSpec c = H100();
  const double s = 2048, h = 1024, dt = 2, r = 16;
  const std::vector<int64_t> tp2 = GroupSpread(c, 2, 1);
  const ModelSpec full = Model(""), qkv = Model(", lora: {rank: 16, targets: [qkv]}"),
                  proj = Model(", lora: {rank: 16, targets: [proj]}");
  // A column-parallel target (qkv): under SP the adapter gathers its input (s h) forward and reduce-scatters its
  // gradient backward; without SP its input gradient is all-reduced.
  const LayerCostRow f_sp = BlockRow(full, c, true), q_sp = BlockRow(qkv, c, true);
  CHECK(q_sp.tp_comm_s - f_sp.tp_comm_s == doctest::Approx(2 * AllGatherSeconds(c, dt * s * h, tp2)).epsilon(1e-9));
  const LayerCostRow f_no = BlockRow(full, c, false), q_no = BlockRow(qkv, c, false);
  CHECK(q_no.tp_comm_s - f_no.tp_comm_s == doctest::Approx(AllReduceSeconds(c, dt * s * h, tp2)).epsilon(1e-9));
  // A row-parallel target (proj): B's output gathered whole forward, with or without SP; under SP scattered back,
  // whose backward gathers.
  const LayerCostRow p_sp = BlockRow(proj, c, true), p_no = BlockRow(proj, c, false);
  CHECK(p_sp.tp_comm_s - f_sp.tp_comm_s == doctest::Approx(2 * AllGatherSeconds(c, dt * s * h, tp2)).epsilon(1e-9));
  CHECK(p_no.tp_comm_s - f_no.tp_comm_s == doctest::Approx(AllGatherSeconds(c, dt * s * h, tp2)).epsilon(1e-9));
  CHECK(q_sp.tp_total_s - f_sp.tp_total_s == doctest::Approx(q_sp.tp_comm_s - f_sp.tp_comm_s).epsilon(1e-9));
  // Stash: A's output (s r, split over TP with its r) and, under SP, the adapter's gathered input s h whole.
  CHECK(q_sp.stash_bytes - f_sp.stash_bytes == doctest::Approx(dt * s * r / 2 + dt * s * h).epsilon(1e-9));
  CHECK(q_no.stash_bytes - f_no.stash_bytes == doctest::Approx(dt * s * r / 2).epsilon(1e-9));
}

TEST_CASE("packed samples: the attention core shrinks with the samples' length, the GEMMs do not") {
  const ClusterSpec c = H100();
  const ModelSpec whole = Model(""), packed = Model(", packed_length: 128");
  const SearchOptions o = testing::ForcedLayout(8, 1, 1, 1);
  const Plan pw = Solve(whole, c, o), pp = Solve(packed, c, o);
  CHECK(pp.stages[0].forward_s < pw.stages[0].forward_s);
  CHECK(pp.stages[0].backward_weight_s == doctest::Approx(pw.stages[0].backward_weight_s));  // no attention there
  CHECK(pp.predicted.model_flops_per_iteration < pw.predicted.model_flops_per_iteration);
}

}  // namespace
}  // namespace planner
