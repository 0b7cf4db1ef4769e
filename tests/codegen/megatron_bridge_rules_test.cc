// megatron_bridge.py (codegen/megatron_bridge.cc; docs/exports.md "Megatron-Bridge"): the plan's settings as Bridge's
// fields, what only Bridge runs (LoRA, packed fine-tuning), and its refusals. Bridge's own code checks the files in
// tests/exports/megatron_bridge_test.sh; these pin what the writer decides.
#include <string>
#include <utility>
#include <vector>

#include "codegen/exports.h"
#include "spec/layer_catalog.h"
#include "tests/test_util.h"

namespace planner {
namespace {

// tiny-gpt's template at `dtype`: embedding, block0..3, final_layernorm, lm_head, loss (8 layers).
ModelSpec Tiny(DType dtype = DType::kBf16, int64_t lora_rank = 0, int64_t packed = 0) {
  GptConfig g;
  g.layers = 4;
  g.hidden = 128;
  g.heads = 4;
  g.seq = 64;
  g.vocab = 512;
  g.ffn_act = "swiglu";
  g.ffn = 256;
  g.norm = "rmsnorm";
  g.position = "rope";
  g.packed_length = packed;
  g.lora.rank = lora_rank;
  g.lora.targets = LoraTargetBit(GemmRole::kQkv) | LoraTargetBit(GemmRole::kFc2);
  ModelSpec m;
  REQUIRE_OK(BuildGptModel(g, dtype, &m));
  return m;
}

// pp x dp x tp ranks, two stages of four layers (1F1B), m microbatches of `mbs` samples.
LaunchPlan Launch(int64_t pp, int64_t dp, int64_t tp, int64_t mbs, Schedule s = Schedule::k1F1B) {
  LaunchPlan L;
  L.schedule = s;
  L.pp = pp;
  L.dp = dp;
  L.tp = tp;
  L.interleave = 1;
  L.num_microbatches = 4;
  L.microbatch_size = mbs;
  L.global_batch = 4 * mbs * dp;
  L.ranks.resize(static_cast<size_t>(pp * dp * tp));
  for (int64_t q = 0; q < pp; ++q) {
    LaunchStage st;
    st.first_layer = q * 8 / pp;
    st.last_layer = (q + 1) * 8 / pp - 1;
    st.replicas = dp;
    L.stages.push_back(st);
  }
  return L;
}

std::pair<codegen_internal::Files, std::vector<std::string>> Export(const ModelSpec& m, const LaunchPlan& L,
                                                                    const Plan& plan = Plan{}) {
  codegen_internal::Files files;
  std::vector<std::string> notes;
  codegen_internal::AddMegatronBridge(plan, m, L, &files, &notes);
  return {files, notes};
}

bool Has(const std::string& text, const std::string& line) { return text.find(line) != std::string::npos; }

TEST_CASE("megatron_bridge.py: the plan's layout and model as Bridge's fields, pre-training on mock data") {
  auto [files, notes] = Export(Tiny(), Launch(2, 2, 2, 2));
  REQUIRE(files.size() == 1);
  CHECK(files[0].first == "megatron_bridge.py");
  const std::string& py = files[0].second;
  for (const char* line :
       {"WORLD_SIZE = 8  #", "VOCAB = 512  #", "FINETUNE = False\n", "LORA = None\n",
        "    tensor_model_parallel_size=2,\n", "    pipeline_model_parallel_size=2,\n", "    num_layers=4,\n",
        "    ffn_hidden_size=256,\n", "    gated_linear_unit=True,\n", "    activation_func=\"silu\",\n",
        "    normalization=\"RMSNorm\",\n", "    position_embedding_type=\"rope\",\n", "    micro_batch_size=2,\n",
        "    global_batch_size=16,\n", "    bf16=True,\n", "    params_dtype=torch.bfloat16,\n"})
    CHECK_MESSAGE(Has(py, line), std::string(line));
  CHECK_FALSE(Has(py, "PLAN_"));  // every placeholder filled
  CHECK_FALSE(Has(py, "    fp8="));
}

TEST_CASE("megatron_bridge.py: what Megatron-LM decides without a flag is written (Bridge defaults otherwise)") {
  auto [files, notes] = Export(Tiny(), Launch(2, 1, 2, 2));  // dp 1: no gradient reduce to overlap
  const std::string& py = files[0].second;
  for (const char* line :
       {"    add_qkv_bias=True,\n", "    bias_activation_fusion=True,\n", "    bias_dropout_fusion=True,\n",
        "    apply_rope_fusion=True,\n", "    cross_entropy_loss_fusion=False,\n", "    overlap_p2p_comm=False,\n",
        "    batch_p2p_comm=True,\n", "    overlap_grad_reduce=False,\n", "    align_param_gather=False,\n"})
    CHECK_MESSAGE(Has(py, line), std::string(line));
  // Interleaved: the p2p overlap on, unbatched (Megatron-LM refuses pp 2 without it), parameter gathers aligned.
  LaunchPlan v = Launch(2, 1, 1, 1);
  v.interleave = 2;
  v.stages.clear();
  for (int64_t q = 0; q < 4; ++q) {
    LaunchStage st;
    st.first_layer = q * 2;
    st.last_layer = q * 2 + 1;
    st.replicas = 1;
    st.chunk = q / 2;
    v.stages.push_back(st);
  }
  auto [vf, vn] = Export(Tiny(), v);
  REQUIRE(vf.size() == 1);
  REQUIRE(vf[0].first == "megatron_bridge.py");
  for (const char* line : {"    overlap_p2p_comm=True,\n", "    batch_p2p_comm=False,\n",
                           "    align_param_gather=True,\n", "    virtual_pipeline_model_parallel_size=2,\n"})
    CHECK_MESSAGE(Has(vf[0].second, line), std::string(line));
}

TEST_CASE("megatron_bridge.py: multi-head latent attention by MLAModelProvider's fields, Megatron-LM's defaults") {
  GptConfig g = Tiny().gpt;
  g.mla.kv_lora_rank = 32;
  g.mla.qk_rope_head_dim = 16;
  g.mla.qk_nope_head_dim = 32;
  g.mla.v_head_dim = 32;
  ModelSpec m;
  REQUIRE_OK(BuildGptModel(g, DType::kBf16, &m));
  auto [files, notes] = Export(m, Launch(2, 1, 2, 1));
  REQUIRE(files.size() == 1);
  REQUIRE(files[0].first == "megatron_bridge.py");
  const std::string& py = files[0].second;
  // Without q_lora_rank Megatron-LM projects the query directly (None), where the MLA config's default is 512; its
  // rotary scaling 40 where Megatron-LM's is 1.0.
  for (const char* line :
       {"    multi_latent_attention=True,\n", "    kv_lora_rank=32,\n", "    qk_head_dim=32,\n",
        "    qk_pos_emb_head_dim=16,\n", "    v_head_dim=32,\n", "    qk_layernorm=True,\n", "    q_lora_rank=None,\n",
        "    rotary_scaling_factor=1.0,\n", "    rope_type=\"yarn\",\n", "    mscale=1.0,\n",
        "    mscale_all_dim=0.0,\n", "    normalization=\"RMSNorm\",\n", "    deallocate_pipeline_outputs=True,\n",
        "    masked_softmax_fusion=True,\n", "    attention_softmax_in_fp32=False,\n"})
    CHECK_MESSAGE(Has(py, line), std::string(line));
  g.mla.q_lora_rank = 48;
  REQUIRE_OK(BuildGptModel(g, DType::kBf16, &m));
  const std::string with_q = Export(m, Launch(2, 1, 2, 1)).first[0].second;
  CHECK(Has(with_q, "    q_lora_rank=48,\n"));
  CHECK_FALSE(Has(with_q, "    q_lora_rank=None,\n"));
  // A model without MLA gets none of them.
  CHECK_FALSE(Has(Export(Tiny(), Launch(2, 1, 2, 1)).first[0].second, "rotary_scaling_factor"));
}

TEST_CASE("megatron_bridge.py: a vocabulary tp does not divide is refused (the export keeps it exactly)") {
  auto [files, notes] = Export(Tiny(), Launch(2, 1, 3, 1));
  REQUIRE(files.size() == 1);
  CHECK(files[0].first == "megatron_bridge.py.refused");
  CHECK(Has(files[0].second, "vocabulary 512 not divisible by tp 3"));
}

TEST_CASE("megatron_bridge.py: LoRA at the model's rank and targets, fine-tuning") {
  auto [files, notes] = Export(Tiny(DType::kBf16, 8), Launch(2, 1, 1, 1));
  REQUIRE(files.size() == 1);
  CHECK(Has(files[0].second, "LORA = dict(target_modules=[\"linear_qkv\", \"linear_fc2\"], dim=8)\n"));
  CHECK(Has(files[0].second, "FINETUNE = True\n"));
  CHECK(Has(files[0].second, "PACKED = False  #"));
}

TEST_CASE("megatron_bridge.py: packed samples fine-tune at micro-batch 1, refused above it") {
  auto [files, notes] = Export(Tiny(DType::kBf16, 0, 16), Launch(2, 1, 1, 1));
  REQUIRE(files.size() == 1);
  CHECK(Has(files[0].second, "PACKED = True  #"));
  CHECK(Has(files[0].second, "FINETUNE = True\n"));
  auto [refused, why] = Export(Tiny(DType::kBf16, 0, 16), Launch(2, 1, 1, 2));
  REQUIRE(refused.size() == 1);
  CHECK(refused[0].first == "megatron_bridge.py.refused");
  CHECK(Has(refused[0].second,
            "packed sequences with micro-batch 2: Megatron-Bridge trains offline-packed data at "
            "micro-batch 1 only"));
  REQUIRE(why.size() == 1);
  CHECK(why[0].rfind("megatron_bridge.py: not written: packed sequences", 0) == 0);
}

TEST_CASE("megatron_bridge.py: precision as MixedPrecisionConfig (fp16 reduces in fp16, FP8 and MXFP8 hybrid)") {
  auto [fp16, n16] = Export(Tiny(DType::kFp16), Launch(2, 1, 1, 1));
  CHECK(Has(fp16[0].second,
            "    fp16=True,\n    params_dtype=torch.float16,\n    pipeline_dtype=torch.float16,\n"
            "    grad_reduce_in_fp32=False,\n"));
  auto [fp8, n8] = Export(Tiny(DType::kFp8), Launch(2, 1, 1, 1));
  CHECK(Has(fp8[0].second, "    fp8=\"hybrid\",\n    fp8_recipe=\"delayed\",\n"));
  Plan mx;
  mx.fp8_recipe = "mxfp8";
  auto [mxfp8, nmx] = Export(Tiny(DType::kFp8), Launch(2, 1, 1, 1), mx);
  CHECK(Has(mxfp8[0].second, "    fp8=\"hybrid\",\n    fp8_recipe=\"mxfp8\",\n"));  // megatron.args's format
}

TEST_CASE("megatron_bridge.py: what megatron.args refuses is refused; its notes carry the Bridge file's name") {
  Plan pipedream;
  auto [files, notes] = Export(Tiny(), Launch(2, 1, 1, 1, Schedule::kPipeDream), pipedream);
  REQUIRE(files.size() == 1);
  CHECK(files[0].first == "megatron_bridge.py.refused");
  CHECK(Has(files[0].second, "PipeDream's asynchronous schedule"));
  auto [gpipe, gnotes] = Export(Tiny(), Launch(2, 1, 1, 1, Schedule::kGpipe));
  REQUIRE(gpipe.size() == 1);
  CHECK(gpipe[0].first == "megatron_bridge.py");
  REQUIRE(gnotes.size() == 1);
  CHECK(gnotes[0].rfind("megatron_bridge.py: Megatron-LM has no GPipe schedule", 0) == 0);
}

}  // namespace
}  // namespace planner
