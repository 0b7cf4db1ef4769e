// Kernel-level costs (docs/cost_model.md section 2, "Kernel-level compute" and "Engines"): the kernel
// tables' lookups against the published figures they hold, the engines' files, and what the cost
// model does with them: closed forms where there are some, orderings where the physics gives one.
#include <array>
#include <cmath>
#include <string>

#include "dp_solver/cost_model.h"
#include "dp_solver/evaluate.h"
#include "spec/engine_spec.h"
#include "spec/kernel_table.h"
#include "tests/test_util.h"

namespace planner {
namespace {

KernelTable Table(const char* name) {
  KernelTable t;
  REQUIRE_OK(LoadKernelTable(name, &t));
  return t;
}

EngineSpec Engine(const char* name) {
  EngineSpec e;
  REQUIRE_OK(LoadEngineSpec(name, &e));
  return e;
}

TEST_CASE("attention lookups return the published points and interpolate between them") {
  const KernelTable h = Table("h100");
  // FlashAttention-3 paper, BF16 forward, causal, head dim 128 (configs/kernels/h100.yaml).
  CHECK(h.AttentionTflops("fa3", "fwd", true, 128, 4096) == doctest::Approx(579));
  CHECK(h.AttentionTflops("fa3", "fwd", true, 128, 16384) == doctest::Approx(616));
  CHECK(h.AttentionTflops("fa3", "fwd", true, 128, 1 << 20) == doctest::Approx(616));  // clamped past the table
  CHECK(h.AttentionTflops("fa3", "fwd", true, 128, 256) == doctest::Approx(292));      // clamped before it
  // log-linear in seq: halfway in log between 2k and 4k
  CHECK(h.AttentionTflops("cudnn", "fwd", true, 128, std::sqrt(2048.0 * 4096.0)) == doctest::Approx((484 + 518) / 2.0));
  // linear in log2(head_dim): 64 -> 128 at 2^6.5
  CHECK(h.AttentionTflops("fa2", "fwd", false, std::pow(2.0, 6.5), 8192) == doctest::Approx((322 + 370) / 2.0));
  // an unpublished causal backward: non-causal backward x causal forward / non-causal forward
  CHECK(h.AttentionTflops("fa3", "bwd", true, 128, 16384) == doctest::Approx(561.0 * 616 / 648));
  CHECK(h.AttentionTflops("fa3", "bwd", false, 128, 16384) == doctest::Approx(561));
  CHECK(h.AttentionTflops("triton", "fwd", true, 128, 4096) == 0);
  // A100 publishes forward + backward only: the curve serves both passes.
  const KernelTable a = Table("a100");
  CHECK(a.AttentionTflops("fa2", "fwd", true, 128, 8192) == doctest::Approx(182));
  CHECK(a.AttentionTflops("fa2", "bwd", true, 128, 8192) == doctest::Approx(182));
  CHECK_FALSE(a.HasKernel("cudnn"));
}

TEST_CASE("the GEMM model reproduces DeepGEMM's published efficiencies it was not fitted to") {
  const KernelTable h = Table("h100");
  const GemmEfficiency& fp8 = *h.Gemm(DType::kFp8);
  // 4096 x 7168 x 16384: 896 tiles in 7 waves of 132 (fill 0.9697), K factor 16384 / 16896.
  CHECK(h.GemmFraction(fp8, 4096, 7168, 16384) == doctest::Approx(0.77 * 16384 / 16896 * 896 / 924.0));
  // DeepGEMM README (H800, 1979 peak): 4096x24576x1536 1125 TFLOP/s, 4096x7168x2048 1168, 4096x4096x7168 1265.
  CHECK(h.GemmFraction(fp8, 4096, 24576, 1536) == doctest::Approx(1125 / 1979.0).epsilon(0.05).scale(0));
  CHECK(h.GemmFraction(fp8, 4096, 7168, 2048) == doctest::Approx(1168 / 1979.0).epsilon(0.05).scale(0));
  // The third shape sits 9.0% above DeepGEMM's figure (0.697 against 0.639: the model is optimistic there). The
  // bound said 8% and was never applied (doctest's Approx at scale 1 made it absolute): 10%, relative, as measured.
  CHECK(h.GemmFraction(fp8, 4096, 4096, 7168) == doctest::Approx(1265 / 1979.0).epsilon(0.10).scale(0));
  // Smaller K and fewer tiles never speed a GEMM up.
  const GemmEfficiency& bf16 = *h.Gemm(DType::kBf16);
  CHECK(h.GemmFraction(bf16, 8192, 8192, 512) < h.GemmFraction(bf16, 8192, 8192, 8192));
  CHECK(h.GemmFraction(bf16, 128, 256, 8192) < h.GemmFraction(bf16, 8192, 8192, 8192));
  CHECK(h.Gemm(DType::kFp32) == nullptr);
  CHECK(h.Gemm(DType::kFp16) != nullptr);
}

TEST_CASE("Blackwell tables: a GB200 name takes gb200, a B200 name b200, and they return the published figures") {
  KernelTable t;
  REQUIRE(BuiltinKernelTableFor("B200-GB200-186GB", &t));  // configs/clusters/gb200-nvl72.yaml: holds "B200" too
  CHECK(t.name == "gb200");
  REQUIRE(BuiltinKernelTableFor("B200-SXM-180GB", &t));  // configs/clusters/b200.yaml
  CHECK(t.name == "b200");
  REQUIRE(BuiltinKernelTableFor("NVIDIA B200", &t));
  CHECK(t.name == "b200");
  REQUIRE(BuiltinKernelTableFor("H100-SXM5-80GB", &t));
  CHECK(t.name == "h100");
  const KernelTable b = Table("b200"), g = Table("gb200");
  // cudnn-frontend's B200 (cuDNN 9.13.1) and GB200 (cuDNN 9.17) CSVs, causal, head dim 128.
  CHECK(b.AttentionTflops("cudnn", "fwd", true, 128, 8192) == doctest::Approx(1384.2));
  CHECK(b.AttentionTflops("cudnn", "bwd", true, 128, 131072) == doctest::Approx(1127.7));
  CHECK(g.AttentionTflops("cudnn", "fwd", true, 128, 8192) == doctest::Approx(1584));
  CHECK(b.AttentionTflops("fa2", "fwd", true, 128, 32768) == doctest::Approx(435.8));
  CHECK_FALSE(b.HasKernel("fa3"));  // FlashAttention-3 is Hopper only
  // The GEMM model against the benchmarks it was set from and one it was not: MAMF's maximum is not exceeded by
  // more than 3% at any K (its K factor -> 1), and XLA's K sweep (K 2048 -> 4096 at M = N = 4096: 1277.8 -> 1416.9
  // TFLOP/s bf16) is reproduced as a ratio within 3%.
  const GemmEfficiency& bf16 = *b.Gemm(DType::kBf16);
  CHECK(b.GemmFraction(bf16, 16384, 16384, 1 << 20) <= 1745.0 / 2250 * 1.03);
  CHECK(b.GemmFraction(bf16, 16384, 16384, 1 << 20) >= 1745.0 / 2250 * 0.97);
  CHECK(b.GemmFraction(bf16, 4096, 4096, 4096) / b.GemmFraction(bf16, 4096, 4096, 2048) ==
        doctest::Approx(1416.9 / 1277.8).epsilon(0.03).scale(0));
  const GemmEfficiency& fp8 = *b.Gemm(DType::kFp8);
  CHECK(b.GemmFraction(fp8, 16384, 16384, 1 << 20) <= 3432.5 / 4500 * 1.03);
  CHECK(g.GemmFraction(*g.Gemm(DType::kBf16), 16384, 16384, 1 << 20) <= 1822.0 / 2500 * 1.03);
  CHECK(g.GemmFraction(*g.Gemm(DType::kFp8), 16384, 16384, 1 << 20) <= 3615.6 / 5000 * 1.03);
  // GB200: a larger peak, a smaller share of it (MAMF 0.729 against B200's 0.776); still faster in TFLOP/s.
  CHECK(2500 * g.GemmFraction(*g.Gemm(DType::kBf16), 8192, 8192, 8192) > 2250 * b.GemmFraction(bf16, 8192, 8192, 8192));
  CHECK(g.GemmFraction(*g.Gemm(DType::kBf16), 8192, 8192, 8192) < b.GemmFraction(bf16, 8192, 8192, 8192));
  // MXFP8 is a Blackwell recipe: the tensor cores scale its 1 x 32 blocks (no amax pass); Hopper's table has none.
  REQUIRE(b.fp8_recipes.count("mxfp8") == 1);
  CHECK(b.fp8_recipes.at("mxfp8").amax_passes == 0);
  // Its GEMMs at 0.95 of per-tensor FP8's (TransformerEngine's pre-quantized GEMM profile: 6.812 / 7.161 ms).
  CHECK(b.fp8_recipes.at("mxfp8").gemm == doctest::Approx(0.95));
  CHECK(g.fp8_recipes.at("mxfp8").gemm == doctest::Approx(0.95));
  CHECK(b.fp8_recipes.at("current").gemm == doctest::Approx(1.0));
  CHECK(Table("h100").fp8_recipes.count("mxfp8") == 0);
}

TEST_CASE("built-in engines parse and say what they run") {
  CHECK(BuiltinEngines() == std::vector<std::string>{"megatron-core", "torchtitan", "torchtitan-compile", "deepspeed"});
  CHECK(std::string(DefaultEngineName()) == "megatron-core");
  const EngineSpec m = Engine("megatron-core"), t = Engine("torchtitan"), c = Engine("torchtitan-compile");
  CHECK(m.attention == "cudnn");
  CHECK(t.attention == "fa2");
  CHECK(t.elementwise_traffic > c.elementwise_traffic);
  CHECK(m.zero == std::vector<int64_t>{0, 1, 3});
  CHECK(AttentionKernel(Table("h100"), m) == "cudnn");
  CHECK(AttentionKernel(Table("a100"), m) == "fa2");  // no cuDNN or FA-3 curves on A100: the fallback
  EngineSpec bad;
  CHECK(LoadEngineSpec("nope", &bad).code() == StatusCode::kInvalidArgument);
  // MoE dispatch: Megatron-Core runs NCCL's all-to-all and DeepEP (flex, its hops measured serial) and hides the
  // measured 37% of the all-to-all with its EP overlap; torchtitan's file names no flex dispatcher.
  CHECK(m.moe_dispatchers == std::vector<std::string>{"alltoall", "flex"});
  CHECK(m.moe_flex_serial);
  CHECK(m.moe_a2a_hidden == doctest::Approx(0.37));
  CHECK(t.moe_dispatchers == std::vector<std::string>{"alltoall"});
  CHECK(t.moe_a2a_hidden == 0);  // unset: the engine has no EP overlap (--moe-overlap on is refused on it)
  // The expert block's host launches: Megatron-Core's per local expert, 8.8 us each (the H200 check's host); torchtitan
  // names none (not modelled).
  CHECK(m.moe_host_launch_s == doctest::Approx(8.8e-6).scale(0));
  const std::array<double, 2> bf16 = m.MoeHostSecondsPerExpert(DType::kBf16);
  CHECK(bf16[0] == doctest::Approx(2 * 8.8e-6).scale(0));
  CHECK(bf16[1] == doctest::Approx(4 * 8.8e-6).scale(0));
  CHECK(m.MoeHostSecondsPerExpert(DType::kFp16)[1] == doctest::Approx(4 * 8.8e-6).scale(0));  // fp16: bf16's launches
  CHECK(m.fp8_recipe == "delayed");
  CHECK(m.MoeHostSecondsPerExpert(DType::kFp8)[0] ==
        doctest::Approx(4 * 8.8e-6).scale(0));  // delayed: cast-transpose per expert
  EngineSpec current = m;
  current.fp8_recipe = "current";
  CHECK(current.MoeHostSecondsPerExpert(DType::kFp8)[0] == doctest::Approx(10 * 8.8e-6).scale(0));
  CHECK(current.MoeHostSecondsPerExpert(DType::kFp8)[1] == doctest::Approx(12 * 8.8e-6).scale(0));
  EngineSpec mx = m;  // MXFP8: one fused quantize per tensor, delayed scaling's launches (an assumption)
  mx.fp8_recipe = "mxfp8";
  CHECK(mx.MoeHostSecondsPerExpert(DType::kFp8)[0] == doctest::Approx(4 * 8.8e-6).scale(0));
  CHECK(mx.MoeHostSecondsPerExpert(DType::kFp8)[1] == doctest::Approx(6 * 8.8e-6).scale(0));
  CHECK(m.MoeHostSecondsPerExpert(DType::kFp32)[0] == 0);
  CHECK(t.MoeHostSecondsPerExpert(DType::kBf16)[0] == 0);
}

TEST_CASE("compute slowdown: the hidden part of a bucketed collective costs its share") {
  CHECK(ExposedBucketed(1.0, 0.1, 0.5, true, 0.2) == doctest::Approx(0.1 + 0.4 + 0.2 * 0.5));
  CHECK(ExposedBucketed(1.0, 0.1, 5.0, true, 0.2) == doctest::Approx(0.1 + 0.2 * 0.9));
  CHECK(ExposedBucketed(1.0, 0.1, 5.0, false, 0.2) == doctest::Approx(1.0));
}

struct KernelFixture {
  ModelSpec model;
  ClusterSpec cluster;
  KernelTable kernels = Table("h100");
  EngineSpec engine = Engine("megatron-core");
  explicit KernelFixture(int64_t seq = 8192, DType dtype = DType::kBf16) {
    REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/llama3-8b.yaml"), &model));
    model.gpt.seq = seq;
    REQUIRE_OK(BuildGptModel(model.gpt, dtype, &model));
    REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-h100.yaml"), &cluster));
  }
  // The transformer block's row (one microbatch sample, SP with TP).
  LayerCostRow Block(const EngineSpec& e, int64_t tp, int64_t cp, const CostOptions& o) const {
    CostSource s;
    s.model = &model;
    s.cluster = &cluster;
    s.kernels = &kernels;
    s.engine = &e;
    CostTable t;
    REQUIRE_OK(BuildCostTable(s, TableShape{1, tp, cp, tp > 1}, o, &t));
    for (size_t i = 0; i < model.layers.size(); ++i) {
      if (model.layers[i].kind == LayerKind::kTransformerBlock) return t.rows[i];
    }
    FAIL("no transformer block");
    return {};
  }
  // Its compute: the row less its exposed TP and CP communication.
  static double Compute(const LayerCostRow& r) {
    return r.forward_s + r.backward_input_s + r.backward_weight_s - r.tp_comm_s - r.cp_comm_s;
  }
  double BlockSeconds(const EngineSpec& e, int64_t tp = 1, int64_t cp = 1) const {
    return Compute(Block(e, tp, cp, CostOptions{}));
  }
};

TEST_CASE("kernel-level block times: engines, precisions and sequence lengths order as the kernels do") {
  const KernelFixture f;
  const double megatron = f.BlockSeconds(f.engine), titan = f.BlockSeconds(Engine("torchtitan")),
               compiled = f.BlockSeconds(Engine("torchtitan-compile"));
  CHECK(titan > compiled);     // eager elementwise traffic
  CHECK(compiled > megatron);  // FlashAttention-2 against cuDNN's fused attention on Hopper
  // The block is slower than its GEMMs alone at the large-shape rate, and not by more than 2x at 8k.
  const Layer* block = nullptr;
  for (const auto& l : f.model.layers) {
    if (l.kind == LayerKind::kTransformerBlock) block = &l;
  }
  REQUIRE(block != nullptr);
  const double peak = 989.4e12 * f.engine.sustained_gemm * 0.84;
  const double gemm_only = (block->fwd_flops + block->bwd_flops() - 3.5 * block->attention_core_fwd_flops) / peak;
  CHECK(megatron > gemm_only);
  CHECK(megatron < 2 * gemm_only);
  // FP8: faster than bf16, far from the 2x of the peaks (bf16 attention, casts).
  const KernelFixture f8(8192, DType::kFp8);
  const double fp8 = f8.BlockSeconds(f8.engine);
  CHECK(fp8 < megatron);
  CHECK(fp8 > 0.55 * megatron);
  // Attention's share grows with the sequence: per token, 32k costs more than 4k.
  const KernelFixture s4(4096), s32(32768);
  CHECK(s32.BlockSeconds(s32.engine) / 32768 > 1.3 * s4.BlockSeconds(s4.engine) / 4096);
}

TEST_CASE("a power cap slows GEMMs and attention by the SM clock at that cap, not memory-bound work") {
  KernelFixture f;
  // configs/kernels/h100.yaml power_clock: 500 W 0.879, 600 W 0.959, 700 W (the TDP) 1.
  CHECK(f.kernels.ClockUnderCap(0) == 1);
  CHECK(f.kernels.ClockUnderCap(700) == 1);
  CHECK(f.kernels.ClockUnderCap(800) == 1);
  CHECK(f.kernels.ClockUnderCap(500) == doctest::Approx(0.879));
  CHECK(f.kernels.ClockUnderCap(550) == doctest::Approx((0.879 + 0.959) / 2));
  CHECK(f.kernels.ClockUnderCap(300) == doctest::Approx(0.879));  // not extended below the first point
  const double full = f.BlockSeconds(f.engine);
  f.cluster.power_cap_W = 700;
  CHECK(f.BlockSeconds(f.engine) == full);
  f.cluster.power_cap_W = 500;
  const double capped = f.BlockSeconds(f.engine);
  CHECK(capped > full * 1.05);
  CHECK(capped < full / 0.879);  // the memory-bound part keeps its speed
  // With the memory-bound work made free, the block slows by exactly the clock.
  f.cluster.hbm_bandwidth_GBps = 1e15;
  const double compute_capped = f.BlockSeconds(f.engine);
  f.cluster.power_cap_W = 0;
  CHECK(compute_capped / f.BlockSeconds(f.engine) == doctest::Approx(1 / 0.879).epsilon(1e-6));
}

TEST_CASE("FP8 weights cast per microbatch where the engine keeps no FP8 copy: its GEMMs' k x n x the cast bytes") {
  const KernelFixture f(8192, DType::kFp8);
  EngineSpec casting = Engine("torchtitan"), cached = casting;
  cached.fp8_weight_bytes = 1;  // the same engine with Transformer Engine's cached copy
  const Layer* block = nullptr;
  for (const auto& l : f.model.layers) {
    if (l.kind == LayerKind::kTransformerBlock) block = &l;
  }
  REQUIRE(block != nullptr);
  double weights = 0;
  for (const GemmShape& g : block->gemms) weights += g.high_precision ? 0 : g.count * g.k * g.n;
  REQUIRE(weights > 200e6);  // Llama 3 8B's block: 218M weights
  // tensorwise (current scaling): read the bf16 weight twice (amax, cast), write it and its transpose in FP8.
  const double bytes = 2.0 * 2 + 2.0;
  const double hbm = f.cluster.hbm_bandwidth_GBps * 1e9 * f.kernels.memory_efficiency * casting.sustained_memory /
                     casting.elementwise_traffic;
  CHECK(f.BlockSeconds(casting) - f.BlockSeconds(cached) == doctest::Approx(weights * bytes / hbm).epsilon(1e-9));
  // bf16 models cast nothing.
  const KernelFixture b(8192, DType::kBf16);
  CHECK(b.BlockSeconds(casting) == b.BlockSeconds(cached));
}

TEST_CASE("fused gradient accumulation: a dW GEMM reads and writes the gradient buffer, memory-bound over few tokens") {
  KernelFixture f(64);  // 64 tokens, and the tensor cores made free: every GEMM is bound by its HBM traffic
  f.cluster.peak_tflops["bf16"] = 1e12;
  EngineSpec fused = Engine("megatron-core"), separate = fused;
  CHECK(fused.wgrad_accumulation_fused);  // Megatron-LM's --gradient-accumulation-fusion default
  CHECK_FALSE(Engine("torchtitan").wgrad_accumulation_fused);
  separate.wgrad_accumulation_fused = false;
  const Layer* block = nullptr;
  for (const auto& l : f.model.layers) {
    if (l.kind == LayerKind::kTransformerBlock) block = &l;
  }
  REQUIRE(block != nullptr);
  double weights = 0;
  for (const GemmShape& g : block->gemms) weights += g.count * g.k * g.n;
  const double hbm_raw = f.cluster.hbm_bandwidth_GBps * 1e9 * f.kernels.memory_efficiency * fused.sustained_memory;
  const LayerCostRow a = f.Block(fused, 1, 1, CostOptions{}), b = f.Block(separate, 1, 1, CostOptions{});
  // fp32 main_grad (bf16 model's default): 4 bytes read + 4 written against 2 written.
  CHECK(a.backward_weight_s - b.backward_weight_s == doctest::Approx(weights * (8 - 2) / hbm_raw).epsilon(1e-9));
  CHECK(a.forward_s == b.forward_s);
  CHECK(a.backward_input_s == b.backward_input_s);
  // --grad-dtype bf16 (--grad-reduce-in-bf16): 2 + 2.
  CostOptions bf16;
  bf16.grad_dtype = DType::kBf16;
  CHECK(f.Block(fused, 1, 1, bf16).backward_weight_s - b.backward_weight_s ==
        doctest::Approx(weights * (4 - 2) / hbm_raw).epsilon(1e-9));
  // Over 8192 tokens the dW GEMMs are compute-bound: the buffer's traffic costs nothing.
  const KernelFixture big(8192);
  CHECK(big.Block(fused, 1, 1, CostOptions{}).backward_weight_s ==
        big.Block(separate, 1, 1, CostOptions{}).backward_weight_s);
}

TEST_CASE("FP8 GEMMs run at the engine's FP8 sustained share, bf16 GEMMs and attention at theirs") {
  const EngineSpec m = Engine("megatron-core");
  REQUIRE(m.sustained_gemm_fp8 > 0);
  CHECK(m.sustained_gemm_fp8 < m.sustained_gemm);  // docs/cost_model.md "Engines": calibrated below bf16's
  CHECK(m.SustainedGemm(DType::kFp8) == m.sustained_gemm_fp8);
  CHECK(m.SustainedGemm(DType::kBf16) == m.sustained_gemm);
  CHECK(m.SustainedGemm(DType::kFp16) == m.sustained_gemm);
  EngineSpec unset = m;
  unset.sustained_gemm_fp8 = -1;  // a file without gemm_fp8: gemm's share for every precision
  CHECK(unset.SustainedGemm(DType::kFp8) == m.sustained_gemm);
  // With memory-bound work made free, an FP8 block's time is its FP8 GEMMs' and its bf16 attention core's: halving
  // the FP8 share doubles the GEMMs' part and leaves the core's, so the block slows by more than 1.5x, less than 2x.
  KernelFixture f8(8192, DType::kFp8);
  f8.cluster.hbm_bandwidth_GBps = 1e15;
  EngineSpec a = f8.engine, b = f8.engine;
  a.sustained_attention = b.sustained_attention = 1;
  a.sustained_gemm_fp8 = 0.8;
  b.sustained_gemm_fp8 = 0.4;
  const double ta = f8.BlockSeconds(a), tb = f8.BlockSeconds(b);
  CHECK(tb > 1.5 * ta);
  CHECK(tb < 2 * ta);  // the attention core (bf16) keeps its time
  EngineSpec c = b;
  c.sustained_gemm = 0.2;  // bf16's share does not touch an FP8 block's GEMMs
  CHECK(f8.BlockSeconds(c) == tb);
  // A bf16 model ignores the FP8 share.
  KernelFixture f16(8192, DType::kBf16);
  EngineSpec d = f16.engine;
  d.sustained_gemm_fp8 = 0.1;
  CHECK(f16.BlockSeconds(d) == f16.BlockSeconds(f16.engine));
}

TEST_CASE("ring attention's steps: full off-diagonal blocks at long chunks, short chunks' low rates") {
  // 64k over cp 4: the diagonal step is causal at 16k, the other three non-causal at 8k (full blocks, a
  // higher rate than the causal kernel's): a little faster than a quarter of the whole sequence's time.
  // The kernels alone: an engine whose ring steps run as fast as one kernel (cp_ring 1).
  const KernelFixture f(65536);
  EngineSpec kernels_only = f.engine;
  kernels_only.cp_ring_fwd = kernels_only.cp_ring_bwd = 1;
  const double one = f.BlockSeconds(kernels_only, 1, 1), four = f.BlockSeconds(kernels_only, 1, 4);
  CHECK(four < one / 4);
  CHECK(four > 0.85 * one / 4);
  // 8k over cp 8: 1k causal and 512-token non-causal steps, far below the 8k rate: slower than an eighth.
  const KernelFixture g(8192);
  CHECK(g.BlockSeconds(kernels_only, 1, 8) > g.BlockSeconds(kernels_only, 1, 1) / 8);
  // Megatron-Core's ring (TE: merges beside the next step's kernel) adds nothing to its kernels.
  REQUIRE(f.engine.cp_ring_fwd == 1);
  REQUIRE(f.engine.cp_ring_bwd == 1);
  // A ring with a share (torchtitan's: 0.781 forward, 0.859 backward) slows only the attention core, only under
  // cp > 1: slower than the kernels alone, by less than the forward share's whole inverse.
  EngineSpec torch_ring = f.engine;
  torch_ring.cp_ring_fwd = 0.781;
  torch_ring.cp_ring_bwd = 0.859;
  CHECK(f.BlockSeconds(torch_ring, 1, 1) == one);
  const double ring = f.BlockSeconds(torch_ring, 1, 4);
  CHECK(ring > four * 1.03);
  CHECK(ring < four / 0.781);
}

TEST_CASE("sliding-window attention: its pairs at the causal kernel's rate over 2 w tokens") {
  // Llama 3 8B at 8k with every block windowed: the block's time less the full block's is the attention core's
  // alone; with the same wave fill and share for every window, the ratio of two such differences is the kernels'.
  const KernelFixture full(8192);
  auto windowed = [&](int64_t w) {
    KernelFixture f(8192);
    f.model.gpt.sliding_window = w;
    REQUIRE_OK(BuildGptModel(f.model.gpt, DType::kBf16, &f.model));
    return f;
  };
  const KernelFixture w2k = windowed(2048), w1k = windowed(1024), w8k = windowed(8192);
  const double t_full = full.BlockSeconds(full.engine);
  CHECK(w8k.BlockSeconds(w8k.engine) == t_full);  // a window as long as the sequence: the causal block
  const double t2 = w2k.BlockSeconds(w2k.engine), t1 = w1k.BlockSeconds(w1k.engine);
  CHECK(t1 < t2);
  CHECK(t2 < t_full);
  const KernelTable& k = full.kernels;
  const double s = 8192, flops_per_pair = 4 * 4096;  // 2 a (dqk + dv), a d = 4096
  // Core seconds per FLOP-rate unit: forward pairs at the forward curve, backward 2.5x at the backward curve.
  auto core = [&](double pairs, double seq) {
    const double f = flops_per_pair * pairs;
    return f / k.AttentionTflops("cudnn", "fwd", true, 128, seq) +
           2.5 * f / k.AttentionTflops("cudnn", "bwd", true, 128, seq);
  };
  const double x_full = core(s * s / 2, s), x2 = core(2048 * s - 2048.0 * 2048 / 2, 4096),
               x1 = core(1024 * s - 1024.0 * 1024 / 2, 2048);
  CHECK((t_full - t2) / (t_full - t1) == doctest::Approx((x_full - x2) / (x_full - x1)).epsilon(1e-9));
}

TEST_CASE("the ring's hidden exchange pays compute_slowdown unless the engine's cp_ring shares carry it") {
  // 64k over cp 4 with a 0.19 slowdown: the exposed exchange is the part not hidden plus 0.19 of the hidden part;
  // an engine whose ring shares were measured with the exchange beside them (cp_ring.with_exchange) pays only
  // the part not hidden.
  const KernelFixture f(65536);
  CostOptions o;
  o.compute_slowdown = 0.19;
  EngineSpec plain = f.engine, carried = f.engine;
  plain.compute_slowdown = carried.compute_slowdown = 0.19;
  carried.cp_ring_with_exchange = true;
  const LayerCostRow a = f.Block(plain, 1, 4, o), b = f.Block(carried, 1, 4, o), none = f.Block(plain, 1, 4, {});
  REQUIRE(a.cp_total_s > 0);
  CHECK(b.cp_comm_s == doctest::Approx(none.cp_comm_s).epsilon(1e-12));  // no slowdown: as with compute_slowdown 0
  CHECK(a.cp_comm_s > b.cp_comm_s);
  CHECK(a.cp_comm_s - b.cp_comm_s <= 0.19 * a.cp_total_s * (1 + 1e-9));  // at most 0.19 of the whole exchange
}

TEST_CASE("all-gather context parallelism: K, V gathered per layer and pass, exposed; long kernels, no ring share") {
  const KernelFixture f(65536);
  CostOptions ring_o, ag_o;
  ag_o.cp_comm = CpCommType::kAllGather;
  const Layer* block = nullptr;
  for (const auto& l : f.model.layers) {
    if (l.kind == LayerKind::kTransformerBlock) block = &l;
  }
  REQUIRE(block != nullptr);
  // Llama 3 8B at 64k: K and V of the whole sequence, 8 KV heads x 128 x 2 bytes x 2, 268 MB per sample.
  REQUIRE(block->cp_kv_bytes == doctest::Approx(2.0 * 65536 * 8 * 128 * 2));
  // An engine whose ring steps pay a share (torchtitan's), so that the all-gather's ignoring it shows.
  EngineSpec shared = f.engine;
  shared.cp_ring_fwd = 0.781;
  shared.cp_ring_bwd = 0.859;
  for (int64_t tp : {1, 2}) {
    CAPTURE(tp);
    const LayerCostRow ag = f.Block(shared, tp, 4, ag_o), ring = f.Block(shared, tp, 4, ring_o);
    // Forward: one all-gather of the rank's heads' K, V over the CP group (4 ranks tp apart, one node);
    // backward: the gather again and a reduce-scatter of dK, dV of the same bytes. Nothing hidden.
    const std::vector<int64_t> group = GroupSpread(f.cluster, 4, tp);
    const double bytes = block->cp_kv_bytes / static_cast<double>(tp);
    // K and V apart: two collectives of half the bytes each.
    const double gather = AllGatherSeconds(f.cluster, bytes / 2, group);
    CHECK(ReduceScatterSeconds(f.cluster, bytes / 2, group) == doctest::Approx(gather).scale(0));
    CHECK(ag.cp_total_s == doctest::Approx(6 * gather).scale(0));
    CHECK(2 * gather > AllGatherSeconds(f.cluster, bytes, group));  // each call pays its latency
    CHECK(ag.cp_comm_s == doctest::Approx(ag.cp_total_s).scale(0));
    // The ring hides most of its exchange behind its steps; the all-gather hides none.
    CHECK(ring.cp_comm_s < ring.cp_total_s);
    // Its compute: no ring share, kernels over the gathered keys: faster than the ring's steps.
    const double ag_compute = KernelFixture::Compute(ag), ring_compute = KernelFixture::Compute(ring);
    CHECK(ag_compute < ring_compute);
    // Without the ring's share (cp_ring 1) the ring's kernels alone are still slower: 8k blocks against 32k keys.
    EngineSpec kernels_only = shared;
    kernels_only.cp_ring_fwd = kernels_only.cp_ring_bwd = 1;
    const LayerCostRow bare = f.Block(kernels_only, tp, 4, ring_o);
    const double bare_compute =
        bare.forward_s + bare.backward_input_s + bare.backward_weight_s - bare.tp_comm_s - bare.cp_comm_s;
    CHECK(ag_compute < bare_compute);
    CHECK(ag_compute > 0.9 * bare_compute);  // attention is part of the block
    // The all-gather ignores the engine's ring share: the same compute with cp_ring 1.
    const LayerCostRow ag_bare = f.Block(kernels_only, tp, 4, ag_o);
    CHECK(ag_bare.forward_s == doctest::Approx(ag.forward_s));
    CHECK(ag_bare.backward_input_s == doctest::Approx(ag.backward_input_s));
  }
  // Selective recompute of core_attn re-runs the attention function's forward, its all-gathers with it.
  CostOptions sel = ag_o;
  const LayerCostRow plain = f.Block(f.engine, 1, 4, ag_o);
  LayerCostRow recomputed;
  {
    CostSource s;
    s.model = &f.model;
    s.cluster = &f.cluster;
    s.kernels = &f.kernels;
    s.engine = &f.engine;
    CostTable t;
    TableShape shape{1, 1, 4, false};
    shape.recompute = Recompute::kSelective;
    shape.recompute_modules = RecomputeBit(RecomputeModule::kCoreAttn);
    REQUIRE_OK(BuildCostTable(s, shape, sel, &t));
    for (size_t i = 0; i < f.model.layers.size(); ++i) {
      if (f.model.layers[i].kind == LayerKind::kTransformerBlock) recomputed = t.rows[i];
    }
  }
  CHECK(recomputed.cp_total_s ==
        doctest::Approx(plain.cp_total_s * 4 / 3).scale(0));  // a forward's gathers: 2 of 6 halves
  CHECK(recomputed.cp_comm_s == doctest::Approx(recomputed.cp_total_s).scale(0));
  // cp 1: nothing to exchange, the same row either way.
  const LayerCostRow one_ag = f.Block(f.engine, 1, 1, ag_o), one = f.Block(f.engine, 1, 1, ring_o);
  CHECK(one_ag.forward_s == one.forward_s);
  CHECK(one_ag.cp_total_s == 0);
}

}  // namespace
}  // namespace planner
