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

// All-to-all(v) with exact values: uneven counts (some zero, self-sends included), blocks laid
// out out of order with gaps in both buffers (the gaps must stay untouched), a message above
// MPI's 256 KiB eager limit, the equal-count AllToAll, an exchange of nothing, and bad
// arguments refused before any traffic.
inline Status RunAllToAllConformance(Communicator& c) {
  const int n = c.size(), r = c.rank();
  const size_t un = static_cast<size_t>(n);
  // rank s sends count(s, d) floats 1000 s + 100 d + i to rank d; a zero for some pairs (not on
  // 1 rank); big: every count is 70000 floats (280 KB) plus that.
  for (const int64_t base : {int64_t{0}, int64_t{70000}}) {
    auto count = [&](int s, int d) { return base + (s + 2 * d + 1) % 4; };
    std::vector<int64_t> sc(un), sd(un), rc(un), rd(un);
    int64_t at = 0;
    for (int d = n - 1; d >= 0; --d) {  // send blocks in reverse rank order, one float apart
      sd[static_cast<size_t>(d)] = at;
      sc[static_cast<size_t>(d)] = count(r, d);
      at += count(r, d) + 1;
    }
    std::vector<float> send(static_cast<size_t>(at), -7.0f);
    for (int d = 0; d < n; ++d) {
      for (int64_t i = 0; i < sc[static_cast<size_t>(d)]; ++i)
        send[static_cast<size_t>(sd[static_cast<size_t>(d)] + i)] = static_cast<float>(1000 * r + 100 * d + i % 97);
    }
    at = 2;
    for (int s = 0; s < n; ++s) {  // receive blocks in rank order, two floats apart
      rd[static_cast<size_t>(s)] = at;
      rc[static_cast<size_t>(s)] = count(s, r);
      at += count(s, r) + 2;
    }
    std::vector<float> recv(static_cast<size_t>(at), -1.0f);
    PLANNER_RETURN_IF_ERROR(c.AllToAllV(send.data(), sc, sd, recv.data(), rc, rd));
    std::vector<float> want(recv.size(), -1.0f);
    for (int s = 0; s < n; ++s) {
      for (int64_t i = 0; i < rc[static_cast<size_t>(s)]; ++i)
        want[static_cast<size_t>(rd[static_cast<size_t>(s)] + i)] = static_cast<float>(1000 * s + 100 * r + i % 97);
    }
    PLANNER_RETURN_IF_ERROR(Expect(
        recv == want, c, fmt::format("all-to-allv with uneven counts (base {}): values or untouched gaps", base)));
  }
  // Equal blocks of 3: block j of the result is rank j's block for me.
  {
    std::vector<float> send(3 * un), recv(3 * un, -1.0f), want(3 * un);
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < 3; ++i) {
        send[static_cast<size_t>(3 * j + i)] = static_cast<float>(100 * r + 10 * j + i);
        want[static_cast<size_t>(3 * j + i)] = static_cast<float>(100 * j + 10 * r + i);
      }
    }
    PLANNER_RETURN_IF_ERROR(c.AllToAll(send.data(), recv.data(), 3));
    PLANNER_RETURN_IF_ERROR(Expect(recv == want, c, "all-to-all of equal blocks"));
  }
  // Nothing to exchange: all counts zero, no buffers.
  const std::vector<int64_t> zeros(un, 0);
  PLANNER_RETURN_IF_ERROR(c.AllToAllV(nullptr, zeros, zeros, nullptr, zeros, zeros));
  // Bad arguments, on every rank at once: InvalidArgument, no traffic, nothing hangs.
  float x = 0;
  const std::vector<int64_t> longer(un + 1, 0), negative = [&] {
    auto v = zeros;
    v[0] = -1;
    return v;
  }();
  PLANNER_RETURN_IF_ERROR(
      Expect(c.AllToAllV(&x, longer, zeros, &x, zeros, zeros).code() == StatusCode::kInvalidArgument, c,
             "all-to-allv with size() + 1 send counts is InvalidArgument"));
  PLANNER_RETURN_IF_ERROR(Expect(
      c.AllToAllV(&x, zeros, zeros, &x, zeros, std::vector<int64_t>(un - 1, 0)).code() == StatusCode::kInvalidArgument,
      c, "all-to-allv with size() - 1 receive displacements is InvalidArgument"));
  PLANNER_RETURN_IF_ERROR(
      Expect(c.AllToAllV(&x, zeros, zeros, &x, negative, zeros).code() == StatusCode::kInvalidArgument, c,
             "all-to-allv with a negative count is InvalidArgument"));
  PLANNER_RETURN_IF_ERROR(Expect(c.AllToAll(&x, &x, -1).code() == StatusCode::kInvalidArgument, c,
                                 "all-to-all with a negative count is InvalidArgument"));
  if (c.backend() == "mpi") {  // MPI_Alltoallv's int counts: 2^31 floats is refused, not truncated
    std::vector<int64_t> huge = zeros;
    huge[0] = int64_t{1} << 31;
    PLANNER_RETURN_IF_ERROR(
        Expect(c.AllToAllV(&x, huge, zeros, &x, zeros, zeros).code() == StatusCode::kInvalidArgument, c,
               "MPI all-to-allv with a count of 2^31 floats is InvalidArgument"));
    PLANNER_RETURN_IF_ERROR(
        Expect(c.AllToAllV(&x, zeros, zeros, &x, zeros, huge).code() == StatusCode::kInvalidArgument, c,
               "MPI all-to-allv with a displacement of 2^31 floats is InvalidArgument"));
  }
  return Status::OK();
}

