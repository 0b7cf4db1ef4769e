// The conformance table every Communicator backend must pass: each
// collective and send/recv with exact expected values, sub-communicators,
// and bad arguments. Returns the first failure as a Status naming it.
#pragma once

#include <algorithm>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "runtime/comm/communicator.h"

namespace planner {

inline Status Expect(bool ok, Communicator& c, const std::string& what) {
  if (ok) return Status::OK();
  return Status::Internal(fmt::format("{} backend, rank {} of {}: {}", c.backend(), c.rank(), c.size(), what));
}

inline Status RunConformance(Communicator& c) {
  const int n = c.size(), r = c.rank();
  // all-reduce sum and max, odd counts.
  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{700001}}) {  // 700001: 2.8 MB, a segmented ring on MPI
    std::vector<float> a(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) a[static_cast<size_t>(i)] = static_cast<float>(r + i);
    PLANNER_RETURN_IF_ERROR(c.AllReduce(a.data(), count, ReduceOp::kSum));
    bool ok = true;
    for (int64_t i = 0; i < count; ++i) ok = ok && a[static_cast<size_t>(i)] == static_cast<float>(n * (n - 1) / 2 + n * i);
    PLANNER_RETURN_IF_ERROR(Expect(ok, c, fmt::format("all-reduce sum of {} floats", count)));
    for (int64_t i = 0; i < count; ++i) a[static_cast<size_t>(i)] = static_cast<float>((r * 7 + i) % n);
    PLANNER_RETURN_IF_ERROR(c.AllReduce(a.data(), count, ReduceOp::kMax));
    ok = true;
    for (int64_t i = 0; i < count; ++i) {
      int64_t want = 0;  // the largest (q * 7 + i) % n over the ranks q (n - 1 unless 7 divides n)
      for (int q = 0; q < n; ++q) want = std::max<int64_t>(want, (q * 7 + i) % n);
      ok = ok && a[static_cast<size_t>(i)] == static_cast<float>(want);
    }
    PLANNER_RETURN_IF_ERROR(Expect(ok, c, fmt::format("all-reduce max of {} floats", count)));
  }
  // all-gather: rank-major blocks.
  {
    std::vector<float> s = {static_cast<float>(r), static_cast<float>(10 * r)}, g(static_cast<size_t>(2 * n));
    PLANNER_RETURN_IF_ERROR(c.AllGather(s.data(), g.data(), 2));
    bool ok = true;
    for (int q = 0; q < n; ++q) ok = ok && g[static_cast<size_t>(2 * q)] == q && g[static_cast<size_t>(2 * q + 1)] == 10 * q;
    PLANNER_RETURN_IF_ERROR(Expect(ok, c, "all-gather"));
  }
  // reduce-scatter: block q of the sum lands on rank q.
  {
    std::vector<float> s(static_cast<size_t>(3 * n)), out(3);
    for (int i = 0; i < 3 * n; ++i) s[static_cast<size_t>(i)] = static_cast<float>(i + r);
    PLANNER_RETURN_IF_ERROR(c.ReduceScatter(s.data(), out.data(), 3, ReduceOp::kSum));
    bool ok = true;
    for (int i = 0; i < 3; ++i) ok = ok && out[static_cast<size_t>(i)] == static_cast<float>(n * (3 * r + i) + n * (n - 1) / 2);
    PLANNER_RETURN_IF_ERROR(Expect(ok, c, "reduce-scatter"));
  }
  // broadcast from the last rank.
  {
    std::vector<float> b(5, static_cast<float>(r));
    PLANNER_RETURN_IF_ERROR(c.Broadcast(b.data(), 5, n - 1));
    bool ok = true;
    for (float v : b) ok = ok && v == static_cast<float>(n - 1);
    PLANNER_RETURN_IF_ERROR(Expect(ok, c, "broadcast"));
  }
  // grouped send/recv around the ring, both directions at once.
  if (n > 1) {
    std::vector<float> to_next(4, static_cast<float>(r)), to_prev(4, static_cast<float>(100 + r)), from_prev(4), from_next(4);
    PLANNER_RETURN_IF_ERROR(c.GroupSendRecv({{true, (r + 1) % n, to_next.data(), 4}, {true, (r + n - 1) % n, to_prev.data(), 4},
                                             {false, (r + n - 1) % n, from_prev.data(), 4}, {false, (r + 1) % n, from_next.data(), 4}}));
    PLANNER_RETURN_IF_ERROR(Expect(from_prev[0] == static_cast<float>((r + n - 1) % n) && from_next[3] == static_cast<float>(100 + (r + 1) % n),
                                   c, "send/recv around the ring"));
    PLANNER_RETURN_IF_ERROR(Expect(c.GroupSendRecv({{true, n, to_next.data(), 1}}).code() == StatusCode::kInvalidArgument, c,
                                   "a peer outside the group is InvalidArgument"));
  }
  // tagged pipeline messages received in the reverse order of sending: each receive gets the
  // message with its own tag, also for tags that collide modulo 2^15 and tags above 2^31
  // (MPI wraps onto MPI_TAG_UB; NCCL ignores tags and matches in order, so it is not asked).
  if (n > 1 && c.backend() != "nccl") {
    const int64_t tags[3] = {5, 5 + 32000, 5 + (int64_t{1} << 33)};
    std::vector<std::vector<float>> out(3), in(3, std::vector<float>(3));
    for (int k = 0; k < 3; ++k) {
      out[static_cast<size_t>(k)].assign(3, static_cast<float>(10 * r + k));
      PLANNER_RETURN_IF_ERROR(c.Send(out[static_cast<size_t>(k)].data(), 3, (r + 1) % n, tags[k]));
    }
    for (int k = 2; k >= 0; --k) PLANNER_RETURN_IF_ERROR(c.Recv(in[static_cast<size_t>(k)].data(), 3, (r + n - 1) % n, tags[k]));
    PLANNER_RETURN_IF_ERROR(c.FlushSends());
    bool ok = true;
    for (int k = 0; k < 3; ++k) ok = ok && in[static_cast<size_t>(k)][2] == static_cast<float>(10 * ((r + n - 1) % n) + k);
    PLANNER_RETURN_IF_ERROR(Expect(ok, c, "tagged send/recv matched by tag, out of order"));
    // Tags are non-negative (communicator.h) on every backend that matches by tag.
    float x = 0;
    PLANNER_RETURN_IF_ERROR(Expect(c.Send(&x, 1, (r + 1) % n, -1).code() == StatusCode::kInvalidArgument, c,
                                   "a send with a negative tag is InvalidArgument"));
    PLANNER_RETURN_IF_ERROR(Expect(c.Recv(&x, 1, (r + n - 1) % n, -1).code() == StatusCode::kInvalidArgument, c,
                                   "a receive with a negative tag is InvalidArgument"));
  }
  // split into even and odd ranks; collectives stay inside each half.
  {
    std::unique_ptr<Communicator> half;
    PLANNER_RETURN_IF_ERROR(c.Split(r % 2, r, &half));
    PLANNER_RETURN_IF_ERROR(Expect(half->size() == (n + 1 - r % 2) / 2 && half->rank() == r / 2, c, "split sizes and ranks"));
    float x = static_cast<float>(r);
    PLANNER_RETURN_IF_ERROR(half->AllReduce(&x, 1, ReduceOp::kSum));
    float want = 0;
    for (int q = r % 2; q < n; q += 2) want += static_cast<float>(q);
    PLANNER_RETURN_IF_ERROR(Expect(x == want, c, "all-reduce inside a split"));
  }
  return c.Barrier();
}

}  // namespace planner
