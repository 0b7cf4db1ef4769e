// Layer: one layer of a model with its inferred shapes and its analytic costs
// per sample (one sequence for transformers, one image for CNNs). Every cost
// scales linearly with the microbatch size. The formulas are derived in
// docs/cost_model.md section 1. Plain value type; thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "spec/dtype.h"
#include "spec/kinds.h"
#include "spec/layer_kind.h"

namespace planner {

// Attributes of a layer as written in the model file, with defaults resolved
// by shape inference (heads, ffn, kernel, stride, padding, vocab, ...).
struct LayerAttrs {
  std::map<std::string, int64_t> ints;
  std::map<std::string, bool> bools;
  std::map<std::string, std::string> strings;  // enumerated choices (act: gelu | swiglu | relu2, ...)
  std::map<std::string, double> reals;         // real-valued attributes (capacity_factor, aux_loss)
  double probability = 0.1;
  int64_t Int(const std::string& key, int64_t fallback) const {
    auto it = ints.find(key);
    return it == ints.end() ? fallback : it->second;
  }
  bool Bool(const std::string& key, bool fallback) const {
    auto it = bools.find(key);
    return it == bools.end() ? fallback : it->second;
  }
  std::string String(const std::string& key, const std::string& fallback) const {
    auto it = strings.find(key);
    return it == strings.end() ? fallback : it->second;
  }
  double Real(const std::string& key, double fallback) const {
    auto it = reals.find(key);
    return it == reals.end() ? fallback : it->second;
  }
};

// What one selective-recompute module (RecomputeModule, Megatron's --recompute-modules) drops
// from a layer's stash and re-runs in backward, per sample (docs/cost_model.md section 5,
// "Recompute modules"). Dropped bytes are parts of stash_bytes; core_attn's are what
// stash_bytes_selective leaves out and selective_recompute_*.
struct RecomputeModuleCost {
  double stash_bytes = 0;          // activations the module no longer keeps
  double stash_tp_replicated = 0;  // the part of them in stash_bytes_tp_replicated
  // Outputs the module saves that its backward never reads (op_sac: w2's output, which feeds the residual add alone),
  // TP-replicated: eager SAC keeps them, a compiled graph's partitioner does not (EngineSpec::sac_saves_unread).
  double unread_bytes = 0;
  double expert_stash_bytes = 0;  // the part of them in expert_stash_bytes
  double gemm_flops = 0;          // GEMM FLOPs re-run in backward (the GEMM rate)
  double expert_gemm_flops = 0;   // the part of them on the routed experts (scaled by the imbalance)
  double core_flops = 0;          // attention-core FLOPs re-run (the attention-core rate)
  double mem_bytes = 0;           // memory-bound HBM traffic re-run
  int tp_collectives = 0;         // forward TP all-reduces re-run (the recomputed region's output)
  bool alltoall = false;          // the dispatch and combine all-to-alls re-run (moe)
};

// How tensor parallelism splits one GEMM's weight (Megatron-Core's parallel linears).
enum class GemmSplit : uint8_t {
  kNone,        // a layer outside tensor parallelism
  kColumn,      // ColumnParallelLinear: n / t (QKV, fc1, the lm_head)
  kRow,         // RowParallelLinear: k / t (the attention output projection, fc2)
  kReplicated,  // whole on every TP rank (the MoE router, MLA's down projections)
};

// What a GEMM is in its layer: the linears LoRA adapts (Megatron-Core's linear_qkv, linear_proj, linear_fc1,
// linear_fc2; MLA's up projections count as qkv), or anything else.
enum class GemmRole : uint8_t { kOther, kQkv, kProj, kFc1, kFc2 };

// One GEMM of a layer, per sample: [rows x k] x [k x n] in forward; dX is [rows x n] x [n x k] and dW
// [k x rows] x [rows x n], the same FLOPs (docs/cost_model.md section 2, "Kernel-level compute").
struct GemmShape {
  double rows = 0;  // tokens per sample (the routed experts: every token copy, over all `count` experts)
  double n = 0, k = 0;
  GemmSplit split = GemmSplit::kNone;
  bool expert = false;          // a routed expert's: `count` experts split over EP, n or k over ETP
  double count = 1;             // experts sharing `rows` (1 for a dense GEMM)
  bool high_precision = false;  // runs in bf16 in an FP8 model (the router, the lm_head: outside fp8_autocast)
  GemmRole role = GemmRole::kOther;
  bool frozen = false;  // its weight takes no gradient (LoRA's base weights): no weight-gradient GEMM
  double Flops() const { return 2 * rows * n * k; }
};

struct Layer {
  std::string name;                     // unique within the model, e.g. "block7"
  LayerKind kind = LayerKind::kLinear;  // e.g. kTransformerBlock; LayerKindName(kind) is its name in files and messages
  std::vector<int64_t> in_shape;        // per sample
  std::vector<int64_t> out_shape;       // per sample
  std::string signature;                // kind name + shapes + attributes: equal signatures cost the same
  int source_line = 0;                  // 1-based line in the model file (0: from a template)
  LayerAttrs attrs;                     // resolved attributes (the kernels are built from them)

