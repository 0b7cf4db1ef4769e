// planner import hf: each fixture (tests/data/hf/, the published config.json
// fields) imported, written, read back as a model file, and its parameter
// count checked against the published one; the field mapping; the errors.
#include <algorithm>
#include <cmath>

#include "spec/hf_import.h"
#include "spec/model_spec.h"
#include "spec/yaml_reader.h"
#include "tests/spec/bundled_models.h"
#include "tests/test_util.h"

namespace planner {
namespace {

std::string Fixture(const std::string& name) { return testing::SourcePath("tests/data/hf/" + name); }

// Imports, writes the model file and reads it back.
ModelSpec RoundTrip(const std::string& fixture, const HfImportOptions& o, HfImport* imp = nullptr) {
  HfImport m;
  REQUIRE_OK(ImportHfConfigFile(Fixture(fixture), o, &m));
  ModelSpec spec;
  REQUIRE_OK(ParseModelSpec(fixture + ".yaml", HfModelYaml(m, Fixture(fixture)), &spec));
  CHECK(spec.name == m.name);
  CHECK(spec.gpt.kv_heads == m.gpt.kv_heads);
  CHECK(spec.gpt.ffn_act == m.gpt.ffn_act);
  CHECK(spec.gpt.norm == m.gpt.norm);
  CHECK(spec.gpt.position == m.gpt.position);
  CHECK(spec.gpt.bias == m.gpt.bias);
  CHECK(spec.gpt.tie_embeddings == m.gpt.tie_embeddings);
  CHECK(spec.dtype == m.dtype);
  CHECK(spec.global_batch == m.global_batch);
  if (imp != nullptr) *imp = m;
  return spec;
}

TEST_CASE("every fixture round-trips to its published parameter count") {
  struct Row {
    const char* fixture;
    int64_t seq;
    double published;  // the model card's / paper's count
    double expected;   // what the template counts (published less what the notes say is left out)
  };
  const Row rows[] = {
      {"gpt2.json", 1024, 124439808.0, 124439808.0},                      // GPT-2 small, tied, learned 1024 positions
      {"pythia-160m.json", 2048, 162322944.0, 162322944.0},               // Pythia paper Table: 162,322,944 total
      {"mistral-7b.json", 8192, 7241732096.0, 7241732096.0},              // Mistral 7B
      {"qwen2-7b.json", 8192, 7615616512.0, 7615616512.0 - 28 * 4608.0},  // q/k/v biases left out
      {"qwen3-8b.json", 8192, 8190735360.0, 8190735360.0 - 36 * 256.0},   // q_norm, k_norm left out
      {"llama3-8b.json", 8192, 8.03e9, 8030261248.0},
      {"llama3-70b.json", 8192, 70.55e9, 70553706496.0},
      {"llama3.1-405b.json", 8192, 405.85e9, 405853388800.0},
      {"nemotron-4-340b.json", 4096, 341e9, 341029195776.0},
      // MoE: every expert counted (moe_spec_test.cc checks the active counts); Qwen3's q_norm and k_norm left out.
      {"mixtral-8x7b.json", 4096, 46.7e9, 46702792704.0},
      {"qwen3-30b-a3b.json", 4096, 30.5e9, 30532110336.0},
      {"qwen3-235b-a22b.json", 4096, 235e9, 235093610496.0},
      {"deepseek-v3.json", 4096, 671e9, 671026404352.0},
      // GPT-OSS 120B (OpenAI's model card: 116.83B): its 36 x 64 attention sinks and 36 x 128 router biases left out.
      {"gpt-oss-120b.json", 4096, 116.83e9, 116829149760.0},
  };
  for (const auto& r : rows) {
    INFO(r.fixture);
    HfImportOptions o;
    o.seq = r.seq;
    o.global_batch = 64;
    o.name = "m";
    ModelSpec m = RoundTrip(r.fixture, o);
    CHECK(m.TotalParams() == r.expected);
    CHECK(std::abs(m.TotalParams() / r.published - 1) < 0.005);
    CHECK(m.gpt.seq == r.seq);
    CHECK(m.global_batch == 64);
  }
}

TEST_CASE("MoE field mapping: Mixtral, Qwen3-MoE, DeepSeek-V3 import as the shipped model files") {
  HfImportOptions o;
  o.seq = 4096;
  o.name = "m";
  struct Row {
    const char* fixture;
    const char* config;
  };
  const Row rows[] = {{"mixtral-8x7b.json", "mixtral-8x7b.yaml"},
                      {"qwen3-30b-a3b.json", "qwen3-30b-a3b.yaml"},
                      {"qwen3-235b-a22b.json", "qwen3-235b-a22b.yaml"},
                      {"deepseek-v3.json", "deepseek-v3.yaml"}};
  for (const auto& r : rows) {
    INFO(r.fixture);
    HfImport imp;
    o.global_batch = 1024;
    ModelSpec m = RoundTrip(r.fixture, o, &imp);
    ModelSpec shipped;
    REQUIRE_OK(LoadModelSpec(testing::SourcePath(std::string("configs/models/") + r.config), &shipped));
    CHECK(m.TotalParams() == shipped.TotalParams());
    CHECK(m.ActiveParams() == shipped.ActiveParams());
    CHECK(m.MtpParams() == shipped.MtpParams());
    CHECK(m.gpt.moe.experts == shipped.gpt.moe.experts);
    CHECK(m.gpt.moe.top_k == shipped.gpt.moe.top_k);
    CHECK(m.gpt.moe.expert_ffn == shipped.gpt.moe.expert_ffn);
    CHECK(m.gpt.moe.dense_layers == shipped.gpt.moe.dense_layers);
    CHECK(m.gpt.moe.router == shipped.gpt.moe.router);
    CHECK(m.gpt.moe.route_groups == shipped.gpt.moe.route_groups);
    CHECK(m.gpt.head_dim == shipped.gpt.head_dim);
    CHECK(m.gpt.mla.kv_lora_rank == shipped.gpt.mla.kv_lora_rank);
    CHECK(m.gpt.rope_theta == shipped.gpt.rope_theta);
    REQUIRE(m.layers.size() == shipped.layers.size());
    for (size_t i = 0; i < m.layers.size(); ++i) CHECK(m.layers[i].fwd_flops == shipped.layers[i].fwd_flops);
  }
  HfImport ds;
  RoundTrip("deepseek-v3.json", o, &ds);
  CHECK(ds.gpt.moe.shared_experts == 1);
  CHECK(ds.gpt.moe.route_group_limit == 4);
  CHECK(ds.gpt.moe.aux_loss == 0.001);  // the config's aux_loss_alpha (the report's sequence-wise alpha is 0.0001)
  CHECK(ds.gpt.mla.q_lora_rank == 1536);
  CHECK(ds.gpt.mla.qk_rope_head_dim == 64);
  CHECK(ds.gpt.mtp == 1);
  HfImport mx;
  RoundTrip("mixtral-8x7b.json", o, &mx);
  CHECK(mx.gpt.moe.expert_ffn == 14336);
  CHECK(mx.gpt.moe.aux_loss == 0.02);
  CHECK(mx.gpt.moe.shared_experts == 0);
  // A leading run of dense layers in Qwen3-MoE becomes dense_layers.
  std::string text;
  REQUIRE_OK(ReadTextFile(Fixture("qwen3-30b-a3b.json"), &text));
  text.replace(text.find("\"mlp_only_layers\": []"), 21, "\"mlp_only_layers\": [0, 1]");
  HfImport q;
  REQUIRE_OK(ImportHfConfig("q.json", text, o, &q));
  CHECK(q.gpt.moe.dense_layers == 2);
  CHECK(q.gpt.head_dim == 128);
}

TEST_CASE("field mapping: Llama 3.1 405B, GPT-2, Pythia, Nemotron, Mistral") {
  HfImportOptions o;
  o.seq = 8192;
  o.global_batch = 2048;
  o.name = "llama";
  HfImport imp;
  ModelSpec llama = RoundTrip("llama3.1-405b.json", o, &imp);
  CHECK(imp.architecture == "LlamaForCausalLM");
  CHECK(imp.max_positions == 131072);
  CHECK(llama.gpt.layers == 126);
  CHECK(llama.gpt.hidden == 16384);
  CHECK(llama.gpt.heads == 128);
  CHECK(llama.gpt.kv_heads == 8);
  CHECK(llama.gpt.ffn == 53248);
  CHECK(llama.gpt.ffn_act == "swiglu");
  CHECK(llama.gpt.norm == "rmsnorm");
  CHECK(llama.gpt.position == "rope");
  CHECK(llama.gpt.rope_theta == 500000);
  CHECK_FALSE(llama.gpt.bias);
  CHECK_FALSE(llama.gpt.tie_embeddings);
  CHECK(llama.gpt.attention == "flash");
  CHECK(llama.dtype == DType::kBf16);
  // The same model as configs/models/llama3.1-405b.yaml, layer by layer.
  ModelSpec shipped;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/llama3.1-405b.yaml"), &shipped));
  REQUIRE(shipped.layers.size() == llama.layers.size());
  for (size_t i = 0; i < llama.layers.size(); ++i) CHECK(shipped.layers[i].signature == llama.layers[i].signature);

  HfImport gpt2;
  ModelSpec g = RoundTrip("gpt2.json", HfImportOptions{}, &gpt2);
  CHECK(g.gpt.seq == 1024);       // min(n_positions 1024, 4096)
  CHECK(g.global_batch == 4096);  // 2^22 tokens / 1024
  CHECK(g.gpt.position == "learned");
  CHECK(g.gpt.ffn_act == "gelu");
  CHECK(g.gpt.tie_embeddings);
  CHECK(g.gpt.bias);
  CHECK(g.name == "imported");
  bool seq_note = false, vocab_note = false;
  for (const auto& n : gpt2.notes) {
    seq_note = seq_note || n.find("seq 1024: no --seq given") != std::string::npos;
    vocab_note = vocab_note || n.find("vocab 50257 is not a multiple of 128") != std::string::npos;
  }
  CHECK(seq_note);
  CHECK(vocab_note);

  HfImport py;
  ModelSpec p = RoundTrip("pythia-160m.json", HfImportOptions{}, &py);
  CHECK(p.gpt.seq == 2048);
  CHECK(p.global_batch == 2048);
  CHECK(p.gpt.position == "rope");
  CHECK(p.dtype == DType::kFp16);
  CHECK_FALSE(p.gpt.tie_embeddings);
  bool partial = false;
  for (const auto& n : py.notes) partial = partial || n.find("RoPE on 25% of the head dim") != std::string::npos;
  CHECK(partial);

  ModelSpec nem = RoundTrip("nemotron-4-340b.json", HfImportOptions{});
  CHECK(nem.gpt.ffn_act == "relu2");
  CHECK(nem.gpt.norm == "layernorm");
  CHECK(nem.gpt.kv_heads == 8);
  CHECK_FALSE(nem.gpt.bias);
  CHECK(nem.gpt.seq == 4096);

  HfImportOptions odd;
  odd.name = "llama: \"8b\" #1";
  CHECK(RoundTrip("llama3-8b.json", odd).name == "llama: \"8b\" #1");  // quoted in the file

  ModelSpec mis = RoundTrip("mistral-7b.json", HfImportOptions{});
  CHECK(mis.gpt.seq == 4096);  // min(32768, 4096)
  CHECK(mis.gpt.rope_theta == 10000);
}

// Edits a fixture's text: replaces `from` with `to` (which must occur).
std::string Edited(const std::string& fixture, const std::string& from, const std::string& to) {
  std::string text;
  REQUIRE_OK(ReadTextFile(Fixture(fixture), &text));
  size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

TEST_CASE(
    "GPT-OSS imports as the shipped model file: head_dim 64 at h 2880, biases, 128 experts, every other layer "
    "windowed") {
  HfImportOptions o;
  o.seq = 4096;
  o.global_batch = 1280;
  o.name = "gpt-oss-120b";
  HfImport imp;
  const ModelSpec m = RoundTrip("gpt-oss-120b.json", o, &imp);
  const ModelSpec shipped = testing::LoadBundledModel("gpt-oss-120b.yaml");
  CHECK(m.TotalParams() == shipped.TotalParams());
  CHECK(m.gpt.head_dim == 64);
  CHECK(m.gpt.bias);
  CHECK(m.gpt.moe.experts == 128);
  CHECK(m.gpt.moe.top_k == 4);
  CHECK(m.gpt.moe.expert_ffn == 2880);
  CHECK(m.gpt.sliding_window == shipped.gpt.sliding_window);
  CHECK(m.gpt.full_attention_every == shipped.gpt.full_attention_every);
  CHECK(m.ModelFlops(1280) == doctest::Approx(shipped.ModelFlops(1280)).epsilon(1e-3));  // the router's aux loss aside
  bool sinks = false;
  for (const auto& n : imp.notes) sinks = sinks || n.find("attention sinks") != std::string::npos;
  CHECK(sinks);
}

TEST_CASE("sliding windows: Mistral's on every layer, layer_types in Megatron's pattern, Qwen's max_window_layers") {
  // Mistral 7B: sliding_window 4096 (the query and 4095 keys before it) on every layer, shorter than seq 8192.
  HfImportOptions o;
  o.seq = 8192;
  HfImport imp;
  ModelSpec mis = RoundTrip("mistral-7b.json", o, &imp);
  CHECK(mis.gpt.sliding_window == 4095);
  CHECK(mis.gpt.full_attention_every == 0);
  for (const Layer& l : mis.layers) {
    if (l.kind == LayerKind::kTransformerBlock) CHECK(l.attention_window == 4095);
  }
  // At the default seq 4096 the window covers the sequence: written (a longer solve --seq costs it), causal here.
  ModelSpec short_seq = RoundTrip("mistral-7b.json", HfImportOptions{});
  CHECK(short_seq.gpt.sliding_window == 4095);
  for (const Layer& l : short_seq.layers) CHECK(l.attention_window == 0);
  GptConfig longer = short_seq.gpt;
  longer.seq = 32768;
  REQUIRE_OK(BuildGptModel(longer, DType::kBf16, &short_seq));
  CHECK(short_seq.layers[1].attention_window == 4095);
  auto import = [&](const std::string& text) {
    HfImport m;
    REQUIRE_OK(ImportHfConfig("c.json", text, o, &m));
    return m;
  };
  auto notes_say = [](const HfImport& m, const std::string& what) {
    return std::any_of(m.notes.begin(), m.notes.end(),
                       [&](const std::string& n) { return n.find(what) != std::string::npos; });
  };
  // Mistral's config with sliding_window 128 and a layer_types list of Mistral's 32 layers, full where full(i).
  auto with_types = [&](auto full) {
    std::string types = "\"layer_types\": [";
    for (int i = 0; i < 32; ++i)
      types += std::string(i ? ", " : "") + (full(i) ? "\"full_attention\"" : "\"sliding_attention\"");
    return import(Edited("mistral-7b.json", "\"sliding_window\": 4096,", types + "],\n  \"sliding_window\": 128,"));
  };
  // layer_types with every other layer full (GPT-OSS's pattern): Megatron's window_attn_skip_freq 2.
  const HfImport alt = with_types([](int i) { return i % 2 == 1; });
  CHECK(alt.gpt.sliding_window == 127);
  CHECK(alt.gpt.full_attention_every == 2);
  // A pattern Megatron cannot write (full first, then sliding): costed as full attention, said in a note.
  const HfImport first_full = with_types([](int i) { return i == 0; });
  CHECK(first_full.gpt.sliding_window == 0);
  CHECK(notes_say(first_full, "costed as full causal attention"));
  // Every layer full: nothing slides, nothing said; a list of another length than the layers: not read.
  const HfImport none_slides = with_types([](int) { return true; });
  CHECK(none_slides.gpt.sliding_window == 0);
  CHECK_FALSE(notes_say(none_slides, "sliding_window"));
  const HfImport short_list = import(Edited("mistral-7b.json", "\"sliding_window\": 4096,",
                                            "\"layer_types\": [\"sliding_attention\", \"full_attention\"],\n  "
                                            "\"sliding_window\": 128,"));
  CHECK(short_list.gpt.sliding_window == 0);
  CHECK(notes_say(short_list, "costed as full causal attention"));
  // Qwen2's max_window_layers: the first layers attend fully, the rest slide: not Megatron's pattern; 0: all slide;
  // at least the layer count: none slides.
  const std::string qwen = "\"sliding_window\": 1024,\n  \"use_sliding_window\": true,\n  \"max_window_layers\": ";
  CHECK(import(Edited("mistral-7b.json", "\"sliding_window\": 4096,", qwen + "16,")).gpt.sliding_window == 0);
  CHECK(import(Edited("mistral-7b.json", "\"sliding_window\": 4096,", qwen + "0,")).gpt.sliding_window == 1023);
  const HfImport none = import(Edited("mistral-7b.json", "\"sliding_window\": 4096,", qwen + "32,"));
  CHECK(none.gpt.sliding_window == 0);
  CHECK_FALSE(notes_say(none, "sliding_window"));
  // use_sliding_window false turns it off.
  CHECK(import(Edited("mistral-7b.json", "\"sliding_window\": 4096,",
                      "\"sliding_window\": 1024,\n  \"use_sliding_window\": false,"))
            .gpt.sliding_window == 0);
}

TEST_CASE("bad configs: one message naming the file, the field and the fix") {
  struct Case {
    std::string text;
    int64_t seq;
    const char* expect;
  };
  const Case cases[] = {
      {Edited("llama3-8b.json", "LlamaForCausalLM", "PhiForCausalLM"), 0,
       "c.json:2: field 'architectures': 'PhiForCausalLM' is not supported; planner import hf reads LlamaForCausalLM, "
       "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, GPT2LMHeadModel, GPTNeoXForCausalLM, "
       "NemotronForCausalLM, "
       "MixtralForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM, GptOssForCausalLM"},
      {Edited("qwen3-30b-a3b.json", "\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2"), 0,
       "c.json:6: field 'decoder_sparse_step': 2: every 2th block is MoE, the others dense; the planner's template has "
       "dense "
       "blocks only before the first MoE block (moe.dense_layers): not imported"},
      {Edited("qwen3-30b-a3b.json", "\"mlp_only_layers\": []", "\"mlp_only_layers\": [0, 5]"), 0,
       "c.json:15: field 'mlp_only_layers': dense layer 5 is not part of a leading run 0, 1, ...; the planner's "
       "template has"},
      {Edited("qwen3-30b-a3b.json", "\"num_experts_per_tok\": 8", "\"num_experts_per_tok\": 200"), 0,
       "c.json:21: field 'num_experts_per_tok': 200 is more than the 128 experts (num_experts); not a valid config"},
      {Edited("deepseek-v3.json", "\"moe_layer_freq\": 1", "\"moe_layer_freq\": 2"), 0,
       "field 'moe_layer_freq': 2: MoE every 2th block; the planner's template has dense blocks only before the first "
       "MoE block"},
      {Edited("deepseek-v3.json", "\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"sparsemixer\""), 0,
       "field 'scoring_func': 'sparsemixer' is not softmax or sigmoid"},
      {Edited("deepseek-v3.json", "\"kv_lora_rank\": 512,", ""), 0,
       "c.json:1: field 'kv_lora_rank': missing; every DeepseekV3ForCausalLM config.json has it"},
      {Edited("deepseek-v3.json", "\"n_group\": 8", "\"n_group\": 7"), 0,
       "field 'n_group': n_group 7 with topk_group 4 does not split the 256 experts into groups"},
      {Edited("llama3-8b.json", "\"intermediate_size\": 14336,", ""), 0,
       "c.json:1: field 'intermediate_size': missing; every LlamaForCausalLM config.json has it"},
      {Edited("llama3-8b.json", "\"architectures\": [\"LlamaForCausalLM\"],", ""), 0,
       "c.json:1: field 'architectures': missing"},
      {Edited("llama3-8b.json", "\"num_key_value_heads\": 8", "\"num_key_value_heads\": 5"), 0,
       "c.json:15: field 'num_key_value_heads': 5 does not divide num_attention_heads 32"},
      {Edited("qwen3-8b.json", "\"head_dim\": 128", "\"head_dim\": 256"), 0,
       "c.json:7: field 'head_dim': 256 differs from hidden_size / num_attention_heads = 128"},
      {Edited("llama3-8b.json", "\"silu\"", "\"gelu\""), 0,
       "field 'hidden_act': 'gelu' is not supported for LlamaForCausalLM"},
      {Edited("llama3-8b.json", "\"bfloat16\"", "\"int8\""), 0,
       "field 'torch_dtype': 'int8' is not one of bfloat16, float16, float32"},
      {Edited("llama3-8b.json", "\"hidden_size\": 4096", "\"hidden_size\": \"big\""), 0,
       "c.json:8: field 'hidden_size': must be an integer"},
      {Edited("llama3-8b.json", "", ""), 16384,
       "--seq 16384: above max_position_embeddings 8192 of c.json:11; the model has no positions past it: use --seq "
       "8192 or less"},
      {"{\"architectures\": [\"LlamaForCausalLM\"", 0, "c.json"},
      {"[1, 2]", 0, "c.json:1: field '(top level)': must be a mapping"},
  };
  for (const auto& c : cases) {
    HfImportOptions o;
    o.seq = c.seq;
    HfImport m;
    Status s = ImportHfConfig("c.json", c.text, o, &m);
    INFO(c.expect);
    INFO(s.message());
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find(c.expect) != std::string::npos);
    CHECK(s.message().find('\n') == std::string::npos);
  }
  HfImport m;
  Status missing = ImportHfConfigFile("/nonexistent/config.json", HfImportOptions{}, &m);
  CHECK(missing.code() == StatusCode::kNotFound);
}

}  // namespace
}  // namespace planner

namespace planner {
namespace {

// Every truncation and some byte flips of a fixture import or fail with InvalidArgument; never a crash.
TEST_CASE("truncated and corrupted config.json files never crash the importer") {
  std::string text;
  REQUIRE_OK(ReadTextFile(Fixture("llama3.1-405b.json"), &text));
  HfImport m;
  REQUIRE_OK(ImportHfConfig("c.json", text, HfImportOptions{}, &m));
  for (size_t n = 0; n < text.size(); n += 3) {
    Status s = ImportHfConfig("c.json", text.substr(0, n), HfImportOptions{}, &m);
    CHECK(s.code() == StatusCode::kInvalidArgument);  // every prefix misses its closing brace
  }
  const char flips[] = {'-', '0', ':', '[', '}', '"', ' ', '9'};
  for (size_t i = 0; i < text.size(); i += 5) {
    for (char f : flips) {
      std::string t = text;
      t[i] = f;
      Status s = ImportHfConfig("c.json", t, HfImportOptions{}, &m);
      CHECK((s.ok() || s.code() == StatusCode::kInvalidArgument));
    }
  }
}

}  // namespace
}  // namespace planner
