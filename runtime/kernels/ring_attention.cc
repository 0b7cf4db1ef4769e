#include "runtime/kernels/ring_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace planner {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Chunk of the sequence that local chunk `c` (0 or 1) of CP rank `rank` is.
int64_t GlobalChunk(int64_t cp, int64_t rank, int64_t c) { return c == 0 ? rank : 2 * cp - 1 - rank; }

Status CheckDims(const RingAttentionDims& d, RingExchange* ring) {
  if (d.cp < 1 || d.cp_rank < 0 || d.cp_rank >= d.cp || d.seq % (2 * d.cp) != 0) {
    return Status::InvalidArgument(
        fmt::format("ring attention: a sequence of {} tokens does not split into 2 x cp = {} chunks (cp rank {})",
                    d.seq, 2 * d.cp, d.cp_rank));
  }
  if (d.heads < 1 || d.kv() < 1 || d.heads % d.kv() != 0) {
    return Status::InvalidArgument(
        fmt::format("ring attention: {} KV groups do not divide {} query heads", d.kv(), d.heads));
  }
  if (d.cp > 1 && ring == nullptr) return Status::InvalidArgument("ring attention: cp > 1 needs the CP group's ring");
  return Status::OK();
}

// The keys a local query row of chunk `qc` sees in key chunk `kc` held from rank `src`: [0, n)
// of the chunk (causal: none above the diagonal chunk, a triangle on it).
int64_t VisibleKeys(const RingAttentionDims& d, int64_t src, int64_t qc, int64_t i_in_chunk, int64_t kc) {
  const int64_t gq = GlobalChunk(d.cp, d.cp_rank, qc), gk = GlobalChunk(d.cp, src, kc), c = d.seq / (2 * d.cp);
  if (!d.causal || gk < gq) return c;
  return gk == gq ? i_in_chunk + 1 : 0;
}

// The block held (k, v rows at stride ldkv from kv) against the local queries: per row its
// log-sum-exp and normalised output, merged into (o, lse) by the online-softmax rule.
void ForwardBlock(const RingAttentionDims& d, int64_t src, const float* q, int64_t ld, const float* kv, int64_t ldkv,
                  float* o, float* lse) {
  const int64_t n = d.tokens(), c = n / 2, hd = d.heads * d.head_dim, e_n = d.head_dim, kvd = d.kv() * e_n,
                grp = d.heads / d.kv();
  const float scale = 1.0f / std::sqrt(static_cast<float>(e_n));
  std::vector<float> s(static_cast<size_t>(n)), acc(static_cast<size_t>(e_n));
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h)
      for (int64_t i = 0; i < n; ++i) {
        const float* qi = q + (b * n + i) * ld + h * e_n;
        float mx = kNegInf;
        int64_t cnt = 0;
        std::vector<int64_t> keys;
        for (int64_t kc = 0; kc < 2; ++kc) {
          const int64_t vis = VisibleKeys(d, src, i / c, i % c, kc);
          for (int64_t j = kc * c; j < kc * c + vis; ++j) {
            const float* kj = kv + (b * n + j) * ldkv + (h / grp) * e_n;
            float dot = 0;
            for (int64_t e = 0; e < e_n; ++e) dot += qi[e] * kj[e];
            s[static_cast<size_t>(cnt++)] = dot * scale;
            keys.push_back(j);
            mx = std::max(mx, dot * scale);
          }
        }
        if (cnt == 0) continue;
        float sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t t = 0; t < cnt; ++t) {
          const float p = std::exp(s[static_cast<size_t>(t)] - mx);
          sum += p;
          const float* vj = kv + (b * n + keys[static_cast<size_t>(t)]) * ldkv + kvd + (h / grp) * e_n;
          for (int64_t e = 0; e < e_n; ++e) acc[static_cast<size_t>(e)] += p * vj[e];
        }
        const float blk = mx + std::log(sum);
        float& l = lse[(b * d.heads + h) * n + i];
        float* oi = o + (b * n + i) * hd + h * e_n;
        const float merged = l == kNegInf ? blk : std::max(l, blk) + std::log1p(std::exp(-std::abs(l - blk)));
        const float wo = l == kNegInf ? 0.0f : std::exp(l - merged), wb = std::exp(blk - merged) / sum;
        for (int64_t e = 0; e < e_n; ++e) oi[e] = oi[e] * wo + acc[static_cast<size_t>(e)] * wb;
        l = merged;
      }
}

// Packs k and v ([b, n] rows of kv() d each, at stride ld) into rows of `width` kv() d from kv.
void Pack(const RingAttentionDims& d, const float* k, const float* v, int64_t ld, int64_t width, float* kv) {
  const int64_t n = d.tokens(), kvd = d.kv() * d.head_dim;
  std::fill(kv, kv + d.batch * n * width * kvd, 0.0f);
  for (int64_t r = 0; r < d.batch * n; ++r) {
    std::copy(k + r * ld, k + r * ld + kvd, kv + r * width * kvd);
    std::copy(v + r * ld, v + r * ld + kvd, kv + r * width * kvd + kvd);
  }
}

}  // namespace

std::vector<int64_t> CpTokenPositions(int64_t seq, int64_t cp, int64_t rank) {
  const int64_t c = seq / (2 * cp);
  std::vector<int64_t> pos;
  for (int64_t lc = 0; lc < 2; ++lc)
    for (int64_t i = 0; i < c; ++i) pos.push_back(GlobalChunk(cp, rank, lc) * c + i);
  return pos;
}

