// Context parallelism's attention core (ring attention, causal, load-balanced
// as Megatron-Core / Transformer Engine run it): the sequence is cut into 2 cp
// chunks and CP rank i holds chunks i and 2 cp - 1 - i, so every rank has the
// same share of the causal mask's work. Forward: K and V travel the ring
// (cp - 1 steps, each rank sends to rank + 1 and receives from rank - 1); at
// each step the local queries attend to the block held, with the causal mask
// of global positions (chunk pairs wholly above the diagonal skipped), and the
// blocks' results are merged by their log-sum-exp (online softmax). Backward:
// the probabilities are recomputed from the saved log-sum-exp; dK and dV
// travel the ring with K and V and arrive back at their owner after cp steps.
// CPU; q, k and v are head-interleaved rows (Megatron's QKV projection output).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace planner {

// The ring of a CP group: sends `count` floats to the next rank and receives as many from the
// previous one (both posted together).
class RingExchange {
 public:
  virtual ~RingExchange() = default;
  virtual Status Shift(const float* send, float* recv, int64_t count) = 0;
};

// Global positions of the local tokens of CP rank `rank` (chunks rank and 2 cp - 1 - rank of a
// sequence of `seq` tokens, in that order); seq must be a multiple of 2 cp.
std::vector<int64_t> CpTokenPositions(int64_t seq, int64_t cp, int64_t rank);

struct RingAttentionDims {
  int64_t batch = 1;
  int64_t seq = 1;       // the whole sequence; each rank holds seq / cp tokens
  int64_t heads = 1;     // local query heads (after TP)
  int64_t kv_heads = 0;  // local KV groups (GQA; 0: heads); query head h reads group h / (heads / kv_heads)
  int64_t head_dim = 1;
  int64_t cp = 1, cp_rank = 0;
  bool causal = true;
  int64_t tokens() const { return seq / cp; }
  int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
};

// q: element (b, i, h, e) at [(b tokens + i) ld + h d + e] (ld >= heads d); k and v likewise with
// kv() groups (GQA); o: [b, tokens, heads d]; lse: [b, heads, tokens] (natural log). `ring` may be
// null when cp == 1. Only K and V travel the ring (kv() d floats each per token).
Status RingAttentionForward(const RingAttentionDims& dims, RingExchange* ring, const float* q, const float* k,
                            const float* v, int64_t ld, float* o, float* lse);
// dq, dk, dv: written (not accumulated) in the layout of q, k, v (the same ld); a KV group's dk and
// dv sum over the query heads that read it.
Status RingAttentionBackward(const RingAttentionDims& dims, RingExchange* ring, const float* q, const float* k,
                             const float* v, int64_t ld, const float* o, const float* lse, const float* dout, float* dq,
                             float* dk, float* dv);

}  // namespace planner
