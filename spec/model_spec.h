// ModelSpec: a model as the planner sees it: a chain of layers with inferred
// shapes and analytic per-sample costs, read from model.yaml (format in
// docs/formats.md). Either a `gpt:` template (Megatron-LM GPT) or an explicit
// `layers:` list with `repeat:` blocks. Plain value type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "spec/layer.h"

namespace planner {

// The gpt template's `moe:` block (docs/formats.md): experts = 0 means a dense model.
struct MoeConfig {
  int64_t experts = 0, top_k = 0, expert_ffn = 0;
  int64_t shared_experts = 0, shared_ffn = 0;       // shared_ffn 0: shared_experts x expert_ffn
  int64_t dense_layers = 0;                         // the first N blocks are dense transformer_blocks with `ffn`
  std::string router = "softmax";                   // softmax | sigmoid
  double aux_loss = 0, capacity_factor = 0;         // 0: no auxiliary loss; 0: dropless
  int64_t route_groups = 0, route_group_limit = 0;  // node-limited routing: M of G groups per token; 0: none
};

// The gpt template's `mla:` block: kv_lora_rank > 0 means multi-head latent attention in every block.
struct MlaConfig {
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_rope_head_dim = 0, qk_nope_head_dim = 0, v_head_dim = 0;
};

// The `gpt:` template (docs/formats.md). Defaults are Megatron-LM GPT's (GPT-3);
// a Llama-class model sets kv_heads, ffn_act swiglu, norm rmsnorm, position
// rope, bias false and tie_embeddings false.
// The gpt template's `lora:` block: LoRA fine-tuning (rank 0: none, every weight trained). targets: a mask of
// LoraTargetBit(GemmRole) (spec/layer_catalog.h); the file names them qkv, proj, fc1, fc2.
struct LoraConfig {
  int64_t rank = 0;
  uint32_t targets = 0;
  int line = 0;  // 1-based line of `lora:` in the model file (0: built in code), for messages about it
};

struct GptConfig {
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0, ffn = 0;  // ffn 0: 4 hidden
  int64_t kv_heads = 0;              // 0: heads (multi-head attention); 1: MQA; else GQA
  std::string ffn_act = "gelu";      // gelu | swiglu | relu2
  std::string norm = "layernorm";    // layernorm | rmsnorm
  std::string position = "learned";  // learned (a position table) | rope
  int64_t rope_theta = 10000;        // RoPE base
  bool bias = true;                  // biases on QKV, projection, fc1, fc2
  bool tie_embeddings = true;
  double dropout = 0.1;             // hidden and attention dropout probability (Megatron GPT: 0.1; Llama-class: 0)
  std::string attention = "flash";  // flash | unfused (a cost-model choice)
  int64_t head_dim = 0;             // 0: hidden / heads (Qwen3: 128 whatever hidden / heads is)
  // Sliding-window attention (Mistral, Gemma 2, GPT-OSS): each query attends to the `sliding_window` keys before it
  // (0: the whole causal sequence); every `full_attention_every`-th block (1-based: N, 2N, ...) attends to the whole
  // sequence instead (0: none; GPT-OSS: 2), as Megatron's --window-size W,0 --window-attn-skip-freq N.
  int64_t sliding_window = 0;
  int64_t full_attention_every = 0;
  // Samples packed into each sequence (SFT / LoRA on packed datasets: NeMo's and Megatron-Bridge's packed_sequence,
  // THD with cu_seqlens): the length-weighted mean sample length, sum s_i^2 / sum s_i tokens; attention runs within
  // each sample (0: one sample per sequence).
  int64_t packed_length = 0;
  // Whether block i (0-based) attends through the window.
  bool Windowed(int64_t i) const {
    return sliding_window > 0 && (full_attention_every <= 0 || (i + 1) % full_attention_every != 0);
  }
  MoeConfig moe;
  MlaConfig mla;
  int64_t mtp = 0;  // multi-token-prediction modules (DeepSeek-V3: 1)
  LoraConfig lora;  // LoRA fine-tuning: every weight frozen, adapters trained (ApplyLora)
};

struct ModelSpec {
  std::string name;
  std::string path;    // file it was read from ("" when built in code)
  std::string digest;  // DigestHex of the file contents
  DType dtype = DType::kFp16;
  int64_t global_batch = 0;          // samples (sequences / images) per iteration
  std::vector<int64_t> input_shape;  // per sample
  bool is_gpt = false;
  GptConfig gpt;  // valid when is_gpt
  std::vector<Layer> layers;

  // Sum of params over layers, counting tied weights once; MoE: every expert; mtp layers excluded.
  double TotalParams() const;
  // The parameters one token uses: TotalParams with each MoE layer's routed experts counted top_k of E.
  double ActiveParams() const;
  // TotalParams less the frozen ones (LoRA's base weights): those with gradients and optimizer state.
  double TrainableParams() const;
  // Parameters of the multi-token-prediction modules (mtp layers; the shared embedding and head excluded).
  double MtpParams() const;
  // FLOPs of one training iteration of `batch` samples: forward + backward,
  // plus one more forward of every recomputed layer when `full_recompute`
  // (the Megatron eq. (3) convention: the lm_head is not recomputed).
  double IterationFlops(double batch, bool full_recompute) const;
  // Model FLOPs of one iteration (the MFU numerator): each layer's model_flops
  // (forward + backward, no recompute), or fwd + bwd where a layer sets none.
  double ModelFlops(double batch) const;
  // The first layer attending through a sliding window that leaves keys out (Layer::attention_window); nullptr:
  // none.
  const Layer* FirstWindowedLayer() const;
};

// Reads and validates a model file. InvalidArgument / NotFound with
// "file:line: field '...': ..." messages on any problem.
Status LoadModelSpec(const std::string& path, ModelSpec* out);
// Same, from text (tests, fuzzing); `path` names it in messages.
Status ParseModelSpec(const std::string& path, const std::string& text, ModelSpec* out);
// Builds the layer list of a GPT (embedding, blocks, final layernorm, lm_head, loss).
Status BuildGptModel(const GptConfig& gpt, DType dtype, ModelSpec* out);

// Megatron-LM SC'21 eq. (2): P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)).
double MegatronParamCount(const GptConfig& gpt);
// Megatron-LM SC'21 eq. (3): F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) (full recompute).
double MegatronFlopsPerIteration(const GptConfig& gpt, double batch);
// Korthikanti eq. (7): model FLOPs without recompute, 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
double ModelFlopsPerIteration(const GptConfig& gpt, double batch);
// The same with the causal half of the attention core (Megatron-LM's num_floating_point_operations
// since 2025, the MFU numerator the planner reports): 72 B s l h^2 (1 + s/(12h) + V/(12 l h)).
double CausalModelFlopsPerIteration(const GptConfig& gpt, double batch);

}  // namespace planner
