#include "dp_solver/pipedream_dp.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace planner {

namespace {

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
bool IsNone(double v) { return std::isnan(v); }

struct Entry {
  double value = kNone;  // seconds per minibatch; NaN = infeasible (PipeDream's None)
  int32_t split_k = -1;  // the last stage starts after state split_k (-1: a single stage)
  int32_t split_m = -1;  // machine index (count - 1) left for the prefix
  int32_t machines = 0;  // replication of the last stage (or of the single stage)
};

// PipeDream's segment matrices. Row i means "the stage starts right after
// state i-1" (row 0: from the model input); defined for j >= i. The values
// are plain differences of per-state sums, exactly as the released code.
struct Segments {
  int64_t s = 0;
  std::vector<double> t, act, w, out;
  double Get(const std::vector<double>& v, int64_t i, int64_t j) const {
    return i == 0 ? v[j] : (j >= i ? v[j] - v[i - 1] : kNone);
  }
};

struct Table {
  int64_t rows = 0, cols = 0, machines = 0;
  std::vector<Entry> e;
  Entry& at(int64_t i, int64_t j, int64_t m) { return e[static_cast<size_t>((i * cols + j) * machines + m)]; }
  const Entry& at(int64_t i, int64_t j, int64_t m) const { return e[static_cast<size_t>((i * cols + j) * machines + m)]; }
};

double CeilDiv(double a, double b) { return std::ceil(a / b); }

// compute_times: (S+1) x S for levels above the first (NaN = None); empty for
// the first level, which uses the raw segment compute.
void SolveLevel(const Segments& seg, const std::vector<double>& compute_times,
                const std::vector<std::vector<int>>& pred, const std::vector<std::vector<char>>& is_pred,
                int64_t num_machines, int64_t machines_within, double bandwidth, bool final_level,
                const PipeDreamOptions& o, Table* out) {
  const int64_t S = seg.s;
  Table& a = *out;
  // Only row 0 is ever read at the final level; the others are skipped.
  a.rows = final_level ? 1 : S + 1;
  a.cols = S;
  a.machines = num_machines;
  a.e.assign(static_cast<size_t>(a.rows * a.cols * a.machines), Entry{});
  auto C = [&](int64_t i, int64_t j) {
    return compute_times.empty() ? seg.Get(seg.t, i, j) : compute_times[static_cast<size_t>(i * S + j)];
  };
  const double M = static_cast<double>(num_machines);
  const double acr = o.activation_compression_ratio;
  for (int64_t i = 0; i < a.rows; ++i) {
    for (int64_t j = i; j < S; ++j) {
      double c = C(i, j), act = seg.Get(seg.act, i, j), w = seg.Get(seg.w, i, j);
      int64_t max_m = o.straight_pipeline ? 1 : num_machines;
      for (int64_t m = 0; m < max_m; ++m) {
        double stashed = CeilDiv(M - static_cast<double>(m + 1), static_cast<double>(m + 1)) * (act + w);
        if (o.use_memory_constraint && stashed > o.memory_bytes) continue;
        double dp = (4.0 * static_cast<double>(m) * w) / (bandwidth * static_cast<double>(m + 1));
        dp /= static_cast<double>(machines_within);
        if (IsNone(c)) continue;
        a.at(i, j, m) = Entry{(c + dp) / static_cast<double>(m + 1), -1, -1, static_cast<int32_t>(m + 1)};
      }
    }
  }
  for (int64_t i = 0; i < a.rows; ++i) {
    for (int64_t m = 1; m < num_machines; ++m) {
      for (int64_t j = i + 1; j < S; ++j) {
        Entry best = a.at(i, j, m);
        if (o.use_fewer_machines) {
          const Entry& fewer = a.at(i, j, m - 1);
          if (IsNone(best.value) || (!IsNone(fewer.value) && fewer.value < best.value)) best = fewer;
        }
        for (int k : pred[static_cast<size_t>(j)]) {
          if (i > 0 && is_pred[static_cast<size_t>(i - 1)][static_cast<size_t>(k)]) continue;
          int64_t max_mp = o.straight_pipeline ? 2 : m + 1;
          for (int64_t mp = 1; mp < max_mp; ++mp) {
            const double r = static_cast<double>(mp);
            double last = C(k + 1, j);
            if (IsNone(last)) continue;
            double last_w = seg.Get(seg.w, k + 1, j);
            double stashed = (seg.Get(seg.act, k + 1, j) + last_w) * CeilDiv(M - static_cast<double>(m + 1), r);
            if (o.use_memory_constraint && stashed > o.memory_bytes) continue;
            last = (last + (4.0 * (r - 1) * last_w) / (bandwidth * r)) / r;
            const Entry& prefix = a.at(i, k, m - mp);
            if (IsNone(prefix.value)) continue;
            double pt = std::max(prefix.value, last);
            if (acr > 0) {
              // Activation + gradient of the boundary tensors, only when a
              // compression ratio is given (PipeDream's default ignores them).
              pt = std::max(pt, 2.0 * seg.out[static_cast<size_t>(k)] / (bandwidth * r) / acr);
              if (j < S - 1) pt = std::max(pt, 2.0 * seg.out[static_cast<size_t>(j)] / (bandwidth * r) / acr);
            }
            if (IsNone(best.value) || best.value > pt) {
              best = Entry{pt, k, static_cast<int32_t>(m - mp), static_cast<int32_t>(mp)};
            }
          }
        }
        a.at(i, j, m) = best;
      }
    }
  }
}

// PipeDream's analyze_partitioning: follows the back-pointers of
// A[start][end-1][M-1] and returns the stages as (first state, end state,
// replication) in order. False when the entry is infeasible.
bool Backtrack(const Table& a, int64_t start, int64_t end, int64_t num_machines,
               std::vector<std::tuple<int64_t, int64_t, int64_t>>* stages) {
  const Entry* e = &a.at(start, end - 1, num_machines - 1);
  if (IsNone(e->value)) return false;
  std::vector<std::tuple<int64_t, int64_t, int64_t>> rev;
  int64_t stage_end = end;
  while (e->split_k >= 0) {
    rev.emplace_back(e->split_k + 1, stage_end, e->machines);
    stage_end = e->split_k + 1;
    e = &a.at(start, e->split_k, e->split_m);
  }
  rev.emplace_back(start, stage_end, e->machines);
  stages->assign(rev.rbegin(), rev.rend());
  return true;
}

}  // namespace