inline Status RunConformance(Communicator& c) {
  const int n = c.size(), r = c.rank();
  // all-reduce sum and max, odd counts.
  for (int64_t count :
       {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{700001}}) {  // 700001: 2.8 MB, a segmented ring on MPI
    std::vector<float> a(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) a[static_cast<size_t>(i)] = static_cast<float>(r + i);
    PLANNER_RETURN_IF_ERROR(c.AllReduce(a.data(), count, ReduceOp::kSum));
    bool ok = true;
    for (int64_t i = 0; i < count; ++i)
      ok = ok && a[static_cast<size_t>(i)] == static_cast<float>(n * (n - 1) / 2 + n * i);
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
    for (int q = 0; q < n; ++q)
      ok = ok && g[static_cast<size_t>(2 * q)] == q && g[static_cast<size_t>(2 * q + 1)] == 10 * q;
    PLANNER_RETURN_IF_ERROR(Expect(ok, c, "all-gather"));
  }
  // reduce-scatter: block q of the sum lands on rank q.
  {
    std::vector<float> s(static_cast<size_t>(3 * n)), out(3);
    for (int i = 0; i < 3 * n; ++i) s[static_cast<size_t>(i)] = static_cast<float>(i + r);
    PLANNER_RETURN_IF_ERROR(c.ReduceScatter(s.data(), out.data(), 3, ReduceOp::kSum));
    bool ok = true;
    for (int i = 0; i < 3; ++i)
      ok = ok && out[static_cast<size_t>(i)] == static_cast<float>(n * (3 * r + i) + n * (n - 1) / 2);
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
    std::vector<float> to_next(4, static_cast<float>(r)), to_prev(4, static_cast<float>(100 + r)), from_prev(4),
        from_next(4);
    PLANNER_RETURN_IF_ERROR(c.GroupSendRecv({{true, (r + 1) % n, to_next.data(), 4},
                                             {true, (r + n - 1) % n, to_prev.data(), 4},
                                             {false, (r + n - 1) % n, from_prev.data(), 4},
                                             {false, (r + 1) % n, from_next.data(), 4}}));
    PLANNER_RETURN_IF_ERROR(Expect(
        from_prev[0] == static_cast<float>((r + n - 1) % n) && from_next[3] == static_cast<float>(100 + (r + 1) % n), c,
        "send/recv around the ring"));
    PLANNER_RETURN_IF_ERROR(
        Expect(c.GroupSendRecv({{true, n, to_next.data(), 1}}).code() == StatusCode::kInvalidArgument, c,
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
    for (int k = 2; k >= 0; --k)
      PLANNER_RETURN_IF_ERROR(c.Recv(in[static_cast<size_t>(k)].data(), 3, (r + n - 1) % n, tags[k]));
    PLANNER_RETURN_IF_ERROR(c.FlushSends());
    bool ok = true;
    for (int k = 0; k < 3; ++k)
      ok = ok && in[static_cast<size_t>(k)][2] == static_cast<float>(10 * ((r + n - 1) % n) + k);
    PLANNER_RETURN_IF_ERROR(Expect(ok, c, "tagged send/recv matched by tag, out of order"));
    // Tags are non-negative (communicator.h) on every backend that matches by tag.
    float x = 0;
    PLANNER_RETURN_IF_ERROR(Expect(c.Send(&x, 1, (r + 1) % n, -1).code() == StatusCode::kInvalidArgument, c,
                                   "a send with a negative tag is InvalidArgument"));
    PLANNER_RETURN_IF_ERROR(Expect(c.Recv(&x, 1, (r + n - 1) % n, -1).code() == StatusCode::kInvalidArgument, c,
                                   "a receive with a negative tag is InvalidArgument"));
  }
  PLANNER_RETURN_IF_ERROR(RunAllToAllConformance(c));
  // split into even and odd ranks; collectives stay inside each half.
  {
    std::unique_ptr<Communicator> half;
    PLANNER_RETURN_IF_ERROR(c.Split(r % 2, r, &half));
    PLANNER_RETURN_IF_ERROR(
        Expect(half->size() == (n + 1 - r % 2) / 2 && half->rank() == r / 2, c, "split sizes and ranks"));
    float x = static_cast<float>(r);
    PLANNER_RETURN_IF_ERROR(half->AllReduce(&x, 1, ReduceOp::kSum));
    float want = 0;
    for (int q = r % 2; q < n; q += 2) want += static_cast<float>(q);
    PLANNER_RETURN_IF_ERROR(Expect(x == want, c, "all-reduce inside a split"));
    // all-to-all inside the half: one float from each member, its global rank.
    const size_t h = static_cast<size_t>(half->size());
    std::vector<float> mine(h, static_cast<float>(r)), got(h, -1.0f);
    PLANNER_RETURN_IF_ERROR(half->AllToAll(mine.data(), got.data(), 1));
    bool ok = true;
    for (size_t j = 0; j < h; ++j) ok = ok && got[j] == static_cast<float>(2 * j + static_cast<size_t>(r % 2));
    PLANNER_RETURN_IF_ERROR(Expect(ok, c, "all-to-all inside a split"));
  }
  return c.Barrier();
}

}  // namespace planner
