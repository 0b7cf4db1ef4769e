#include "dp_solver/replicated_dp.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "common/units.h"
#include "dp_solver/dp_comm_cost.h"
#include "spec/weight_versions.h"

namespace planner {

ReplicatedCoster::ReplicatedCoster(const CostTable& table, const ClusterSpec& cluster, const ReplicatedOptions& o)
    : table_(table), o_(o) {
  // Offsets and replica counts move in units of worker_unit workers.
  unit_ = std::max<int64_t>(1, o.worker_unit);
  units_ = o.workers / unit_;
  PrecomputeCommunication(cluster);
  BuildMaxOutTable();
  hbm_ = cluster.hbm_bandwidth_GBps * 1e9 * cluster.hbm_efficiency;
}

void ReplicatedCoster::PrecomputeCommunication(const ClusterSpec& cluster) {
  const int64_t w = units_;
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
        auto spread = GroupSpreadAt(cluster, off * o_.tp, r, o_.tp);
        const int64_t servers = DpServersFor(o_.dp_comm, o_.servers, o_.ps_colocated);
        ar_alpha_[k] =
            DpSyncSeconds(cluster, o_.dp_comm, 0.0, spread, servers, o_.tp);  // the tp sibling groups share the servers
        ar_beta_[k] = (DpSyncSeconds(cluster, o_.dp_comm, 1e9, spread, servers, o_.tp) - ar_alpha_[k]) / 1e9;
      }
      if (off + r < o_.workers) {
        double a = P2PSeconds(cluster, 1e-300, off * o_.tp, (off + r) * o_.tp);
        p2p_alpha_[k] = a;
        p2p_beta_[k] = (P2PSeconds(cluster, 1e9, off * o_.tp, (off + r) * o_.tp) - a) / 1e9;
      }
    }
  }
}

