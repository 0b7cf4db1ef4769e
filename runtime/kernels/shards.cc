#include "runtime/kernels/shards.h"

#include <cmath>
#include <cstring>

namespace planner {

std::vector<int64_t> IndexRange(int64_t from, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = from + i;
  return v;
}

WeightSlice QkvShard(int64_t hidden, int64_t heads, int64_t kv_heads, const KernelOptions& o) {
  if (o.tp_size <= 1) return {};
  const int64_t d = hidden / heads, ql = heads / o.tp_size * d, kvl = kv_heads / o.tp_size * d;
  WeightSlice s{hidden, (heads + 2 * kv_heads) * d, {}, 0};
  // Q rows [0, heads d), K rows [heads d, (heads + kv_heads) d), V after them.
  const int64_t starts[3] = {o.tp_rank * ql, heads * d + o.tp_rank * kvl, (heads + kv_heads) * d + o.tp_rank * kvl};
  const int64_t counts[3] = {ql, kvl, kvl};
  for (int blk = 0; blk < 3; ++blk) {
    auto r = IndexRange(starts[blk], counts[blk]);
    s.rows.insert(s.rows.end(), r.begin(), r.end());
  }
  return s;
}

WeightSlice AttnOutShard(int64_t hidden, int64_t heads, const KernelOptions& o) {
  if (o.tp_size <= 1) return {};
  return {hidden, hidden, {}, o.tp_rank * (hidden / heads * (heads / o.tp_size))};
}

WeightSlice Fc1Shard(int64_t hidden, int64_t ffn, const KernelOptions& o) {
  if (o.tp_size <= 1) return {};
  return {hidden, ffn, IndexRange(o.tp_rank * (ffn / o.tp_size), ffn / o.tp_size), 0};
}

WeightSlice GatedFc1Shard(int64_t hidden, int64_t ffn, const KernelOptions& o) {
  if (o.tp_size <= 1) return {};
  const int64_t fl = ffn / o.tp_size;
  WeightSlice s{hidden, 2 * ffn, IndexRange(o.tp_rank * fl, fl), 0};
  auto up = IndexRange(ffn + o.tp_rank * fl, fl);
  s.rows.insert(s.rows.end(), up.begin(), up.end());
  return s;
}

WeightSlice Fc2Shard(int64_t hidden, int64_t ffn, const KernelOptions& o) {
  if (o.tp_size <= 1) return {};
  return {ffn, hidden, {}, o.tp_rank * (ffn / o.tp_size)};
}

WeightSlice VocabShard(int64_t hidden, int64_t vocab, const KernelOptions& o) {
  if (o.tp_size <= 1) return {};
  return {hidden, vocab, IndexRange(o.tp_rank * (vocab / o.tp_size), vocab / o.tp_size), 0};
}

Status VocabParallelHead::BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) {
  PLANNER_RETURN_IF_ERROR(proj_->BackwardInput(dy, dx, sv));
  if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(dx->data(), dx->numel()));
  return Status::OK();
}

Tensor LinearWeight(int64_t out, int64_t in, uint64_t seed, const WeightSlice& slice) {
  Tensor w = Tensor::Zeros({out, in});
  if (!slice.cut()) {
    FillUniform(&w, seed, 1.0f / std::sqrt(static_cast<float>(in)));
    return w;
  }
  Tensor full = Tensor::Zeros({slice.full_out, slice.full_in});
  FillUniform(&full, seed, 1.0f / std::sqrt(static_cast<float>(slice.full_in)));
  for (int64_t i = 0; i < out; ++i) {
    const int64_t src = slice.rows.empty() ? i : slice.rows[static_cast<size_t>(i)];
    std::memcpy(w.data() + i * in, full.data() + src * slice.full_in + slice.col0, static_cast<size_t>(in) * 4);
  }
  return w;
}

Tensor EmbeddingRows(int64_t vocab, int64_t hidden, uint64_t seed, int64_t start, int64_t count) {
  Tensor full = Tensor::Zeros({vocab, hidden});
  FillUniform(&full, seed, 0.02f * std::sqrt(3.0f));
  if (start == 0 && count == vocab) return full;
  Tensor rows = Tensor::Zeros({count, hidden});
  std::memcpy(rows.data(), full.data() + start * hidden, static_cast<size_t>(count * hidden) * 4);
  return rows;
}

}  // namespace planner
