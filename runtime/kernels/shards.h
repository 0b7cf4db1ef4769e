// Megatron's tensor-parallel cuts, shared by the CPU and CUDA kernels so that
// a shard on either device holds exactly the same slice of the full weight
// one process would hold (drawn from the same seed): column-parallel layers
// (QKV, fc1, the vocabulary projection) keep rows of the full [out, in]
// weight, row-parallel ones (the attention output, fc2) a block of columns.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "runtime/kernels/kernel.h"

namespace planner {

struct WeightSlice {
  int64_t full_in = 0, full_out = 0;  // 0: no cut, the whole weight
  std::vector<int64_t> rows;          // rows kept, in order (empty: all)
  int64_t col0 = 0;                   // first column kept
  bool cut() const { return full_in != 0; }
};

std::vector<int64_t> IndexRange(int64_t from, int64_t n);

// Rank o.tp_rank's cut of each sharded weight (no cut when o.tp_size == 1).
// QKV of grouped-query attention: the full weight is [(heads + 2 kv_heads) d, h] (d = h / heads), rows
// Q (heads d), then K and V (kv_heads d each); rank r keeps its heads / t query heads and its
// kv_heads / t KV groups of each block (Megatron-Core divides the query groups by t), [(heads + 2 kv_heads) d / t, h].
WeightSlice QkvShard(int64_t hidden, int64_t heads, int64_t kv_heads, const KernelOptions& o);
WeightSlice AttnOutShard(int64_t hidden, int64_t heads, const KernelOptions& o);  // [h, h/t]
WeightSlice Fc1Shard(int64_t hidden, int64_t ffn, const KernelOptions& o);        // [ffn/t, h]
// SwiGLU's fc1, full [2 ffn, h] (gate rows, then up rows): rank r keeps its ffn / t gate rows and the
// matching up rows, [2 ffn / t, h] (gate then up), so silu(gate) o up needs no communication.
WeightSlice GatedFc1Shard(int64_t hidden, int64_t ffn, const KernelOptions& o);
WeightSlice Fc2Shard(int64_t hidden, int64_t ffn, const KernelOptions& o);      // [h, ffn/t]
WeightSlice VocabShard(int64_t hidden, int64_t vocab, const KernelOptions& o);  // [V/t, h]

// lm_head on either device: a (vocabulary-parallel) projection kernel whose input gradient is
// summed over the TP group (each rank's logits depend on the whole input).
class VocabParallelHead final : public LayerKernel {
 public:
  VocabParallelHead(std::unique_ptr<LayerKernel> proj, TpGroup* group) : proj_(std::move(proj)), group_(group) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override { return proj_->Forward(x, y, sv); }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override;
  Status BackwardWeight(Saved* sv) override { return proj_->BackwardWeight(sv); }
  std::vector<Param*> Params() override { return proj_->Params(); }
  KernelFlops Flops(int64_t b) const override { return proj_->Flops(b); }

 private:
  std::unique_ptr<LayerKernel> proj_;
  TpGroup* group_;
};

// A linear layer's [out, in] host weight: uniform(+-1/sqrt(fan-in of the full
// weight)) from seed, then cut.
Tensor LinearWeight(int64_t out, int64_t in, uint64_t seed, const WeightSlice& slice);
// Rows [start, start + count) of the full [vocab, hidden] host embedding table.
Tensor EmbeddingRows(int64_t vocab, int64_t hidden, uint64_t seed, int64_t start, int64_t count);

}  // namespace planner
