// Sequence and context parallelism, the ZeRO stages as engines run them, the overlapped
// data-parallel communication, FP8 and the plan's FLOPs figures, against their closed forms
// (docs/cost_model.md sections 2, 3 and 5).
#include <cmath>
#include <string>

#include "dp_solver/candidates.h"
#include "dp_solver/evaluate.h"
#include "dp_solver/search.h"
#include "tests/test_util.h"

namespace planner {
namespace {

struct ParFixture {
  ModelSpec model;
  ClusterSpec cluster;
  ParFixture(const char* m, const char* c) {
    REQUIRE_OK(LoadModelSpec(testing::SourcePath(std::string("configs/models/") + m), &model));
    if (model.is_gpt) {  // the closed forms below are Korthikanti's, for Megatron's unfused attention (s^2 terms)
      model.gpt.attention = "unfused";
      REQUIRE_OK(BuildGptModel(model.gpt, model.dtype, &model));
    }
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
  CostTable Table(TableShape shape) const {
    CostTable t;
    REQUIRE_OK(BuildCostTable(Source(), shape, CostOptions{}, &t));
    return t;
  }
};

TEST_CASE("sequence parallelism divides the replicated activations and the lm_head input by t") {
  ParFixture f("gpt3-175b.yaml", "dgx-a100.yaml");
  const double s = 2048, h = 12288, t = 8;
  const size_t block = f.Row("block0"), head = f.Row("lm_head"), norm = f.Row("final_layernorm");
  const Layer& l = f.model.layers[block];
  for (int64_t b : {1, 2}) {
    const double bd = static_cast<double>(b);
    CostTable off = f.Table({b, 8, 1, false, Recompute::kNone}), on = f.Table({b, 8, 1, true, Recompute::kNone});
    CHECK(off.sp == false);
    CHECK(on.sp == true);
    // Korthikanti Table 2: sbh(10 + 24/t + 5as/(ht)) without SP, sbh/t (34 + 5as/h) with it.
    const double rep = l.stash_bytes_tp_replicated;
    CHECK(off.rows[block].stash_bytes == doctest::Approx(bd * (rep + (l.stash_bytes - rep) / t)).epsilon(1e-12));
    CHECK(on.rows[block].stash_bytes == doctest::Approx(bd * l.stash_bytes / t).epsilon(1e-12));
    CHECK(on.rows[block].stash_bytes == doctest::Approx(bd * s * h * (34 + 5 * 96 * s / h) / t).epsilon(1e-12));
    // The lm_head's input: replicated without SP, split with it.
    CHECK(off.rows[head].stash_bytes == doctest::Approx(bd * 2 * s * h).epsilon(1e-12));
    CHECK(on.rows[head].stash_bytes == doctest::Approx(bd * 2 * s * h / t).epsilon(1e-12));
    // The final layernorm works on s / t tokens.
    CHECK(on.rows[norm].stash_bytes == doctest::Approx(off.rows[norm].stash_bytes / t).epsilon(1e-12));
    CHECK(on.rows[norm].forward_s == doctest::Approx(off.rows[norm].forward_s / t).epsilon(1e-12));
    // Full recompute keeps each block's input, / t with SP.
    CostTable full_on = f.Table({b, 8, 1, true, Recompute::kFull});
    CHECK(full_on.rows[block].stash_bytes == doctest::Approx(bd * 2 * s * h / t).epsilon(1e-12));
    CHECK(full_on.rows[head].stash_bytes == doctest::Approx(bd * 2 * s * h / t).epsilon(1e-12));
    // The TP collectives: reduce-scatter + all-gather, the same ring volume as the all-reduce.
    CHECK(on.rows[block].tp_comm_s == doctest::Approx(off.rows[block].tp_comm_s).epsilon(1e-12));
    CHECK(on.rows[block].tp_comm_s > 0);
  }
}

TEST_CASE("reduce-scatter and all-gather are each half a ring all-reduce: (n-1)/n M/B + (n-1) alpha") {
  ParFixture f("gpt3-175b.yaml", "dgx-a100.yaml");
  const TopologyLevel& node = f.cluster.levels[0];
  for (int64_t n : {2, 4, 8}) {
    const double M = 3e8, nd = static_cast<double>(n);
    const std::vector<int64_t> group = GroupSpread(f.cluster, n, 1);
    const double expect = (nd - 1) / nd * M / (node.bandwidth_GBps * 1e9) + (nd - 1) * node.latency_us * 1e-6;
    CHECK(ReduceScatterSeconds(f.cluster, M, group) == doctest::Approx(expect).epsilon(1e-12));
    CHECK(AllGatherSeconds(f.cluster, M, group) == doctest::Approx(expect).epsilon(1e-12));
    CHECK(ReduceScatterSeconds(f.cluster, M, group) + AllGatherSeconds(f.cluster, M, group) ==
          doctest::Approx(AllReduceSeconds(f.cluster, M, group)).epsilon(1e-12));
  }
}

// A block's fields as the layer catalog derives them (cp_kv_bytes = 2 s kv_heads d dt, attention
// core 4 s^2 h), set here so the test does not depend on the catalog's state.
void SetAttentionFields(ModelSpec* m, double s, double h, double dt) {
  for (auto& l : m->layers) {
    if (l.kind != LayerKind::kTransformerBlock) continue;
    l.cp_kv_bytes = 2 * s * h * dt;
    l.attention_core_fwd_flops = 4 * s * s * h;
  }
}

TEST_CASE(
    "context parallelism: work and activations / cp, ring KV exchange exposed where it outruns the attention core") {
  ParFixture f("gpt3-175b.yaml", "dgx-a100.yaml");
  const double s = 2048, h = 12288, dt = 2;
  SetAttentionFields(&f.model, s, h, dt);
  const size_t block = f.Row("block0");
  const Layer& l = f.model.layers[block];
  const double peak = f.cluster.PeakFlops(f.model.dtype) * f.cluster.Efficiency(f.model.dtype);
  for (double net_GBps : {2.0, 2000.0}) {  // slow: exposed; fast: hidden behind the attention core
    f.cluster.levels[0].p2p_bandwidth_GBps = net_GBps;
    const int64_t cp = 2, b = 2;
    const double bd = static_cast<double>(b), cpd = static_cast<double>(cp);
    CostTable one = f.Table({b, 1, 1, false, Recompute::kNone}), two = f.Table({b, 1, cp, false, Recompute::kNone});
    const double step_bytes = bd * l.cp_kv_bytes / cpd;
    const double comm = step_bytes / (net_GBps * 1e9) + f.cluster.levels[0].latency_us * 1e-6;
    const double compute = bd * l.attention_core_fwd_flops / (cpd * cpd) / peak;
    const double exposed = (cpd - 1) * std::max(0.0, comm - compute);
    CHECK(two.rows[block].forward_s == doctest::Approx(one.rows[block].forward_s / cpd + exposed).epsilon(1e-12));
    CHECK(two.rows[block].backward_input_s ==
          doctest::Approx(one.rows[block].backward_input_s / cpd + 2 * exposed).epsilon(1e-12));
    CHECK(two.rows[block].cp_comm_s ==
          doctest::Approx(3 * exposed).epsilon(1e-12));  // unfused: backward core 2x, 2x the bytes
    CHECK(two.rows[block].stash_bytes == doctest::Approx(one.rows[block].stash_bytes / cpd).epsilon(1e-12));
    CHECK(two.rows[block].params == doctest::Approx(one.rows[block].params));  // CP ranks replicate the weights
    if (net_GBps < 10) CHECK(exposed > 0);
    else CHECK(exposed == 0);
  }
}

TEST_CASE(
    "context parallelism in Megatron's rank order tp-cp-dp-pp: CP pairs t apart, pipeline neighbours t cp d apart") {
  ParFixture f("gpt3-175b.yaml", "dgx-a100.yaml");
  REQUIRE_OK(ParseModelSpec("m.yaml",
                            "format_version: 1\nname: m\ndtype: bf16\nglobal_batch: 64\n"
                            "gpt: {layers: 8, hidden: 1024, heads: 16, seq: 4096, vocab: 32768}\n",
                            &f.model));
  const double s = 4096, h = 1024;
  SetAttentionFields(&f.model, s, h, 2);
  const size_t block = f.Row("block0");
  const Layer& l = f.model.layers[block];
  // t = 8 fills a node, so the CP partner of rank 0 is rank 8, on the next node.
  CostTable table = f.Table({1, 8, 2, true, Recompute::kNone});
  const TopologyLevel& net = f.cluster.levels[1];
  const double peak = f.cluster.PeakFlops(f.model.dtype) * f.cluster.Efficiency(f.model.dtype);
  const double comm = l.cp_kv_bytes / 2 / 8 / (net.p2p_bandwidth_GBps * 1e9) + net.latency_us * 1e-6;
  const double compute = l.attention_core_fwd_flops / (8 * 2 * 2) / peak;
  // Forward: K, V behind the core; backward: K, V and dK, dV (twice the bytes) behind flash's backward core (2.5x).
  CHECK(table.rows[block].cp_comm_s ==
        doctest::Approx(std::max(0.0, comm - compute) + std::max(0.0, 2 * comm - 2.5 * compute)).epsilon(1e-12));
  SearchOptions o;
  o.gpus = 64;
  o.tp = {8};
  o.cp = {2};
  o.pp = {2};
  o.microbatch = {1};
  o.schedules = {Schedule::k1F1B};
  Plan p;
  REQUIRE_OK(SolveAuto(f.Source(), o, &p));
  CHECK(p.cp == 2);
  CHECK(p.dp == 2);
  CHECK(p.gpus_used == 64);
  CHECK(p.num_microbatches == 32);  // 64 / (b 1 x d 2): CP ranks share a sample
  REQUIRE(p.stages.size() == 2);
  CHECK(p.stages[1].device_offset == 8 * 2 * 2);
  CHECK(p.stages[0].devices.size() == 32u);
}

TEST_CASE("context and sequence parallelism: defaults and rejections") {
  ParFixture f("gpt3-175b.yaml", "dgx-a100.yaml");
  SearchOptions o;
  o.gpus = 64;
  SearchSpace sp = MakeSearchSpace(f.Source(), o, 1536);
  CHECK(sp.cp == std::vector<int64_t>{1});  // seq 2048: 2048 / (2 x 2) < 1024
  CHECK(sp.sp == std::vector<int>{1});
  f.model.gpt.seq = 8192;
  sp = MakeSearchSpace(f.Source(), o, 1536);
  CHECK(sp.cp == std::vector<int64_t>{1, 2, 4});
  sp.seq = 2048;
  // Megatron-Core runs CP only in TE's fused attention: unfused attention refuses cp > 1.
  CHECK(CpRejection(sp, f.Source(), 4).find("cp=4: gpt3-175b has unfused attention") == 0);
  f.model.gpt.attention = "flash";
  REQUIRE_OK(BuildGptModel(f.model.gpt, f.model.dtype, &f.model));
  CHECK(CpRejection(sp, f.Source(), 4) == "");
  CHECK(CpRejection(sp, f.Source(), 3)
            .find("cp=3: causal load balancing cuts the sequence (2048 tokens) into 2cp = 6 chunks") == 0);
  sp.gpus = 48;
  CHECK(CpRejection(sp, f.Source(), 32).find("cp=32 does not divide the 48 GPUs") == 0);

  f.model.gpt.seq = 2048;
  SearchOptions forced;
  forced.gpus = 64;
  forced.cp = {3};
  Plan p;
  Status s = SolveAuto(f.Source(), forced, &p);
  CHECK(s.code() == StatusCode::kInfeasible);
  CHECK(s.message().find("2cp = 6 chunks") != std::string::npos);

  // A forced layout that does not fit: Infeasible (exit 3) naming the stage, its bytes and the layout.
  SearchOptions small;
  small.gpus = 32;
  small.tp = {8};
  small.pp = {4};
  small.schedules = {Schedule::k1F1B};
  s = SolveAuto(f.Source(), small, &p);
  CHECK(s.code() == StatusCode::kInfeasible);
  CHECK(ExitCodeFor(s) == 3);
  CHECK(s.message().find("no plan fits in memory: stage ") == 0);
  CHECK(s.message().find(" bytes; best try: tp=8 cp=1 pp=4 dp=1 sp microbatch=1 1f1b recompute=full, ZeRO-0") !=
        std::string::npos);

  // SP asked for at tp = 1 means nothing: the plan says off. At tp > 1 it is on by default.
  ParFixture g("tiny-gpt.yaml", "dgx-a100.yaml");
  SearchOptions t1;
  t1.gpus = 4;
  t1.tp = {1};
  t1.sequence_parallel = {1};
  REQUIRE_OK(SolveAuto(g.Source(), t1, &p));
  CHECK(p.sequence_parallel == false);
  SearchOptions t4;
  t4.gpus = 4;
  t4.tp = {4};
  REQUIRE_OK(SolveAuto(g.Source(), t4, &p));
  CHECK(p.tp == 4);
  CHECK(p.sequence_parallel == true);
  t4.sequence_parallel = {0};
  REQUIRE_OK(SolveAuto(g.Source(), t4, &p));
  CHECK(p.sequence_parallel == false);
}

// A candidate evaluated on its own (p = 1, d replicas, m microbatches) at ZeRO stage z.
Evaluation EvaluateAt(const ParFixture& f, SearchOptions& o, int64_t d, int64_t m, int64_t z,
                      Evaluator** keep = nullptr) {
  (void)keep;
  o.zero = {z};
  Evaluator ev(f.Source(), o, d * m);
  CostTable table;
  REQUIRE_OK(BuildCostTable(f.Source(), 1, 1, Recompute::kNone, o.cost, &table));
  ev.AddTable(std::move(table));
  Candidate k = MakeCandidate(0, 1, 1, 1, d, m, 1, Schedule::k1F1B, Recompute::kNone, 1, false);
  Evaluation x;
  REQUIRE_OK(ev.Evaluate(k, &x));
  return x;
}

TEST_CASE("ZeRO-3 holds two gathered layers where it prefetches, one where it does not") {
  ParFixture f("gpt2-small.yaml", "dgx-a100.yaml");
  SearchOptions o;
  o.gpus = 8;
  const Evaluation on = EvaluateAt(f, o, 8, 1, 3);
  o.cost.overlap_param_prefetch = false;
  const Evaluation off = EvaluateAt(f, o, 8, 1, 3);
  REQUIRE(on.largest_layer_params[0] > 0);
  CHECK(on.peak[0] - off.peak[0] ==
        doctest::Approx(on.largest_layer_params[0] * DTypeBytes(f.model.dtype)).epsilon(1e-9));
}

TEST_CASE("ZeRO-2 and ZeRO-3 pay their collectives per microbatch, ZeRO-0/1 per iteration") {
  ParFixture f("gpt2-small.yaml", "dgx-a100.yaml");
  SearchOptions o;
  o.gpus = 8;
  o.dp_comms = {DpComm::kHierAllReduce};  // the per-level rings these closed forms are written with
  o.cost.overlap_grad_reduce = false;
  o.cost.overlap_param_gather = o.cost.overlap_param_prefetch = false;
  const int64_t d = 8;
  Evaluation x = EvaluateAt(f, o, d, 1, 0);
  const double bytes = x.params[0] * 2;
  const std::vector<int64_t> group = GroupSpread(f.cluster, d, 1);
  // Each call past the first adds the latency (the all-reduce of one byte; a reduce-scatter or gather half of it):
  // Megatron's buckets of max(40M, 1M d) parameters, FSDP's one call per layer holding parameters.
  const double lat = AllReduceSeconds(f.cluster, 1, group, AllReduceUse::kGradient);
  const double buckets = std::ceil(x.params[0] / BucketParams(d)), layers = x.param_layers[0];
  REQUIRE(buckets == 4);  // 124M parameters in 40M buckets
  REQUIRE(layers > 12);   // 12 blocks and the embeddings
  const double ar0 = AllReduceSeconds(f.cluster, bytes, group, AllReduceUse::kGradient);
  const double ar = ar0 + (buckets - 1) * lat, half = ar / 2, half3 = ar0 / 2 + (layers - 1) * lat / 2;
  for (int64_t m : {1, 4}) {
    const double md = static_cast<double>(m);
    CHECK(EvaluateAt(f, o, d, m, 0).dp_s == doctest::Approx(ar).epsilon(1e-12));
    CHECK(EvaluateAt(f, o, d, m, 1).dp_s == doctest::Approx(2 * half).epsilon(1e-12));          // RS + AG once
    CHECK(EvaluateAt(f, o, d, m, 2).dp_s == doctest::Approx(md * half + half).epsilon(1e-12));  // RS per microbatch
    CHECK(EvaluateAt(f, o, d, m, 3).dp_s ==
          doctest::Approx(md * 3 * half3).epsilon(1e-12));  // 2 AG + RS per microbatch
  }
  // Sharded states over d (Megatron's distributed-optimizer table: 6 + 12/d for bf16 params, fp32 grads).
  StateBytes sb;
  CHECK(StateBytesPerParam(sb, 1, 8) == doctest::Approx(6 + 12.0 / 8));
  CHECK(StateBytesPerParam(sb, 0, 8) == doctest::Approx(18));
  CHECK(StateBytesPerParam(sb, 3, 8) == doctest::Approx(18.0 / 8));
}

TEST_CASE("optimizer states: 12 / 10 / 6 / 4 / 6 B per parameter, sharded at ZeRO-1, the step's traffic with them") {
  ParFixture f("gpt2-small.yaml", "dgx-a100.yaml");
  f.model.dtype = DType::kBf16;
  const OptimizerState states[] = {OptimizerState::kFp32, OptimizerState::kFp32Remainders, OptimizerState::kBf16Moments,
                                   OptimizerState::kBf16, OptimizerState::kBf16Master};
  // bf16-master reads its own master (in the state) and no weight: 4 + 2 x 6 + 2.
  const double bytes[] = {12, 10, 6, 4, 6}, traffic[] = {30, 28, 20, 16, 18};
  for (int i = 0; i < 5; ++i) {
    const StateBytes sb = ModelStateBytes(&f.model, std::nullopt, 0, states[i]);
    CHECK(sb.optimizer == bytes[i]);
    CHECK(sb.total == doctest::Approx(2 + 4 + bytes[i]));  // bf16 weights, fp32 gradients
    CHECK(StateBytesPerParam(sb, 1, 8) == doctest::Approx(2 + 4 + bytes[i] / 8));
    CHECK(OptimizerStepTrafficPerParam(states[i]) == traffic[i]);
    OptimizerState back;
    REQUIRE(ParseOptimizerState(OptimizerStateName(states[i]), &back));
    CHECK(back == states[i]);
  }
  // fp32 models keep 8 B of moments whatever is asked (the flag refuses the others); fp16 takes fp32 only.
  f.model.dtype = DType::kFp32;
  CHECK(ModelStateBytes(&f.model, std::nullopt, 0, OptimizerState::kBf16).optimizer == 8);
  CHECK(!OptimizerStateRefusal(DType::kFp32, OptimizerState::kBf16Moments).empty());
  CHECK(!OptimizerStateRefusal(DType::kFp16, OptimizerState::kFp32Remainders).empty());
  CHECK(OptimizerStateRefusal(DType::kFp8, OptimizerState::kFp32Remainders).empty());
  CHECK(OptimizerStateRefusal(DType::kFp16, OptimizerState::kFp32).empty());
  // FP8 parameters keep a master apart from the weights: fp32 or bf16-master (NeMo 1.x's Apex), and bf16-master is
  // theirs alone.
  for (const OptimizerState s : states) {
    const bool apart = s == OptimizerState::kFp32 || s == OptimizerState::kBf16Master;
    CHECK(OptimizerStateFp8ParamsRefusal(s, true).empty() == apart);
    CHECK(OptimizerStateFp8ParamsRefusal(s, false).empty() == (s != OptimizerState::kBf16Master));
  }
  // The search's memory: ZeRO-1 forced, the peak falls by (12 - 6) / dp bytes per parameter of the stage.
  f.model.dtype = DType::kBf16;
  SearchOptions o;
  o.zero = {1};
  const StateBytes full = MakeStateBytes(f.Source(), o);
  o.cost.optimizer_state = OptimizerState::kBf16Moments;
  const StateBytes small = MakeStateBytes(f.Source(), o);
  CHECK(StateBytesPerParam(full, 1, 4) - StateBytesPerParam(small, 1, 4) == doctest::Approx(6.0 / 4));
}

TEST_CASE(
    "bf16 gradients are reduced in fp32 (Megatron's accumulate_allreduce_grads_in_fp32), parameters gathered in bf16") {
  ParFixture f("gpt2-small.yaml", "dgx-a100.yaml");
  f.model.dtype = DType::kBf16;
  REQUIRE_OK(BuildGptModel(f.model.gpt, f.model.dtype, &f.model));
  SearchOptions o;
  o.gpus = 8;
  o.dp_comms = {DpComm::kHierAllReduce};  // the per-level rings these closed forms are written with
  o.cost.overlap_grad_reduce = false;
  o.cost.overlap_param_gather = o.cost.overlap_param_prefetch = false;
  const int64_t d = 8;
  const Evaluation x0 = EvaluateAt(f, o, d, 1, 0);
  const std::vector<int64_t> group = GroupSpread(f.cluster, d, 1);
  const double grads = x0.params[0] * 4, params = x0.params[0] * 2;
  const double lat = AllReduceSeconds(f.cluster, 1, group, AllReduceUse::kGradient);  // per call past the first
  const double nb = std::ceil(x0.params[0] / BucketParams(d)) - 1, nl = x0.param_layers[0] - 1;
  CHECK(x0.dp_s ==
        doctest::Approx(AllReduceSeconds(f.cluster, grads, group, AllReduceUse::kGradient) + nb * lat).epsilon(1e-12));
  const double rs = ReduceScatterSeconds(f.cluster, grads, group, AllReduceUse::kGradient);
  const double ag = AllGatherSeconds(f.cluster, params, group, AllReduceUse::kGradient);
  CHECK(EvaluateAt(f, o, d, 1, 1).dp_s == doctest::Approx(rs + ag + nb * lat).epsilon(1e-12));
  CHECK(EvaluateAt(f, o, d, 4, 3).dp_s == doctest::Approx(4 * (2 * ag + rs + 1.5 * nl * lat)).epsilon(1e-12));
}

TEST_CASE("gradient buffer dtype: Megatron's defaults per precision, --grad-dtype, and the fp16 step's fp32 copy") {
  ParFixture f("gpt2-small.yaml", "dgx-a100.yaml");
  auto bytes = [&](DType model, std::optional<DType> grad) {
    f.model.dtype = model;
    SearchOptions o;
    o.cost.grad_dtype = grad;
    return MakeStateBytes(f.Source(), o);
  };
  // weights + gradients + fp32 masters and moments (12; fp32: 8), gradients reduced in their buffer's dtype.
  struct Row {
    DType model;
    std::optional<DType> grad;
    double total, grad_comm, step_copy;
  };
  for (const Row& r : {Row{DType::kFp16, std::nullopt, 16, 2, 4}, Row{DType::kFp16, DType::kFp32, 18, 4, 0},
                       Row{DType::kBf16, std::nullopt, 18, 4, 0}, Row{DType::kBf16, DType::kBf16, 16, 2, 4},
                       Row{DType::kFp8, std::nullopt, 18, 4, 0}, Row{DType::kFp32, std::nullopt, 16, 4, 0}}) {
    CAPTURE(DTypeName(r.model));
    const StateBytes sb = bytes(r.model, r.grad);
    CHECK(sb.total == doctest::Approx(r.total));
    CHECK(sb.grad_comm == doctest::Approx(r.grad_comm));
    CHECK(sb.step_grad_copy == doctest::Approx(r.step_copy));
    CHECK(StateBytesPerParam(sb, 1, 4) == doctest::Approx(sb.weight + sb.fp8_weight_copy + sb.grad + sb.optimizer / 4));
  }
  {  // --bytes-per-param is the whole state as the user counts it: no transient added, reduction still at 2 bytes.
    f.model.dtype = DType::kFp16;
    SearchOptions o;
    o.cost.bytes_per_param = 18;
    const StateBytes sb = MakeStateBytes(f.Source(), o);
    CHECK(sb.total == 18);
    CHECK(sb.step_grad_copy == 0);
    CHECK(sb.grad_comm == 2);
  }
  CHECK(DefaultGradDType(DType::kFp16) == DType::kFp16);
  CHECK(DefaultGradDType(DType::kBf16) == DType::kFp32);
  CHECK(GradDTypeAllowed(DType::kFp8, DType::kBf16));
  CHECK_FALSE(GradDTypeAllowed(DType::kFp16, DType::kBf16));
  CHECK_FALSE(GradDTypeAllowed(DType::kFp32, DType::kFp16));
  // The peak: the fp16 step's fp32 gradient copy replaces the freed activations where it is larger
  // (one GPU, one microbatch of 128 tokens: GPT-2 small's 4 bytes per parameter outgrow its activations).
  f.model.dtype = DType::kFp16;
  f.model.gpt.seq = 128;
  REQUIRE_OK(BuildGptModel(f.model.gpt, f.model.dtype, &f.model));
  SearchOptions o;
  o.gpus = 1;
  const Evaluation x16 = EvaluateAt(f, o, 1, 1, 0);
  REQUIRE(x16.params[0] * 4 > x16.acts[0] + x16.work[0]);
  CHECK(x16.peak[0] == doctest::Approx(x16.params[0] * (16 + 4)).epsilon(1e-12));
  o.cost.grad_dtype = DType::kFp32;
  const Evaluation x32 = EvaluateAt(f, o, 1, 1, 0);
  CHECK(x32.peak[0] == doctest::Approx(x32.params[0] * 18 + x32.acts[0] + x32.work[0]).epsilon(1e-12));
}

TEST_CASE(
    "per-stage replication costs the gradient buffer too: its bytes in the all-reduce, the fp16 step copy beside live "
    "activations") {
  ParFixture f("gpt2-small.yaml", "dgx-a100.yaml");
  REQUIRE(f.model.dtype == DType::kFp16);
  SearchOptions o;
  o.gpus = 4;
  o.schedules = {Schedule::kPipeDream};
  o.replication = {2, 2};
  o.microbatch = {1};
  Plan p16, p32;
  REQUIRE_OK(SolveAuto(f.Source(), o, &p16));
  o.cost.grad_dtype = DType::kFp32;
  REQUIRE_OK(SolveAuto(f.Source(), o, &p32));
  CHECK(p16.grad_dtype == DType::kFp16);
  CHECK(p32.grad_dtype == DType::kFp32);
  REQUIRE(p16.stages.size() == p32.stages.size());
  for (size_t s = 0; s < p16.stages.size(); ++s) {
    CAPTURE(s);
    const PlanStage &a = p16.stages[s], &b = p32.stages[s];
    REQUIRE(a.first_layer == b.first_layer);
    REQUIRE(a.last_layer == b.last_layer);
    // optimizer_bytes holds (beta - w) bytes per parameter: 14 with fp16 gradients. PipeDream steps after every
    // microbatch with others' activations alive: fp16 gradients + the fp32 copy (2 + 4) against fp32's 4.
    const double params = a.optimizer_bytes / 14;
    CHECK(b.optimizer_bytes == doctest::Approx(16 * params).epsilon(1e-9));
    CHECK(a.peak_memory_bytes - b.peak_memory_bytes == doctest::Approx(2 * params).epsilon(1e-6));
    CHECK(b.dp_allreduce_s > a.dp_allreduce_s);  // twice the gradient bytes
  }
}

TEST_CASE("ZeRO-3 memory holds the largest layer gathered whole and the next one prefetched") {
  ParFixture f("gpt2-small.yaml", "dgx-a100.yaml");
  SearchOptions o;
  o.gpus = 8;
  double largest = 0;
  for (const auto& l : f.model.layers) largest = std::max(largest, l.params);
  const Evaluation z3 = EvaluateAt(f, o, 8, 1, 3), z1 = EvaluateAt(f, o, 8, 1, 1);
  const StateBytes sb = MakeStateBytes(f.Source(), o);
  REQUIRE(f.model.dtype ==
          DType::kFp16);  // fp16 gradients: the step's fp32 copy of the shard (4 / 8 bytes per parameter)
  const double base3 =
      z3.params[0] * StateBytesPerParam(sb, 3, 8) + std::max(z3.acts[0] + z3.work[0], z3.params[0] * 4 / 8);
  const double base1 =
      z1.params[0] * StateBytesPerParam(sb, 1, 8) + std::max(z1.acts[0] + z1.work[0], z1.params[0] * 4 / 8);
  CHECK(z3.peak[0] == doctest::Approx(base3 + 2 * largest * 2).epsilon(1e-12));
  CHECK(z1.peak[0] == doctest::Approx(base1).epsilon(1e-12));  // ZeRO-1 keeps whole weights: no gather buffer
}

TEST_CASE(
    "sequence parallelism splits only a transformer's regions: a CNN's layers are not divided, and SP is off by "
    "default") {
  ParFixture f("vgg16.yaml", "dgx-h100.yaml");
  TableShape off{1, 2, 1, false, Recompute::kNone}, on{1, 2, 1, true, Recompute::kNone};
  const CostTable a = f.Table(off), b = f.Table(on);
  REQUIRE(a.rows.size() == b.rows.size());
  for (size_t i = 0; i < a.rows.size(); ++i) {
    INFO(a.names[i]);
    CHECK(b.rows[i].forward_s == doctest::Approx(a.rows[i].forward_s).epsilon(1e-12));
    CHECK(b.rows[i].stash_bytes == doctest::Approx(a.rows[i].stash_bytes).epsilon(1e-12));
  }
  SearchOptions o;
  o.gpus = 8;
  CHECK(MakeSearchSpace(f.Source(), o, 64).sp == std::vector<int>{0});
}

TEST_CASE("overlapped data-parallel communication: the last bucket plus what outlasts the compute window") {
  CHECK(ExposedBucketed(1.0, 0.1, 0.5, false) == doctest::Approx(1.0));
  CHECK(ExposedBucketed(1.0, 0.1, 0.5, true) == doctest::Approx(0.1 + 0.4));
  CHECK(ExposedBucketed(1.0, 0.1, 5.0, true) == doctest::Approx(0.1));
  CHECK(ExposedBucketed(1.0, 3.0, 5.0, true) == doctest::Approx(1.0));  // one bucket: nothing to overlap
  CHECK(BucketParams(8) == doctest::Approx(40e6));
  CHECK(BucketParams(128) == doctest::Approx(128e6));
  ParFixture f("gpt2-small.yaml", "dgx-a100.yaml");
  SearchOptions on, off;
  on.gpus = off.gpus = 8;
  off.cost.overlap_grad_reduce = off.cost.overlap_param_gather = off.cost.overlap_param_prefetch = false;
  for (int64_t z : {0, 1, 2, 3}) {
    Evaluation a = EvaluateAt(f, on, 8, 2, z), b = EvaluateAt(f, off, 8, 2, z);
    CHECK(a.dp_s < b.dp_s);
    CHECK(a.allreduce_s[0] ==
          doctest::Approx(b.allreduce_s[0]).scale(0));  // the same collectives, less of them exposed
  }
  // ZeRO-3: per microbatch, the forward's gather against F; the backward's gather and reduce-scatter together against B.
  Evaluation x = EvaluateAt(f, on, 8, 2, 3);
  const double ag = x.allreduce_s[0] / (2 * 3), rs = ag;  // m (2 AG + RS), AG = RS
  const double bucket = BucketParams(8) / x.params[0];
  CHECK(x.dp_s == doctest::Approx(2 * (ExposedBucketed(ag, bucket, x.forward_s[0], true) +
                                       ExposedBucketed(ag + rs, bucket / 2, x.backward_s[0], true)))
                      .epsilon(1e-12));
}

TEST_CASE("the search keeps the fastest ZeRO stage that fits, not the lowest; never ZeRO-2/3 with pipelining") {
  ParFixture f("gpt2-small.yaml", "dgx-a100.yaml");
  SearchOptions o;
  o.gpus = 8;
  double best = INFINITY;
  int64_t fastest = -1;
  for (int64_t z = 0; z <= 3; ++z) {
    Evaluation x = EvaluateAt(f, o, 8, 4, z);
    REQUIRE(x.zero == z);  // everything fits this small model
    if (x.dp_s + x.optimizer_s < best * (1 - 1e-12)) {
      best = x.dp_s + x.optimizer_s;
      fastest = z;
    }
  }
  o.zero = {};
  Evaluator ev(f.Source(), o, 32);
  CostTable table;
  REQUIRE_OK(BuildCostTable(f.Source(), 1, 1, Recompute::kNone, o.cost, &table));
  ev.AddTable(std::move(table));
  Evaluation x;
  REQUIRE_OK(ev.Evaluate(MakeCandidate(0, 1, 1, 1, 8, 4, 1, Schedule::k1F1B, Recompute::kNone, 1, false), &x));
  CHECK(x.zero == fastest);
  CHECK(x.dp_s + x.optimizer_s == doctest::Approx(best).scale(0));
  REQUIRE_OK(ev.Evaluate(MakeCandidate(0, 1, 1, 2, 4, 8, 1, Schedule::k1F1B, Recompute::kNone, 1, false), &x));
  CHECK(x.zero_max == 1);
  CHECK(x.zero <= 1);

  // --zero 3 with pipelining forced: no stage an engine runs; an input error naming the flag.
  SearchOptions piped;
  piped.gpus = 8;
  piped.pp = {2};
  piped.zero = {3};
  piped.schedules = {Schedule::k1F1B};  // not the per-stage replication family (PipeDream: no ZeRO)
  Plan p;
  Status s = SolveAuto(f.Source(), piped, &p);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("--zero allows no ZeRO stage the layouts can run (tp=1 cp=1 pp=2 dp=4: ZeRO-2/3 are not run "
                         "with pipelining") == 0);
  piped.zero = {2, 3};
  piped.pp = {};
  REQUIRE_OK(SolveAuto(f.Source(), piped, &p));
  CHECK(p.pp == 1);  // only unpipelined layouts can take ZeRO-2/3
  CHECK(static_cast<int>(p.zero_stage) >= 2);
}

TEST_CASE("selective recompute re-runs the attention core's memory-bound work too") {
  ParFixture f("gpt3-175b.yaml", "dgx-a100.yaml");
  const size_t block = f.Row("block0");
  Layer& l = f.model.layers[block];
  l.selective_recompute_mem_bytes = 5e9;
  const double peak = f.cluster.PeakFlops(f.model.dtype) * f.cluster.Efficiency(f.model.dtype);
  const double hbm = f.cluster.hbm_bandwidth_GBps * 1e9 * f.cluster.hbm_efficiency;
  CostTable none = f.Table({2, 4, 1, true, Recompute::kNone}), sel = f.Table({2, 4, 1, true, Recompute::kSelective});
  const double extra = 2 * (l.selective_recompute_flops / peak + l.selective_recompute_mem_bytes / hbm) / 4;
  CHECK(sel.rows[block].backward_input_s - none.rows[block].backward_input_s == doctest::Approx(extra).epsilon(1e-9));
}

TEST_CASE(
    "FP8: GEMMs at the fp8 peak x its efficiency, the attention core at bf16; a cluster without an fp8 peak is an "
    "error") {
  ParFixture f("gpt3-175b.yaml", "dgx-h100.yaml");
  const double s = 2048, h = 12288;
  SetAttentionFields(&f.model, s, h, 2);
  REQUIRE_OK(ParseClusterSpec(
      "h.yaml",
      "name: h\ngpu: {name: g, peak_tflops: {bf16: 1000, fp8: 2000}, memory_GiB: 80, hbm_bandwidth_GBps: 3000}\n"
      "efficiency: {bf16: 0.6, fp8: 0.5}\ntopology: [{name: n, size: 8, bandwidth_GBps: 300}]\n",
      &f.cluster));
  CHECK(f.cluster.Efficiency(DType::kBf16) == doctest::Approx(0.6));
  CHECK(f.cluster.Efficiency(DType::kFp16) == doctest::Approx(0.6));
  CHECK(f.cluster.Efficiency(DType::kFp8) == doctest::Approx(0.5));
  f.model.dtype = DType::kFp8;
  const size_t block = f.Row("block0");
  const Layer& l = f.model.layers[block];
  CostTable t = f.Table({1, 1, 1, false, Recompute::kNone});
  const double core = l.attention_core_fwd_flops;
  const double hbm = 3000e9 * f.cluster.hbm_efficiency;
  CHECK(t.rows[block].forward_s ==
        doctest::Approx((l.fwd_flops - core) / (2000e12 * 0.5) + core / (1000e12 * 0.6) + l.fwd_mem_bytes / hbm)
            .epsilon(1e-12));
  CHECK(StateBytesPerParam(MakeStateBytes(f.Source(), SearchOptions{}), 0, 1) ==
        doctest::Approx(20));  // + TE's fp8 weight copies

  ClusterSpec no_fp8;
  REQUIRE_OK(
      ParseClusterSpec("a.yaml",
                       "name: a\ngpu: {name: g, peak_tflops: {bf16: 312}, memory_GiB: 80, hbm_bandwidth_GBps: 2000}\n"
                       "topology: [{name: n, size: 8, bandwidth_GBps: 300}]\n",
                       &no_fp8));
  CostSource src = f.Source();
  src.cluster = &no_fp8;
  Status st = CheckCostSource(src);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("a.yaml: cluster 'a' has no peak for dtype fp8") == 0);
  CHECK(st.message().find("add gpu.peak_tflops.fp8 to it, or train in bf16") != std::string::npos);
  REQUIRE_OK(ParseClusterSpec(
      "m.yaml",
      "name: m\ngpu: {name: g, peak_tflops: {bf16: 1, fp8: 2}, memory_GiB: 80, hbm_bandwidth_GBps: 1}\n"
      "efficiency: {bf16: 0.7}\ntopology: [{name: n, size: 8, bandwidth_GBps: 1}]\n",
      &no_fp8));
  CHECK(no_fp8.Efficiency(DType::kFp8) == doctest::Approx(0.7));  // a map without fp8: bf16's
  Status bad =
      ParseClusterSpec("e.yaml",
                       "name: e\ngpu: {name: g, peak_tflops: {bf16: 1}, memory_GiB: 80, hbm_bandwidth_GBps: 1}\n"
                       "efficiency: {bf16: 1.5}\ntopology: [{name: n, size: 8, bandwidth_GBps: 1}]\n",
                       &no_fp8);
  CHECK(bad.message().find("e.yaml:3: field 'efficiency.bf16': is a fraction of peak") != std::string::npos);
}

TEST_CASE("the plan's FLOPs figures: GPT-3 175B against Megatron's formulas") {
  ParFixture f("gpt3-175b.yaml", "dgx-a100.yaml");
  SearchOptions o;
  o.gpus = 1024;
  o.tp = {8};
  o.pp = {16};
  o.microbatch = {1};
  o.schedules = {Schedule::kInterleaved};
  o.interleave = {2};
  for (Recompute rc : {Recompute::kFull, Recompute::kSelective}) {
    o.recompute = {rc};
    Plan p;
    REQUIRE_OK(SolveAuto(f.Source(), o, &p));
    const double B = 1536, n = 1024, iter = p.predicted.iteration_s, peak = 312e12;
    const double model = CausalModelFlopsPerIteration(f.model.gpt, B);  // eq. (7) with the causal half of the s^2 core
    // Hardware (unfused: the whole s^2 core runs): eq. (3) with full recompute, else eq. (7).
    double hw =
        rc == Recompute::kFull ? MegatronFlopsPerIteration(f.model.gpt, B) : ModelFlopsPerIteration(f.model.gpt, B);
    if (rc == Recompute::kSelective)
      hw += B * 96 * 4 * 2048.0 * 2048.0 * 12288.0;  // the attention core's forward again
    CHECK(p.model_parameters - 2 * 12288 ==
          doctest::Approx(MegatronParamCount(f.model.gpt)).epsilon(1e-12));  // eq. (2) has no final layernorm
    CHECK(p.predicted.model_flops_per_iteration == doctest::Approx(model).epsilon(1e-9));
    CHECK(p.predicted.mfu == doctest::Approx(model / (n * peak * iter)).epsilon(1e-9));
    CHECK(p.predicted.hfu == doctest::Approx(hw / (n * peak * iter)).epsilon(1e-9));
    CHECK(p.predicted.model_tflops_per_gpu == doctest::Approx(model / (n * iter) / 1e12).epsilon(1e-9));
    CHECK(p.predicted.tflops_per_gpu == doctest::Approx(hw / (n * iter) / 1e12).epsilon(1e-9));
    CHECK(p.predicted.tokens_per_second_per_gpu == doctest::Approx(B * 2048 / iter / n).epsilon(1e-12));
    CHECK(p.predicted.hfu > p.predicted.mfu);
  }
}

}  // namespace
}  // namespace planner