Status SolvePipeDream(const Profile& profile, const PipeDreamOptions& o, PipeDreamResult* out) {
  if (o.machines.empty() || o.machines.size() != o.bandwidths.size()) {
    return Status::InvalidArgument("pipedream mode needs one machine count and one bandwidth per level");
  }
  for (size_t l = 0; l < o.machines.size(); ++l) {
    if (o.machines[l] < 1) return Status::InvalidArgument("machine counts must be at least 1");
    if (!(o.bandwidths[l] > 0)) return Status::InvalidArgument("bandwidths must be positive (bytes/s)");
  }
  const int n = static_cast<int>(profile.layers.size());
  std::vector<std::vector<int>> inputs(static_cast<size_t>(n));
  std::vector<std::vector<int>> outs(static_cast<size_t>(n));
  for (int v = 0; v < n; ++v) {
    for (const auto& name : profile.layers[static_cast<size_t>(v)].inputs) {
      int u = profile.FindLayer(name);
      inputs[static_cast<size_t>(v)].push_back(u);
      outs[static_cast<size_t>(u)].push_back(v);
    }
  }
  // PipeDream's preprocessing: Input* sources are dropped (forced into stage
  // 0 with zero cost), then unused __getitem__ sinks are dropped.
  std::vector<char> alive(static_cast<size_t>(n), 1);
  for (int v = 0; v < n; ++v) {
    const auto& l = profile.layers[static_cast<size_t>(v)];
    if (inputs[static_cast<size_t>(v)].empty() && l.desc.rfind("Input", 0) == 0) alive[static_cast<size_t>(v)] = 0;
  }
  for (int v = 0; v < n; ++v) {
    if (!alive[static_cast<size_t>(v)]) continue;
    bool sink = true;
    for (int w : outs[static_cast<size_t>(v)]) sink = sink && !alive[static_cast<size_t>(w)];
    if (sink && profile.layers[static_cast<size_t>(v)].desc.rfind("__getitem__", 0) == 0) alive[static_cast<size_t>(v)] = 0;
  }
  int start = -1;
  for (int v = 0; v < n && start < 0; ++v) {
    if (!alive[static_cast<size_t>(v)]) continue;
    bool source = true;
    for (int u : inputs[static_cast<size_t>(v)]) source = source && !alive[static_cast<size_t>(u)];
    if (source) start = v;
  }
  if (start < 0) return Status::InvalidArgument(profile.path + ": the profile has no layer left after removing Input nodes");

  AntichainStates st;
  PLANNER_RETURN_IF_ERROR(BuildAntichainStates(inputs, alive, start, /*max_states=*/20000, &st));
  Segments seg;
  seg.s = static_cast<int64_t>(st.frontier.size());
  const int64_t S = seg.s;
  auto timing = [&](int v) {
    const auto& t = profile.layers[static_cast<size_t>(v)].timings;
    return t.empty() ? 0.0 : t[0].forward_s + t[0].backward_s;
  };
  for (int64_t s = 0; s < S; ++s) {
    double t = 0, act = 0, w = 0, o_bytes = 0;
    for (int v = 0; v < n; ++v) {
      if (!st.members[static_cast<size_t>(s)][static_cast<size_t>(v)]) continue;
      t += timing(v);
      act += profile.layers[static_cast<size_t>(v)].output_bytes;
      w += profile.layers[static_cast<size_t>(v)].params_bytes;
    }
    for (int v : st.frontier[static_cast<size_t>(s)]) o_bytes += profile.layers[static_cast<size_t>(v)].output_bytes;
    seg.t.push_back(t);
    seg.act.push_back(act);
    seg.w.push_back(w);
    seg.out.push_back(o_bytes);
  }
  std::vector<std::vector<char>> is_pred(static_cast<size_t>(S), std::vector<char>(static_cast<size_t>(S), 0));
  for (int64_t s = 0; s < S; ++s) for (int k : st.pred[static_cast<size_t>(s)]) is_pred[static_cast<size_t>(s)][static_cast<size_t>(k)] = 1;

  const size_t levels = o.machines.size();
  std::vector<Table> tables(levels);
  std::vector<double> compute;  // empty: level 1 uses raw compute
  int64_t within = 1;
  for (size_t l = 0; l < levels; ++l) {
    SolveLevel(seg, compute, st.pred, is_pred, o.machines[l], within, o.bandwidths[l], l + 1 == levels, o, &tables[l]);
    within = o.machines[l];
    if (l + 1 < levels) {
      compute.assign(static_cast<size_t>((S + 1) * S), kNone);
      for (int64_t i = 0; i <= S; ++i)
        for (int64_t j = 0; j < S; ++j) compute[static_cast<size_t>(i * S + j)] = tables[l].at(i, j, o.machines[l] - 1).value;
    }
  }
  const Entry& top = tables[levels - 1].at(0, S - 1, o.machines[levels - 1] - 1);
  if (IsNone(top.value)) {
    return Status::Infeasible(fmt::format("no PipeDream configuration fits: every stage needs more than the {:.3g} bytes "
                                          "of memory per machine (-s); raise it or drop --use-memory-constraint",
                                          o.memory_bytes));
  }
  // Reconstruct the flattened configuration level by level.
  struct Seg { int64_t start, end, replication; };
  std::vector<Seg> segs = {{0, S, 1}};
  for (size_t l = levels; l-- > 0;) {
    std::vector<Seg> next;
    for (const auto& sg : segs) {
      std::vector<std::tuple<int64_t, int64_t, int64_t>> parts;
      if (!Backtrack(tables[l], sg.start, sg.end, o.machines[l], &parts)) {
        return Status::Internal("pipedream backtrack reached an infeasible entry");
      }
      for (const auto& [a, b, r] : parts) next.push_back({a, b, r * sg.replication});
    }
    segs = std::move(next);
  }
  PipeDreamResult r;
  r.objective_s = top.value;
  r.num_states = S;
  r.single_machine_s = seg.t[static_cast<size_t>(S - 1)];
  double d = r.single_machine_s;
  within = 1;
  for (size_t l = 0; l < levels; ++l) {
    double m = static_cast<double>(o.machines[l]);
    d = (d + (4 * (m - 1) * seg.w[static_cast<size_t>(S - 1)]) / (o.bandwidths[l] * m) / static_cast<double>(within)) / m;
    within = o.machines[l];
  }
  r.data_parallel_s = d;
  std::vector<char> assigned(static_cast<size_t>(n), 0);
  for (int v = 0; v < n; ++v) if (!alive[static_cast<size_t>(v)]) assigned[static_cast<size_t>(v)] = 1;
  for (const auto& sg : segs) {
    PipeDreamStage ps;
    ps.first_state = sg.start;
    ps.end_state = sg.end;
    ps.replicas = sg.replication;
    ps.compute_s = seg.Get(seg.t, sg.start, sg.end - 1);
    for (int v = 0; v < n; ++v) {
      if (assigned[static_cast<size_t>(v)] || !st.members[static_cast<size_t>(sg.end - 1)][static_cast<size_t>(v)]) continue;
      assigned[static_cast<size_t>(v)] = 1;
      ps.layers.push_back(profile.layers[static_cast<size_t>(v)].name);
    }
    r.machines_used += ps.replicas;
    r.config += (r.config.empty() ? "" : "-") + std::to_string(ps.replicas);
    r.stages.push_back(std::move(ps));
  }
  *out = std::move(r);
  return Status::OK();
}

}  // namespace planner