  // Per-sample analytic costs.
  double params = 0;                         // parameters owned by this layer (held on its GPUs)
  double frozen_params = 0;                  // of them, the ones without gradients or optimizer state (LoRA's base)
  bool params_tied = false;                  // shares its weights with another layer (tied lm_head): not in totals
  double fwd_flops = 0;                      // matrix (tensor-core) FLOPs of the forward pass
  double bwd_input_flops = 0;                // backward, gradient w.r.t. the input ("B")
  double bwd_weight_flops = 0;               // backward, gradient w.r.t. the weights ("W")
  double fwd_mem_bytes = 0;                  // HBM traffic of memory-bound (elementwise) work, forward
  double bwd_mem_bytes = 0;                  // same, backward
  double out_bytes = 0;                      // output activation
  double stash_bytes = 0;                    // activations kept for backward, no recompute
  double stash_bytes_selective = 0;          // kept with selective recompute (attention core dropped)
  double stash_bytes_full = 0;               // kept with full recompute (the layer input only)
  double selective_recompute_flops = 0;      // FLOPs re-run in backward by selective recompute
  double selective_recompute_mem_bytes = 0;  // HBM traffic re-run in backward by selective recompute
  std::array<RecomputeModuleCost, kRecomputeModuleCount> recompute_modules{};  // index: RecomputeModule
  double model_flops = 0;  // per sample, forward + backward, as the MFU counts them (no recompute of any kind)
  double attention_core_fwd_flops =
      0;  // the s^2 part of forward (Q K^T and scores x V): what context parallelism splits and overlaps
  double cp_kv_bytes =
      0;  // K and V of the whole sequence (2 s kv_heads d, dtype bytes): what ring attention passes round the CP group

  // Tensor parallelism (Megatron-style sharding of this layer across t GPUs).
  bool tp_shardable = false;      // FLOPs, params and the sharded stash divide by t
  int64_t tp_divisor = 0;         // t must divide this (heads, vocab); 0: any t
  int tp_allreduces_fwd = 0;      // all-reduces of tp_allreduce_bytes in forward (same in backward)
  double tp_allreduce_bytes = 0;  // bytes of one such all-reduce
  // LoRA's adapters' own TP collectives, bytes per sample of the tensor each gathers (Megatron-Bridge
  // ParallelLinearAdapter, outside Transformer Engine's overlapped regions): with sequence parallelism, forward
  // all-gathers and backward reduce-scatters / all-gathers; without it, forward all-gathers and backward all-reduces.
  double adapter_sp_fwd_bytes = 0, adapter_sp_bwd_bytes = 0, adapter_fwd_bytes = 0, adapter_bwd_allreduce_bytes = 0;
  // Activations kept whole on every TP rank even under sequence parallelism (LoRA's gathered adapter inputs): 0
  // without SP, where they are the base's own kept input.
  double stash_bytes_sp_whole = 0;
  double stash_bytes_tp_replicated = 0;  // part of stash_bytes that is not divided by t
  // Parts of params and of the forward FLOPs that every TP rank holds and runs whole (MLA's q and kv
  // down-projections and their norms, the MoE router: replicated in Megatron-Core). Included in params
  // and fwd_flops; backward-input and backward-weight FLOPs each hold the same amount again.
  double tp_replicated_params = 0;
  double tp_replicated_fwd_flops = 0;

  // Mixture of experts (moe_block; docs/cost_model.md, MoE). All zero on other layers. The
  // routed experts' parts below are included in the totals above (params, *_flops, stash_bytes*).
  int64_t experts = 0;       // routed experts E; 0: not an MoE layer
  int64_t top_k = 0;         // routed experts per token
  double expert_params = 0;  // parameters of all E routed experts: split over EP x ETP (the rest of params over TP)
  double expert_fwd_flops =
      0;  // forward FLOPs of the routed experts (balanced, per sample): scaled by the imbalance factor
  double expert_bwd_input_flops = 0, expert_bwd_weight_flops = 0;
  double expert_stash_bytes = 0;  // part of stash_bytes and stash_bytes_selective held by the routed experts
  double moe_dispatch_bytes =
      0;  // one dispatch all-to-all, per sample: s x top_k x h x dtype bytes (combine: the same back)

  // The GEMMs behind fwd_flops (each also once in bwd_input_flops and bwd_weight_flops); GEMM FLOPs
  // not listed (convolutions) are costed at the precision's large-shape rate.
  std::vector<GemmShape> gemms;
  // The attention core's shape (0: no attention): the sequence, the head dim its FLOPs count
  // ((dqk + dv) / 2), its query heads.
  double attention_seq = 0, attention_head_dim = 0, attention_heads = 0;
  // Sliding-window attention: the keys before each query it attends to (Megatron --window-size W,0), when shorter
  // than the sequence; 0: causal over the whole sequence.
  double attention_window = 0;
  // Packed samples (gpt.packed_length; THD, cu_seqlens): the length-weighted mean sample length its attention runs
  // over, when shorter than the sequence; 0: one sample per sequence.
  double attention_packed = 0;

  double bwd_flops() const { return bwd_input_flops + bwd_weight_flops; }
};

}  // namespace planner