// Sparse table for range maxima of the output bytes (working memory).
void ReplicatedCoster::BuildMaxOutTable() {
  const size_t n = table_.rows.size();
  max_out_.emplace_back(n);
  // A row's stated working memory (on this GPU) as the output bytes that give it: working = 2 x them / tp.
  for (size_t i = 0; i < n; ++i)
    max_out_[0][i] = std::max(table_.rows[i].out_bytes, table_.rows[i].work_bytes * static_cast<double>(o_.tp) / 2);
  for (size_t lg = 1; (size_t{1} << lg) <= n; ++lg) {
    const size_t half = size_t{1} << (lg - 1);
    max_out_.emplace_back(n - (size_t{1} << lg) + 1);
    for (size_t i = 0; i + (size_t{1} << lg) <= n; ++i)
      max_out_[lg][i] = std::max(max_out_[lg - 1][i], max_out_[lg - 1][i + half]);
  }
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
  // Vertical sync: later stages hold the versions back to the input stage's (docs/cost_model.md).
  s.weight_versions = o_.vertical_sync ? VerticalSyncStageVersions(o_.workers, offset, r) : s.in_flight;
  const double working = 2 * MaxOutBytes(a, e) / static_cast<double>(o_.tp);
  s.peak_memory_bytes = params * (o_.state_bytes_per_param + o_.step_copy_bytes_per_param) +
                        static_cast<double>(s.in_flight) * t.Stash(a, e) +
                        static_cast<double>(s.weight_versions - 1) * params * o_.trainable * o_.weight_bytes_per_param +
                        working;
  if (out) *out = s;
  return o_.usable_bytes <= 0 || s.peak_memory_bytes <= o_.usable_bytes;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Fixed replica vector: min-max over boundaries only. best[s][j]: stages
// 0..s-1 hold layers [0, j); stage s starts at worker offsets[s].
class ForcedReplicationDp {
 public:
  ForcedReplicationDp(const ReplicatedCoster& coster, const std::vector<int64_t>& forced, int64_t layers)
      : coster_(coster),
        forced_(forced),
        layers_(layers),
        S_(static_cast<int64_t>(forced.size())),
        best_(static_cast<size_t>(S_ + 1), std::vector<double>(static_cast<size_t>(layers + 1), kInf)),
        arg_(static_cast<size_t>(S_ + 1), std::vector<int64_t>(static_cast<size_t>(layers + 1), -1)) {}

  void Fill() {
    best_[0][0] = 0;
    int64_t offset = 0;
    for (int64_t sidx = 0; sidx < S_; ++sidx) {
      offsets_.push_back(offset);
      for (int64_t j = sidx + 1; j <= layers_; ++j) {
        for (int64_t i = sidx; i < j; ++i) Relax(sidx, i, j, offset);
      }
      offset += forced_[static_cast<size_t>(sidx)];
    }
  }

  bool Feasible() const { return best_[static_cast<size_t>(S_)][static_cast<size_t>(layers_)] < kInf; }

  ReplicatedResult Backtrack() const {
    ReplicatedResult res;
    res.bottleneck_s = best_[static_cast<size_t>(S_)][static_cast<size_t>(layers_)];
    for (int64_t sidx = S_, j = layers_; sidx > 0; --sidx) {
      int64_t i = arg_[static_cast<size_t>(sidx)][static_cast<size_t>(j)];
      ReplicatedStage x;
      coster_.Cost(i, j, offsets_[static_cast<size_t>(sidx - 1)], forced_[static_cast<size_t>(sidx - 1)], &x);
      res.stages.push_back(x);
      j = i;
    }
    std::reverse(res.stages.begin(), res.stages.end());
    return res;
  }

 private:
  // Stage sidx holds layers [i, j) after the best split of [0, i).
  void Relax(int64_t sidx, int64_t i, int64_t j, int64_t offset) {
    const double prev = best_[static_cast<size_t>(sidx)][static_cast<size_t>(i)];
    if (!(prev < kInf)) return;
    ReplicatedStage x;
    if (!coster_.Cost(i, j, offset, forced_[static_cast<size_t>(sidx)], &x)) return;
    double v = std::max(prev, x.seconds);
    if (v < best_[static_cast<size_t>(sidx + 1)][static_cast<size_t>(j)]) {
      best_[static_cast<size_t>(sidx + 1)][static_cast<size_t>(j)] = v;
      arg_[static_cast<size_t>(sidx + 1)][static_cast<size_t>(j)] = i;
    }
  }

  const ReplicatedCoster& coster_;
  const std::vector<int64_t>& forced_;
  int64_t layers_, S_;
  std::vector<std::vector<double>> best_;
  std::vector<std::vector<int64_t>> arg_;
  std::vector<int64_t> offsets_;
};

Status SolveForced(const CostTable& table, const ReplicatedCoster& coster, const ReplicatedOptions& o,
                   ReplicatedResult* out) {
  const int64_t layers = static_cast<int64_t>(table.rows.size());
  const int64_t S = static_cast<int64_t>(o.forced.size());
  int64_t sum = 0;
  for (int64_t r : o.forced) sum += r;
  if (sum != o.workers || S > layers) {
    return Status::InvalidArgument(
        fmt::format("replication {}: the replicas sum to {} but there are {} workers (or more stages than {} layers)",
                    S, sum, o.workers, layers));
  }
  ForcedReplicationDp dp(coster, o.forced, layers);
  dp.Fill();
  if (!dp.Feasible()) {
    return Status::Infeasible(
        fmt::format("replication with {} stages does not fit in {:.1f} GiB", S, o.usable_bytes / kGiB));
  }
  *out = dp.Backtrack();
  return Status::OK();
}

// Free replication: opt[j][k] is the best bottleneck placing layers [0, j)
// on the first k units; the last stage [i, j) takes r of them.
class FreeReplicationDp {
 public:
  FreeReplicationDp(const CostTable& table, const ReplicatedCoster& coster, const ReplicatedOptions& o, int64_t unit,
                    int64_t units)
      : table_(table),
        coster_(coster),
        o_(o),
        layers_(static_cast<int64_t>(table.rows.size())),
        unit_(unit),
        units_(units),
        cols_(static_cast<size_t>(units + 1)),
        opt_(static_cast<size_t>(layers_ + 1) * cols_, kInf),
        arg_i_(opt_.size(), -1),
        arg_r_(opt_.size(), -1) {}

  void Fill() {
    opt_[At(0, 0)] = 0;
    for (int64_t j = 1; j <= layers_; ++j) {
      for (int64_t k = 1; k <= units_; ++k) FillCell(j, k);
    }
  }

  bool Feasible() const { return opt_[At(layers_, units_)] < kInf; }

  ReplicatedResult Backtrack() const {
    ReplicatedStage st;
    ReplicatedResult res;
    res.bottleneck_s = opt_[At(layers_, units_)];
    for (int64_t j = layers_, k = units_; j > 0;) {
      int64_t i = arg_i_[At(j, k)], r = arg_r_[At(j, k)];
      coster_.Cost(i, j, (k - r) * unit_, r * unit_, &st);
      res.stages.push_back(st);
      j = i;
      k -= r;
    }
    std::reverse(res.stages.begin(), res.stages.end());
    return res;
  }

 private:
  size_t At(int64_t j, int64_t k) const { return static_cast<size_t>(j) * cols_ + static_cast<size_t>(k); }

  void FillCell(int64_t j, int64_t k) {
    double best = kInf;
    int32_t bi = -1, br = -1;
    ReplicatedStage st;
    for (int64_t i = j - 1; i >= 0; --i) {
      if (table_.Time(i, j) / static_cast<double>(k * unit_) >= best) break;  // grows as i falls
      // Replication does not shard model state: once the states alone
      // overflow, no longer stage fits either.
      if (o_.usable_bytes > 0 && table_.Params(i, j) * o_.state_bytes_per_param > o_.usable_bytes) break;
      // Every stage before needs at least one unit.
      for (int64_t r = 1; r <= k - (i > 0 ? 1 : 0); ++r) {
        const double prev = opt_[At(i, k - r)];
        if (!(prev < best)) continue;
        // Cheap bound first: compute alone over the replicas.
        if (table_.Time(i, j) / static_cast<double>(r * unit_) >= best) continue;
        if (!coster_.Cost(i, j, (k - r) * unit_, r * unit_, &st)) continue;
        double v = std::max(prev, st.seconds);
        if (v < best) {
          best = v;
          bi = static_cast<int32_t>(i);
          br = static_cast<int32_t>(r);
        }
      }
    }
    opt_[At(j, k)] = best;
    arg_i_[At(j, k)] = bi;
    arg_r_[At(j, k)] = br;
  }

  const CostTable& table_;
  const ReplicatedCoster& coster_;
  const ReplicatedOptions& o_;
  int64_t layers_, unit_, units_;
  size_t cols_;
  std::vector<double> opt_;
  std::vector<int32_t> arg_i_, arg_r_;
};

}  // namespace

Status SolveReplicated(const CostTable& table, const ClusterSpec& cluster, const ReplicatedOptions& o,
                       ReplicatedResult* out) {
  const int64_t layers = static_cast<int64_t>(table.rows.size());
  const int64_t unit = std::max<int64_t>(1, o.worker_unit);
  if (o.workers < 1 || o.workers % unit != 0 || layers < 1) {
    return Status::InvalidArgument("replicated DP: workers must be a positive multiple of the worker unit");
  }
  ReplicatedCoster coster(table, cluster, o);
  if (!o.forced.empty()) return SolveForced(table, coster, o, out);
  FreeReplicationDp dp(table, coster, o, unit, o.workers / unit);
  dp.Fill();
  if (!dp.Feasible()) {
    return Status::Infeasible(fmt::format("no per-stage replication of {} layers over {} workers fits in {:.1f} GiB",
                                          layers, o.workers, o.usable_bytes / kGiB));
  }
  *out = dp.Backtrack();
  return Status::OK();
}

}  // namespace planner