Status RingAttentionForward(const RingAttentionDims& d, RingExchange* ring, const float* q, const float* k,
                            const float* v, int64_t ld, float* o, float* lse) {
  PLANNER_RETURN_IF_ERROR(CheckDims(d, ring));
  const int64_t n = d.tokens(), hd = d.heads * d.head_dim, kvd = d.kv() * d.head_dim, count = d.batch * n * 2 * kvd;
  std::vector<float> cur(static_cast<size_t>(count)), next(static_cast<size_t>(count));
  Pack(d, k, v, ld, 2, cur.data());
  std::fill(o, o + d.batch * n * hd, 0.0f);
  std::fill(lse, lse + d.batch * d.heads * n, kNegInf);
  for (int64_t step = 0; step < d.cp; ++step) {
    const int64_t src = (d.cp_rank - step + d.cp) % d.cp;
    ForwardBlock(d, src, q, ld, cur.data(), 2 * kvd, o, lse);
    if (step + 1 < d.cp) {
      PLANNER_RETURN_IF_ERROR(ring->Shift(cur.data(), next.data(), count));
      cur.swap(next);
    }
  }
  return Status::OK();
}

namespace {

// One held block's gradients: dq accumulated locally, dk and dv into the travelling rows (k, v,
// dk, dv of kv() d each per token at stride 4 kv() d; query head h reads group h / (heads / kv()),
// so a group's dk and dv sum over its heads). dsum: rowsum(dO o O) per (b, head, query).
void BackwardBlock(const RingAttentionDims& d, int64_t src, const float* q, int64_t ld, const float* lse,
                   const float* dout, const float* dsum, float* kvg, float* dq) {
  const int64_t n = d.tokens(), c = n / 2, hd = d.heads * d.head_dim, e_n = d.head_dim, kvd = d.kv() * e_n, w = 4 * kvd,
                grp = d.heads / d.kv();
  const float scale = 1.0f / std::sqrt(static_cast<float>(e_n));
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h)
      for (int64_t i = 0; i < n; ++i) {
        const float* qi = q + (b * n + i) * ld + h * e_n;
        const float* doi = dout + (b * n + i) * hd + h * e_n;
        float* dqi = dq + (b * n + i) * ld + h * e_n;
        const float l = lse[(b * d.heads + h) * n + i], di = dsum[(b * d.heads + h) * n + i];
        for (int64_t kc = 0; kc < 2; ++kc) {
          const int64_t vis = VisibleKeys(d, src, i / c, i % c, kc);
          for (int64_t j = kc * c; j < kc * c + vis; ++j) {
            float* row = kvg + (b * n + j) * w;
            const int64_t gk = (h / grp) * e_n;
            const float *kj = row + gk, *vj = row + kvd + gk;
            float *dkj = row + 2 * kvd + gk, *dvj = row + 3 * kvd + gk;
            float dot = 0, dp = 0;
            for (int64_t e = 0; e < e_n; ++e) {
              dot += qi[e] * kj[e];
              dp += doi[e] * vj[e];
            }
            const float p = std::exp(dot * scale - l), ds = p * (dp - di) * scale;
            for (int64_t e = 0; e < e_n; ++e) {
              dvj[e] += p * doi[e];
              dqi[e] += ds * kj[e];
              dkj[e] += ds * qi[e];
            }
          }
        }
      }
}

}  // namespace

Status RingAttentionBackward(const RingAttentionDims& d, RingExchange* ring, const float* q, const float* k,
                             const float* v, int64_t ld, const float* o, const float* lse, const float* dout, float* dq,
                             float* dk, float* dv) {
  PLANNER_RETURN_IF_ERROR(CheckDims(d, ring));
  const int64_t n = d.tokens(), hd = d.heads * d.head_dim, kvd = d.kv() * d.head_dim, count = d.batch * n * 4 * kvd;
  std::vector<float> dsum(static_cast<size_t>(d.batch * d.heads * n), 0.0f);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h)
      for (int64_t i = 0; i < n; ++i) {
        float s = 0;
        for (int64_t e = 0; e < d.head_dim; ++e)
          s += dout[(b * n + i) * hd + h * d.head_dim + e] * o[(b * n + i) * hd + h * d.head_dim + e];
        dsum[static_cast<size_t>((b * d.heads + h) * n + i)] = s;
      }
  std::vector<float> cur(static_cast<size_t>(count)), next(static_cast<size_t>(count));
  Pack(d, k, v, ld, 4, cur.data());
  for (int64_t r = 0; r < d.batch * n; ++r) std::fill(dq + r * ld, dq + r * ld + hd, 0.0f);
  for (int64_t step = 0; step < d.cp; ++step) {
    const int64_t src = (d.cp_rank - step + d.cp) % d.cp;
    BackwardBlock(d, src, q, ld, lse, dout, dsum.data(), cur.data(), dq);
    if (d.cp > 1) {  // after cp shifts the rows (with their dk, dv) are back at their owner
      PLANNER_RETURN_IF_ERROR(ring->Shift(cur.data(), next.data(), count));
      cur.swap(next);
    }
  }
  for (int64_t r = 0; r < d.batch * n; ++r) {
    std::copy(cur.begin() + r * 4 * kvd + 2 * kvd, cur.begin() + r * 4 * kvd + 3 * kvd, dk + r * ld);
    std::copy(cur.begin() + r * 4 * kvd + 3 * kvd, cur.begin() + r * 4 * kvd + 4 * kvd, dv + r * ld);
  }
  return Status::OK();
}

}  // namespace planner
