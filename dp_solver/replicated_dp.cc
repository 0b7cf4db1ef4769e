#include "dp_solver/replicated_dp.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "common/units.h"

namespace planner {

ReplicatedCoster::ReplicatedCoster(const CostTable& table, const ClusterSpec& cluster, const ReplicatedOptions& o)
    : table_(table), o_(o) {
  // Offsets and replica counts move in units of worker_unit workers.
  unit_ = std::max<int64_t>(1, o.worker_unit);
  const int64_t w = o.workers / unit_;
  units_ = w;
  const size_t cells = static_cast<size_t>(w * (w + 1));
  ar_alpha_.assign(cells, 0.0);
  ar_beta_.assign(cells, 0.0);
  p2p_alpha_.assign(cells, 0.0);
  p2p_beta_.assign(cells, 0.0);
  // All-reduce and send times are affine in bytes: alpha + beta x bytes.
  for (int64_t ou = 0; ou < w; ++ou) {
    for (int64_t ru = 1; ou + ru <= w; ++ru) {
      const size_t k = static_cast<size_t>(ou * (w + 1) + ru);
      const int64_t off = ou * unit_, r = ru * unit_;
      if (r > 1) {
        auto spread = GroupSpreadAt(cluster, off * o.tp, r, o.tp);
        ar_alpha_[k] = AllReduceSeconds(cluster, 0.0, spread, AllReduceUse::kGradient);
        ar_beta_[k] = (AllReduceSeconds(cluster, 1e9, spread, AllReduceUse::kGradient) - ar_alpha_[k]) / 1e9;
      }
      if (off + r < o.workers) {
        double a = P2PSeconds(cluster, 1e-300, off * o.tp, (off + r) * o.tp);
        p2p_alpha_[k] = a;
        p2p_beta_[k] = (P2PSeconds(cluster, 1e9, off * o.tp, (off + r) * o.tp) - a) / 1e9;
      }
    }
  }
  // Sparse table for range maxima of the output bytes (working memory).
  const size_t n = table.rows.size();
  max_out_.emplace_back(n);
  for (size_t i = 0; i < n; ++i) max_out_[0][i] = table.rows[i].out_bytes;
  for (size_t lg = 1; (size_t{1} << lg) <= n; ++lg) {
    const size_t half = size_t{1} << (lg - 1);
    max_out_.emplace_back(n - (size_t{1} << lg) + 1);
    for (size_t i = 0; i + (size_t{1} << lg) <= n; ++i) max_out_[lg][i] = std::max(max_out_[lg - 1][i], max_out_[lg - 1][i + half]);
  }
  hbm_ = cluster.hbm_bandwidth_GBps * 1e9 * cluster.hbm_efficiency;
}

double ReplicatedCoster::MaxOutBytes(int64_t a, int64_t e) const {
  size_t len = static_cast<size_t>(e - a), lg = 0;
  while ((size_t{2} << lg) <= len) ++lg;
  return std::max(max_out_[lg][static_cast<size_t>(a)], max_out_[lg][static_cast<size_t>(e) - (size_t{1} << lg)]);
}

bool ReplicatedCoster::Cost(int64_t a, int64_t e, int64_t offset, int64_t r, ReplicatedStage* out) const {
  const CostTable& t = table_;
  const int64_t layers = static_cast<int64_t>(t.rows.size());
  const size_t k = Index(offset, r);
  const double params = t.Params(a, e);
  ReplicatedStage s;
  s.first = a;
  s.end = e;
  s.offset = offset;
  s.replicas = r;
  s.compute_s = t.Time(a, e);
  if (hbm_ > 0) s.compute_s += params * o_.optimizer_bytes_per_param / hbm_;  // a step after every microbatch
  s.allreduce_s = r > 1 ? ar_alpha_[k] + ar_beta_[k] * params * o_.grad_bytes_per_param : 0.0;
  if (e < layers) {
    double bytes = t.rows[static_cast<size_t>(e - 1)].out_bytes;
    if (o_.scatter_gather && o_.tp > 1) bytes /= static_cast<double>(o_.tp);
    s.send_s = 2 * (p2p_alpha_[k] + p2p_beta_[k] * bytes);  // activation forward, gradient back
  }
  const double rd = static_cast<double>(r);
  s.seconds = o_.p2p_overlap ? std::max((s.compute_s + s.allreduce_s) / rd, s.send_s / rd)
                             : (s.compute_s + s.allreduce_s + s.send_s) / rd;
  // PipeDream (section 3.3): a replica holds ceil(workers from here / r)
  // microbatches in flight, each with its own stashed weight version.
  s.in_flight = (o_.workers - offset + r - 1) / r;
  const double working = 2 * MaxOutBytes(a, e) / static_cast<double>(o_.tp);
  s.peak_memory_bytes = params * o_.state_bytes_per_param + static_cast<double>(s.in_flight) * t.Stash(a, e) +
                        static_cast<double>(s.in_flight - 1) * params * o_.weight_bytes_per_param + working;
  if (out) *out = s;
  return o_.usable_bytes <= 0 || s.peak_memory_bytes <= o_.usable_bytes;
}

Status SolveReplicated(const CostTable& table, const ClusterSpec& cluster, const ReplicatedOptions& o,
                       ReplicatedResult* out) {
  const int64_t layers = static_cast<int64_t>(table.rows.size());
  const int64_t unit = std::max<int64_t>(1, o.worker_unit);
  if (o.workers < 1 || o.workers % unit != 0 || layers < 1) {
    return Status::InvalidArgument("replicated DP: workers must be a positive multiple of the worker unit");
  }
  const int64_t units = o.workers / unit;
  ReplicatedCoster coster(table, cluster, o);
  if (!o.forced.empty()) {
    // Fixed replica vector: min-max over boundaries only. best[s][j]: stages 0..s-1 hold layers [0, j).
    const int64_t S = static_cast<int64_t>(o.forced.size());
    int64_t sum = 0;
    for (int64_t r : o.forced) sum += r;
    if (sum != o.workers || S > layers) {
      return Status::InvalidArgument(fmt::format("replication {}: the replicas sum to {} but there are {} workers (or more stages than {} layers)",
                                                 S, sum, o.workers, layers));
    }
    constexpr double kInf2 = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> best(static_cast<size_t>(S + 1), std::vector<double>(static_cast<size_t>(layers + 1), kInf2));
    std::vector<std::vector<int64_t>> arg(static_cast<size_t>(S + 1), std::vector<int64_t>(static_cast<size_t>(layers + 1), -1));
    best[0][0] = 0;
    int64_t offset = 0;
    std::vector<int64_t> offsets;
    for (int64_t sidx = 0; sidx < S; ++sidx) {
      offsets.push_back(offset);
      for (int64_t j = sidx + 1; j <= layers; ++j) {
        for (int64_t i = sidx; i < j; ++i) {
          if (!(best[static_cast<size_t>(sidx)][static_cast<size_t>(i)] < kInf2)) continue;
          ReplicatedStage x;
          if (!coster.Cost(i, j, offset, o.forced[static_cast<size_t>(sidx)], &x)) continue;
          double v = std::max(best[static_cast<size_t>(sidx)][static_cast<size_t>(i)], x.seconds);
          if (v < best[static_cast<size_t>(sidx + 1)][static_cast<size_t>(j)]) {
            best[static_cast<size_t>(sidx + 1)][static_cast<size_t>(j)] = v;
            arg[static_cast<size_t>(sidx + 1)][static_cast<size_t>(j)] = i;
          }
        }
      }
      offset += o.forced[static_cast<size_t>(sidx)];
    }
    if (!(best[static_cast<size_t>(S)][static_cast<size_t>(layers)] < kInf2)) {
      return Status::Infeasible(fmt::format("replication with {} stages does not fit in {:.1f} GiB", S, o.usable_bytes / kGiB));
    }
    ReplicatedResult res;
    res.bottleneck_s = best[static_cast<size_t>(S)][static_cast<size_t>(layers)];
    for (int64_t sidx = S, j = layers; sidx > 0; --sidx) {
      int64_t i = arg[static_cast<size_t>(sidx)][static_cast<size_t>(j)];
      ReplicatedStage x;
      coster.Cost(i, j, offsets[static_cast<size_t>(sidx - 1)], o.forced[static_cast<size_t>(sidx - 1)], &x);
      res.stages.push_back(x);
      j = i;
    }
    std::reverse(res.stages.begin(), res.stages.end());
    *out = std::move(res);
    return Status::OK();
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // opt[j][k]: best bottleneck placing layers [0, j) on the first k units.
  const size_t cols = static_cast<size_t>(units + 1);
  std::vector<double> opt(static_cast<size_t>(layers + 1) * cols, kInf);
  std::vector<int32_t> arg_i(opt.size(), -1), arg_r(opt.size(), -1);
  auto at = [&](int64_t j, int64_t k) -> size_t { return static_cast<size_t>(j) * cols + static_cast<size_t>(k); };
  opt[at(0, 0)] = 0;
  ReplicatedStage st;
  for (int64_t j = 1; j <= layers; ++j) {
    for (int64_t k = 1; k <= units; ++k) {
      double best = kInf;
      int32_t bi = -1, br = -1;
      for (int64_t i = j - 1; i >= 0; --i) {
        if (table.Time(i, j) / static_cast<double>(k * unit) >= best) break;  // grows as i falls
        // Replication does not shard model state: once the states alone
        // overflow, no longer stage fits either.
        if (o.usable_bytes > 0 && table.Params(i, j) * o.state_bytes_per_param > o.usable_bytes) break;
        // Every stage before needs at least one unit.
        for (int64_t r = 1; r <= k - (i > 0 ? 1 : 0); ++r) {
          const double prev = opt[at(i, k - r)];
          if (!(prev < best)) continue;
          // Cheap bound first: compute alone over the replicas.
          if (table.Time(i, j) / static_cast<double>(r * unit) >= best) continue;
          if (!coster.Cost(i, j, (k - r) * unit, r * unit, &st)) continue;
          double v = std::max(prev, st.seconds);
          if (v < best) {
            best = v;
            bi = static_cast<int32_t>(i);
            br = static_cast<int32_t>(r);
          }
        }
      }
      opt[at(j, k)] = best;
      arg_i[at(j, k)] = bi;
      arg_r[at(j, k)] = br;
    }
  }
  if (!(opt[at(layers, units)] < kInf)) {
    return Status::Infeasible(fmt::format("no per-stage replication of {} layers over {} workers fits in {:.1f} GiB",
                                          layers, o.workers, o.usable_bytes / kGiB));
  }
  ReplicatedResult res;
  res.bottleneck_s = opt[at(layers, units)];
  for (int64_t j = layers, k = units; j > 0;) {
    int64_t i = arg_i[at(j, k)], r = arg_r[at(j, k)];
    coster.Cost(i, j, (k - r) * unit, r * unit, &st);
    res.stages.push_back(st);
    j = i;
    k -= r;
  }
  std::reverse(res.stages.begin(), res.stages.end());
  *out = std::move(res);
  return Status::OK();
}

}  // namespace planner
