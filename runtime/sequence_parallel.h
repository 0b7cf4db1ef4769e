// Sequence parallelism (Megatron-Core, with TP) and context parallelism (ring
// attention, causal, load-balanced) on CPU ranks, as kernels that wrap the
// ones of runtime/kernels (same parameters, names and seeds, so a run equals
// one process):
//  - SP: outside the TP regions (norms, residuals, dropout) activations are
//    split along the sequence over the TP group; entering a column-parallel
//    region (QKV, fc1, the vocabulary projection) they are all-gathered along
//    the sequence, leaving a row-parallel one (attention output, fc2, the
//    vocabulary-parallel embedding) reduce-scattered in place of the
//    all-reduce; backward mirrors it (all-gather <-> reduce-scatter). Norm
//    weight gradients, partial over the rank's tokens, are all-reduced over
//    the TP group (per microbatch, at the norm's backward-weight).
//  - CP: CP rank i holds chunks i and 2 cp - 1 - i of the 2 cp chunks of the
//    sequence (runtime/kernels/ring_attention.h); every per-token layer runs
//    on those tokens unchanged, attention passes K and V round the CP ring,
//    the embedding adds the positions of the global sequence, and the loss
//    is the mean over the CP group's tokens (each rank's mean / cp, summed
//    over the group). Weight gradients are summed over dp x cp (launch.yaml's
//    data_parallel group).
// Blocks are GPT's or Llama-class (RMSNorm, GQA, RoPE at the tokens' global
// positions, SwiGLU / relu2, no biases), with the attributes of ATTRS.md.
// docs/runtime.md ("Sequence and context parallelism").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/kernels/kernel.h"
#include "spec/layer.h"

namespace planner {

struct SeqParallel {
  int64_t tp = 1, tp_rank = 0;
  bool sp = false;                  // sequence parallelism over the TP group
  Communicator* tp_comm = nullptr;  // SP's all-gathers, reduce-scatters and norm-gradient all-reduces
  int64_t cp = 1, cp_rank = 0;
  Communicator* cp_comm = nullptr;  // the CP ring and the loss's sum
  // Each collective's kind (TransferLog::Kind), bytes and seconds, for the run report; may be empty.
  std::function<void(int kind, int64_t bytes, double seconds)> log;
  bool active() const { return sp || cp > 1; }
};

// The kernel of `layer` on this rank's share of the sequence (sp.active(); CPU). Layer types:
// embedding, transformer_block, layernorm, rmsnorm, dropout, lm_head, loss; others are NotSupported.
Status MakeSeqParallelKernel(const Layer& layer, const KernelOptions& options, const SeqParallel& sp,
                             std::unique_ptr<LayerKernel>* out);

// Before any communication: the launch's cp and SP fit the model (GPT token sequences that split
// into 2 cp chunks, and into cp x t with SP) and the device (CPU); the error names launch.yaml.
Status CheckSeqParallelLaunch(const std::string& launch_path, Device device, int64_t tp, int64_t cp, bool sp,
                              const Layer& first_layer);

// What the first per-sample dimension (tokens) of `layer`'s input (or output) is divided by on
// this rank: cp for token ids, logits and the loss's input; cp x t (SP) for hidden states.
int64_t SeqDivisor(const Layer& layer, bool input, const SeqParallel& sp);

// The CP rank's tokens of `samples` rows of `seq` values each (its chunks, in order).
std::vector<float> CpSliceTokens(const std::vector<float>& rows, int64_t seq, int64_t cp, int64_t cp_rank);

}  // namespace planner
