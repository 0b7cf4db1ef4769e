// Selective recompute modules (Megatron-Core --recompute-modules; docs/cost_model.md section 5,
// "Recompute modules"): each module's dropped stash and re-run work on one moe_block and one MLA
// block against hand sums from the layer's shapes; the cost table's stash and backward against
// those sums at the cluster's rates; more modules -> less memory, more time; DeepSeek-V3's forced
// layout with its module set against the default's, stage by stage; the plan field read and written.
#include <algorithm>
#include <string>
#include <vector>

#include "dp_solver/cost_model.h"
#include "dp_solver/search.h"
#include "spec/cluster_spec.h"
#include "spec/layer_catalog.h"
#include "spec/model_spec.h"
#include "spec/plan.h"
#include "tests/dp_solver/moe_model.h"
#include "tests/test_util.h"

namespace planner {
namespace {

const RecomputeModuleCost& Mod(const Layer& l, RecomputeModule m) {
  return l.recompute_modules[static_cast<size_t>(m)];
}

// s 16, h 32, 4 heads of 8 (2 KV heads), 4 SwiGLU experts of 24, top-2, a shared expert of 16.
LayerAttrs SmallMoe() {
  LayerAttrs a;
  a.ints = {{"heads", 4}, {"kv_heads", 2}, {"experts", 4}, {"top_k", 2}, {"expert_ffn", 24}, {"shared_ffn", 16}};
  a.strings = {{"act", "swiglu"}, {"norm", "rmsnorm"}, {"position", "rope"}, {"attention", "flash"}};
  a.bools = {{"bias", false}, {"dropout", false}};
  return a;
}

// The same with MLA: q_lora 24, kv_lora 16, rope 8, nope 16, v 12 per head.
LayerAttrs SmallMlaMoe() {
  LayerAttrs a = SmallMoe();
  a.ints.insert({{"q_lora_rank", 24},
                 {"kv_lora_rank", 16},
                 {"qk_rope_head_dim", 8},
                 {"qk_nope_head_dim", 16},
                 {"v_head_dim", 12}});
  return a;
}

TEST_CASE("recompute modules of one moe_block: what each drops and re-runs, by hand from its shapes") {
  const double s = 16, h = 32, e = 4, k = 2, fe = 24, fs = 16, dt = 2;
  Layer l;
  REQUIRE_OK(InferLayer("moe_block", SmallMoe(), {16, 32}, DType::kBf16, &l));
  // layernorm: the two norms' outputs (the attention's and the MoE's inputs); re-run read + write each.
  CHECK(Mod(l, RecomputeModule::kLayernorm).stash_bytes == 2 * dt * s * h);
  CHECK(Mod(l, RecomputeModule::kLayernorm).stash_tp_replicated == 2 * dt * s * h);
  CHECK(Mod(l, RecomputeModule::kLayernorm).mem_bytes == 2 * dt * 2 * s * h);
  CHECK(Mod(l, RecomputeModule::kLayernorm).gemm_flops == 0);
  // moe_act: SwiGLU's output (fc2's input, fe per token copy), re-made from its 2 fe input: read 2, write 1.
  CHECK(Mod(l, RecomputeModule::kMoeAct).stash_bytes == dt * s * k * fe);
  CHECK(Mod(l, RecomputeModule::kMoeAct).expert_stash_bytes == dt * s * k * fe);
  CHECK(Mod(l, RecomputeModule::kMoeAct).mem_bytes == dt * 3 * s * k * fe);
  CHECK(Mod(l, RecomputeModule::kMoeAct).gemm_flops == 0);
  // shared_experts: the shared MLP less its input (gate/up output 2 fs, down input fs); its three GEMMs.
  CHECK(Mod(l, RecomputeModule::kSharedExperts).stash_bytes == dt * s * 3 * fs);
  CHECK(Mod(l, RecomputeModule::kSharedExperts).gemm_flops == 2 * s * h * 2 * fs + 2 * s * fs * h);
  CHECK(Mod(l, RecomputeModule::kSharedExperts).mem_bytes == dt * 3 * s * fs);
  // moe: the whole MoE MLP less its input: fp32 scores, the shared MLP, every routed copy's
  // permuted input, fc1 output and fc2 input; router + shared + routed GEMMs, the all-to-alls.
  const RecomputeModuleCost& moe = Mod(l, RecomputeModule::kMoe);
  CHECK(moe.stash_bytes == 4 * s * e + dt * s * 3 * fs + dt * s * k * (h + 3 * fe));
  CHECK(moe.stash_tp_replicated == 4 * s * e);
  CHECK(moe.expert_stash_bytes == dt * s * k * (h + 3 * fe));
  CHECK(moe.gemm_flops == 2 * s * h * e + 6 * s * h * fs + 6 * s * k * h * fe);
  CHECK(moe.expert_gemm_flops == l.expert_fwd_flops);
  CHECK(moe.mem_bytes == 4 * 2 * s * e + dt * 3 * s * fs + dt * (3 * s * k * fe + 2 * (s * h + s * k * h)));
  CHECK(moe.alltoall);
  CHECK(moe.tp_collectives == 1);
  // Not applicable here: mlp (an MoE layer: Megatron re-runs dense MLPs only) and mla_up_proj (no MLA).
  CHECK(Mod(l, RecomputeModule::kMlp).stash_bytes == 0);
  CHECK(Mod(l, RecomputeModule::kMlp).gemm_flops == 0);
  CHECK(Mod(l, RecomputeModule::kMlaUpProj).stash_bytes == 0);
  // core_attn with flash: nothing s^2 kept; the causal core forward re-run.
  CHECK(Mod(l, RecomputeModule::kCoreAttn).stash_bytes == 0);
  CHECK(Mod(l, RecomputeModule::kCoreAttn).core_flops == l.selective_recompute_flops);
  CHECK(Mod(l, RecomputeModule::kCoreAttn).core_flops == l.attention_core_fwd_flops);
}

TEST_CASE(
    "recompute modules of one MLA block: mla_up_proj drops Q, K, V and re-runs the up projections; mlp the dense MLP") {
  const double s = 32, h = 64, a = 4, ql = 24, kvl = 16, dr = 8, dn = 16, dv = 12, f = 48, dt = 2;
  LayerAttrs attrs;
  attrs.ints = {
      {"heads", 4},       {"q_lora_rank", 24}, {"kv_lora_rank", 16}, {"qk_rope_head_dim", 8}, {"qk_nope_head_dim", 16},
      {"v_head_dim", 12}, {"ffn", 48}};
  attrs.strings = {{"act", "swiglu"}, {"norm", "rmsnorm"}, {"position", "rope"}, {"attention", "flash"}};
  attrs.bools = {{"bias", false}, {"dropout", false}};
  Layer l;
  REQUIRE_OK(InferLayer("transformer_block", attrs, {32, 64}, DType::kBf16, &l));
  const RecomputeModuleCost& up = Mod(l, RecomputeModule::kMlaUpProj);
  CHECK(up.stash_bytes == dt * s * (2 * a * (dn + dr) + a * dv));                    // Q, K (nope + rope), V
  CHECK(up.gemm_flops == 2 * s * ql * a * (dn + dr) + 2 * s * kvl * a * (dn + dv));  // q_b and kv_b
  CHECK(up.mem_bytes == dt * 2 * s * (a * dr + dr));                                 // RoPE on q_pe and the shared k_pe
  CHECK(up.stash_tp_replicated == 0);
  const RecomputeModuleCost& mlp = Mod(l, RecomputeModule::kMlp);
  CHECK(mlp.stash_bytes == dt * s * 3 * f);  // fc1 output (2f) and fc2 input (f); fc1's input stays
  CHECK(mlp.gemm_flops == 6 * s * h * f);
  CHECK(mlp.mem_bytes == dt * 3 * s * f);
  CHECK(mlp.tp_collectives == 1);
  CHECK(Mod(l, RecomputeModule::kLayernorm).stash_bytes == 2 * dt * s * h);
  CHECK(Mod(l, RecomputeModule::kMoe).stash_bytes == 0);
  CHECK(Mod(l, RecomputeModule::kMoeAct).stash_bytes == 0);
}

struct OneLayer {
  ModelSpec model;
  ClusterSpec cluster;
  explicit OneLayer(const LayerAttrs& attrs) {
    REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/h800.yaml"), &cluster));
    Layer l;
    REQUIRE_OK(InferLayer("moe_block", attrs, {16, 32}, DType::kBf16, &l));
    l.name = "block0";
    model.name = "one-moe-block";
    model.dtype = DType::kBf16;
    model.layers = {l};
  }
  LayerCostRow Row(Recompute rc, uint32_t modules) const {
    CostSource src;
    src.model = &model;
    src.cluster = &cluster;
    TableShape shape;
    shape.recompute = rc;
    shape.recompute_modules = modules;
    CostTable t;
    REQUIRE_OK(BuildCostTable(src, shape, CostOptions{}, &t));
    return t.rows.at(0);
  }
};

TEST_CASE("cost table: each module's stash leaves the row and its work joins backward at the GEMM / HBM rates") {
  OneLayer f(SmallMlaMoe());
  const Layer& l = f.model.layers[0];
  const double gemm_rate = f.cluster.PeakFlops(DType::kBf16) * f.cluster.Efficiency(DType::kBf16);
  const double hbm = f.cluster.hbm_bandwidth_GBps * 1e9 * f.cluster.hbm_efficiency;
  const LayerCostRow base = f.Row(Recompute::kSelective, kDefaultRecomputeModules);
  const LayerCostRow none = f.Row(Recompute::kNone, kDefaultRecomputeModules);
  CHECK(base.stash_bytes == doctest::Approx(l.stash_bytes_selective));
  CHECK(none.stash_bytes == doctest::Approx(l.stash_bytes));
  for (RecomputeModule m : {RecomputeModule::kLayernorm, RecomputeModule::kMlaUpProj, RecomputeModule::kMoeAct,
                            RecomputeModule::kSharedExperts}) {
    CAPTURE(RecomputeModuleName(m));
    const RecomputeModuleCost& c = Mod(l, m);
    const LayerCostRow r = f.Row(Recompute::kSelective, kDefaultRecomputeModules | RecomputeBit(m));
    CHECK(c.stash_bytes > 0);
    CHECK(base.stash_bytes - r.stash_bytes == doctest::Approx(c.stash_bytes));
    CHECK(r.backward_input_s - base.backward_input_s ==
          doctest::Approx(c.gemm_flops / gemm_rate + c.mem_bytes / hbm).epsilon(1e-9).scale(0));
    CHECK(r.forward_s == base.forward_s);
    CHECK(r.backward_weight_s == base.backward_weight_s);
  }
  // moe holds moe_act's and shared_experts' stash: adding them to moe drops nothing more, re-runs more.
  const LayerCostRow moe = f.Row(Recompute::kSelective, kDefaultRecomputeModules | RecomputeBit(RecomputeModule::kMoe));
  const LayerCostRow all = f.Row(Recompute::kSelective, kDefaultRecomputeModules | RecomputeBit(RecomputeModule::kMoe) |
                                                            RecomputeBit(RecomputeModule::kMoeAct) |
                                                            RecomputeBit(RecomputeModule::kSharedExperts));
  CHECK(base.stash_bytes - moe.stash_bytes == doctest::Approx(Mod(l, RecomputeModule::kMoe).stash_bytes));
  CHECK(all.stash_bytes == moe.stash_bytes);
  CHECK(all.backward_input_s > moe.backward_input_s);
  // Without core_attn, selective keeps what core_attn drops (flash: nothing) and skips its re-run.
  const LayerCostRow no_core = f.Row(Recompute::kSelective, RecomputeBit(RecomputeModule::kLayernorm));
  const LayerCostRow ln =
      f.Row(Recompute::kSelective, kDefaultRecomputeModules | RecomputeBit(RecomputeModule::kLayernorm));
  CHECK(no_core.stash_bytes == ln.stash_bytes);
  CHECK(ln.backward_input_s - no_core.backward_input_s ==
        doctest::Approx(l.selective_recompute_flops /
                        (f.cluster.PeakFlops(DType::kBf16) * f.cluster.Efficiency(DType::kBf16)))
            .scale(0)
            .epsilon(1e-9));
}

TEST_CASE("more modules: less memory, more backward time (MLA moe_block)") {
  OneLayer f(SmallMlaMoe());
  const RecomputeModule order[] = {RecomputeModule::kLayernorm, RecomputeModule::kMlaUpProj, RecomputeModule::kMoeAct,
                                   RecomputeModule::kSharedExperts, RecomputeModule::kMoe};
  uint32_t mask = kDefaultRecomputeModules;
  LayerCostRow prev = f.Row(Recompute::kSelective, mask);
  const LayerCostRow none = f.Row(Recompute::kNone, mask);
  CHECK(prev.stash_bytes <= none.stash_bytes);
  CHECK(prev.backward_input_s > none.backward_input_s);
  for (RecomputeModule m : order) {
    CAPTURE(RecomputeModuleName(m));
    mask |= RecomputeBit(m);
    const LayerCostRow r = f.Row(Recompute::kSelective, mask);
    CHECK(r.stash_bytes < prev.stash_bytes);
    CHECK(r.backward_input_s > prev.backward_input_s);
    prev = r;
  }
  // Full recompute keeps less than every module together (the block's input only).
  CHECK(f.Row(Recompute::kFull, kDefaultRecomputeModules).stash_bytes < prev.stash_bytes);
}

// DeepSeek-V3's published layout, forced: 2048 H800, PP16 dualpipev, EP64, TP1, CP1, ZeRO-1, FP8.
Status SolveDeepSeek(const ModelSpec& model, const ClusterSpec& cluster, uint32_t modules, Plan* p,
                     std::vector<Recompute> recompute = {Recompute::kSelective}) {
  SearchOptions o = testing::DeepSeekV3PublishedLayout();
  o.zero = {1};
  o.recompute = std::move(recompute);
  o.recompute_modules = modules;
  CostSource src;
  src.model = &model;
  src.cluster = &cluster;
  return SolveAuto(src, o, p);
}

TEST_CASE(
    "DeepSeek-V3 forced layout: DeepSeek's modules cut each stage's activations by in-flight x the blocks' dropped "
    "bytes") {
  ModelSpec model;
  ClusterSpec cluster;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/deepseek-v3.yaml"), &model));
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/h800.yaml"), &cluster));
  ModelSpec fp8 = model;
  REQUIRE_OK(BuildGptModel(model.gpt, DType::kFp8, &fp8));  // --precision fp8 (as planner solve rebuilds it)
  model = std::move(fp8);
  cluster.usable_memory_GiB = 1000;  // rank both, fitting or not
  cluster.memory_GiB = 1024;
  Plan sel, ds;
  REQUIRE_OK(SolveDeepSeek(model, cluster, kDefaultRecomputeModules, &sel));
  REQUIRE_OK(SolveDeepSeek(model, cluster, kDeepSeekRecomputeModules, &ds));
  CHECK(ds.recompute == Recompute::kSelective);
  CHECK(ds.recompute_modules == kDeepSeekRecomputeModules);
  CHECK(sel.recompute_modules == kDefaultRecomputeModules);
  REQUIRE(ds.stages.size() == sel.stages.size());
  // Per sample (microbatch 1, tp = cp = 1), each at the bytes it was kept (fp8: an FP8 GEMM's input 1
  // byte, gi): layernorm the QKV-down input s h at gi and the MLP input s h (fc1's: gi; the MoE's, which
  // the bf16 router reads: dt), mla_up_proj Q, K, V s a (2 dqk + dv) at dt, moe_act s k fe at gi (MoE
  // blocks); the MTP module's block drops the same; core_attn is in both sets.
  const double s = 4096, h = 7168, a = 128, dqk = 192, dv = 128, k = 8, fe = 2048, dt = 2, gi = 1;
  const double up_drop = dt * s * a * (2 * dqk + dv);
  const double dense_drop = 2 * gi * s * h + up_drop, moe_drop = (gi + dt) * s * h + up_drop + gi * s * k * fe;
  // A stage's activations are its rank's (dualpipev: both chunks, stages r and 2p - 1 - r).
  std::vector<double> chunk_drop(ds.stages.size(), 0.0), rank_drop(16, 0.0);
  for (size_t i = 0; i < ds.stages.size(); ++i) {
    const PlanStage& a_st = sel.stages[i];
    REQUIRE(a_st.first_layer == ds.stages[i].first_layer);
    REQUIRE(a_st.in_flight == ds.stages[i].in_flight);
    for (int64_t j = a_st.first_layer; j <= a_st.last_layer; ++j) {
      const Layer& l = model.layers[static_cast<size_t>(j)];
      if (l.kind == LayerKind::kMoeBlock || (l.kind == LayerKind::kMtp && l.experts > 0)) chunk_drop[i] += moe_drop;
      else if (l.kind == LayerKind::kTransformerBlock) chunk_drop[i] += dense_drop;
    }
    rank_drop[static_cast<size_t>(StagePosition(Schedule::kDualPipeV, static_cast<int64_t>(i), 16))] +=
        static_cast<double>(a_st.in_flight) * chunk_drop[i];
  }
  for (size_t i = 0; i < ds.stages.size(); ++i) {
    CAPTURE(i);
    const size_t r = static_cast<size_t>(StagePosition(Schedule::kDualPipeV, static_cast<int64_t>(i), 16));
    CHECK(sel.stages[i].activations_bytes - ds.stages[i].activations_bytes ==
          doctest::Approx(rank_drop[r]).epsilon(1e-6));
    CHECK(ds.stages[i].backward_input_s > sel.stages[i].backward_input_s);
  }
  // The worst rank by hand: rank 2 holds stages 2 and 29 (two MoE blocks each), 30 and 3 microbatches in
  // flight ((2p - r) and (r + 1)); one MoE block keeps, per sample: MLA's latent-norm inputs (q_lora +
  // kv_lora, dt) and up-projection inputs (gi), the output projection's input a dv (gi: core_attn drops
  // flash's bf16 O), the fp32 LSE 4 a s, both norms' inputs 2 s h (dt), the fp32 scores 4 s E, the shared
  // MLP's SwiGLU input 2 f_s (dt) and fc2 input f_s (gi; its input dropped with the norm output), and each
  // routed copy's permuted input h (gi) and SwiGLU input 2 f_e (dt).
  const double ql = 1536, kvl = 512, experts = 256, fs = 2048;
  const double block = (dt + gi) * s * (ql + kvl) + gi * s * a * dv + 4 * a * s + dt * 2 * s * h + 4 * s * experts +
                       s * (dt * 2 * fs + gi * fs) + s * k * (gi * h + dt * 2 * fe);
  REQUIRE(ds.stages[2].in_flight == 30);
  REQUIRE(ds.stages[29].in_flight == 3);
  REQUIRE(ds.stages[2].last_layer - ds.stages[2].first_layer == 1);
  REQUIRE(ds.stages[29].last_layer - ds.stages[29].first_layer == 1);
  CHECK(ds.stages[2].activations_bytes == doctest::Approx((30 + 3) * 2 * block).epsilon(1e-9));
  CHECK(ds.stages[2].activations_bytes / (1024.0 * 1024 * 1024) == doctest::Approx(46.793).epsilon(1e-4));
  CHECK(ds.predicted.peak_memory_bytes == ds.stages[2].peak_memory_bytes);
  // FP8 GEMM inputs at 1 byte: 82.71 GiB before (2-byte GEMM inputs), less 66 block-samples x s (q_lora +
  // kv_lora + a dv + f_s + k h) bytes = 19.59 GiB; now within the H800's 75 GiB usable.
  CHECK(ds.predicted.peak_memory_bytes / (1024.0 * 1024 * 1024) == doctest::Approx(63.12).epsilon(1e-3));
  CHECK(82.71 - ds.predicted.peak_memory_bytes / (1024.0 * 1024 * 1024) ==
        doctest::Approx(66 * s * (ql + kvl + a * dv + fs + k * h) / (1024.0 * 1024 * 1024)).epsilon(1e-3));
  CHECK(ds.predicted.peak_memory_bytes < sel.predicted.peak_memory_bytes);
  CHECK(ds.predicted.iteration_s > sel.predicted.iteration_s);
  CHECK(ds.predicted.hfu >
        sel.predicted.hfu * (sel.predicted.iteration_s / ds.predicted.iteration_s));  // more hardware FLOPs run
}

struct DeepSeekFp8 {
  ModelSpec model;
  ClusterSpec cluster;
  explicit DeepSeekFp8(double usable_GiB) {
    REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/deepseek-v3.yaml"), &model));
    REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/h800.yaml"), &cluster));
    ModelSpec fp8 = model;
    REQUIRE_OK(BuildGptModel(model.gpt, DType::kFp8, &fp8));
    model = std::move(fp8);
    cluster.usable_memory_GiB = usable_GiB;
    cluster.memory_GiB = usable_GiB + 5;
  }
};

TEST_CASE("the search also tries DeepSeek's modules on an MLA / MoE model and keeps the faster plan") {
  // The forced layout needs 105.7 GiB with core_attn, 63.1 GiB with DeepSeek's modules (fp8: GEMM inputs at
  // 1 byte), 31 GiB with full recompute.
  const std::vector<Recompute> both = {Recompute::kSelective, Recompute::kFull};
  DeepSeekFp8 tight(100);
  Plan fallback, forced;
  REQUIRE_OK(SolveDeepSeek(tight.model, tight.cluster, 0, &fallback, both));
  CHECK(fallback.recompute == Recompute::kSelective);
  CHECK(fallback.recompute_modules == kDeepSeekRecomputeModules);
  CHECK(std::any_of(fallback.notes.begin(), fallback.notes.end(), [](const std::string& n) {
    return n.find("selective recompute of core_attn, layernorm, mla_up_proj, moe_act (DeepSeek-V3's recompute") !=
               std::string::npos &&
           n.find("faster than the best plan with core_attn alone") != std::string::npos;
  }));
  // Forced core_attn: no fallback, full recompute wins; and slower than the fallback's plan.
  REQUIRE_OK(SolveDeepSeek(tight.model, tight.cluster, kDefaultRecomputeModules, &forced, both));
  CHECK(forced.recompute == Recompute::kFull);
  CHECK(forced.predicted.iteration_s > fallback.predicted.iteration_s);
  CHECK(fallback.predicted.peak_memory_bytes <= fallback.usable_memory_bytes);
  // Where core_attn alone fits, the search is as before: selective with core_attn.
  DeepSeekFp8 roomy(140);
  Plan plain;
  REQUIRE_OK(SolveDeepSeek(roomy.model, roomy.cluster, 0, &plain, both));
  CHECK(plain.recompute == Recompute::kSelective);
  CHECK(plain.recompute_modules == kDefaultRecomputeModules);
  // At the H800's 75 GiB: core_attn alone (105.7 GiB) leaves full recompute; DeepSeek's set fits.
  DeepSeekFp8 h800(75);
  Plan real;
  REQUIRE_OK(SolveDeepSeek(h800.model, h800.cluster, 0, &real, both));
  CHECK(real.recompute == Recompute::kSelective);
  CHECK(real.recompute_modules == kDeepSeekRecomputeModules);
  CHECK(real.predicted.peak_memory_bytes <= real.usable_memory_bytes);
  // Selective only: core_attn alone fits nothing at 75 GiB, the note says so (no made-up speed-up).
  Plan only;
  REQUIRE_OK(SolveDeepSeek(h800.model, h800.cluster, 0, &only, {Recompute::kSelective}));
  CHECK(only.recompute_modules == kDeepSeekRecomputeModules);
  CHECK(std::any_of(only.notes.begin(), only.notes.end(), [](const std::string& n) {
    return n.find(
               "moe_act (DeepSeek-V3's recompute, Megatron --recompute-modules): with core_attn alone no plan fits") !=
           std::string::npos;
  }));
  // Forced modules at 60 GiB: nothing fits, the error names the stage's 63.1 GiB.
  DeepSeekFp8 small(60);
  Plan none;
  const Status st = SolveDeepSeek(small.model, small.cluster, kDeepSeekRecomputeModules, &none);
  CHECK(st.code() == StatusCode::kInfeasible);
  CHECK(st.message().find("needs 63.1 GiB > 60.0 GiB usable") != std::string::npos);
  CHECK(st.message().find("recompute=selective:core_attn+layernorm+mla_up_proj+moe_act, ZeRO-1") != std::string::npos);
}

TEST_CASE("modules that apply to no layer of the model change nothing and are noted (Megatron-Core ignores them)") {
  ModelSpec model;
  ClusterSpec cluster;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/gpt2-small.yaml"), &model));
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-a100.yaml"), &cluster));
  CostSource src;
  src.model = &model;
  src.cluster = &cluster;
  SearchOptions o;
  o.gpus = 8;
  o.tp = {1};
  o.pp = {1};
  o.microbatch = {4};
  o.recompute = {Recompute::kSelective};
  Plan plain, idle;
  REQUIRE_OK(SolveAuto(src, o, &plain));
  o.recompute_modules =
      kDefaultRecomputeModules | RecomputeBit(RecomputeModule::kMoeAct) | RecomputeBit(RecomputeModule::kMoe);
  REQUIRE_OK(SolveAuto(src, o, &idle));
  CHECK(idle.predicted.iteration_s == plain.predicted.iteration_s);
  CHECK(idle.predicted.peak_memory_bytes == plain.predicted.peak_memory_bytes);
  CHECK(idle.recompute_modules == o.recompute_modules);
  CHECK(std::any_of(idle.notes.begin(), idle.notes.end(), [](const std::string& n) {
    return n ==
           "recompute modules moe_act, moe change nothing on model gpt2-small (no layer they apply to); Megatron-Core "
           "ignores them there too";
  }));
  CHECK(std::none_of(plain.notes.begin(), plain.notes.end(),
                     [](const std::string& n) { return n.find("change nothing") != std::string::npos; }));
}

TEST_CASE("plan field recompute_modules: written with selective recompute, read back, unknown names refused") {
  Plan p;
  p.recompute = Recompute::kSelective;
  p.recompute_modules = kDeepSeekRecomputeModules;
  p.gpus = p.gpus_used = p.global_batch = 1;
  p.config = "1";
  PlanStage stage;
  stage.devices = {0};
  p.stages = {stage};
  const std::string text = PlanToYaml(p);
  CHECK(text.find("recompute_modules:\n  - \"core_attn\"\n  - \"layernorm\"\n  - \"mla_up_proj\"\n  - \"moe_act\"\n") !=
        std::string::npos);
  Plan q;
  REQUIRE_OK(ParsePlan("p.plan.yaml", text, &q));
  CHECK(q.recompute_modules == kDeepSeekRecomputeModules);
  CHECK(RecomputeLabel(q.recompute, 0, q.recompute_modules) == "selective:core_attn+layernorm+mla_up_proj+moe_act");
  CHECK(RecomputeLabel(q.recompute, 0, kDefaultRecomputeModules) == "selective");
  p.recompute = Recompute::kFull;
  CHECK(PlanToYaml(p).find("recompute_modules") == std::string::npos);
  std::string bad = text;
  bad.replace(bad.find("\"layernorm\""), 11, "\"layernom\"");
  Plan r;
  const Status st = ParsePlan("p.plan.yaml", bad, &r);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("recompute_modules[1]") != std::string::npos);
  CHECK(st.message().find("unknown recompute module 'layernom'; choose from core_attn, layernorm, mla_up_proj, "
                          "moe_act, mlp, moe, shared_experts") != std::string::npos);
}

}  // namespace
}  // namespace planner
