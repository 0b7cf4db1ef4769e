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
  const Entry& at(int64_t i, int64_t j, int64_t m) const {
    return e[static_cast<size_t>((i * cols + j) * machines + m)];
  }
};

double CeilDiv(double a, double b) { return std::ceil(a / b); }

// One PipeDream DP level over the segments: A[i][j][m] is the best time per
// minibatch of the segment "after state i-1 .. state j" on m+1 machines.
// compute_times: (S+1) x S for levels above the first (NaN = None); empty for
// the first level, which uses the raw segment compute.
class LevelSolver {
 public:
  LevelSolver(const Segments& seg, const std::vector<double>& compute_times, const std::vector<std::vector<int>>& pred,
              const std::vector<std::vector<char>>& is_pred, int64_t num_machines, int64_t machines_within,
              double bandwidth, const PipeDreamOptions& o)
      : seg_(seg),
        compute_times_(compute_times),
        pred_(pred),
        is_pred_(is_pred),
        num_machines_(num_machines),
        machines_within_(machines_within),
        bandwidth_(bandwidth),
        o_(o),
        M_(static_cast<double>(num_machines)) {}

  void Solve(bool final_level, Table* out) const {
    Table& a = *out;
    // Only row 0 is ever read at the final level; the others are skipped.
    a.rows = final_level ? 1 : seg_.s + 1;
    a.cols = seg_.s;
    a.machines = num_machines_;
    a.e.assign(static_cast<size_t>(a.rows * a.cols * a.machines), Entry{});
    FillSingleStages(&a);
    for (int64_t i = 0; i < a.rows; ++i) {
      for (int64_t m = 1; m < num_machines_; ++m) {
        for (int64_t j = i + 1; j < seg_.s; ++j) a.at(i, j, m) = BestSplit(a, i, j, m);
      }
    }
  }

 private:
  double C(int64_t i, int64_t j) const {
    return compute_times_.empty() ? seg_.Get(seg_.t, i, j) : compute_times_[static_cast<size_t>(i * seg_.s + j)];
  }

  // The whole segment as one stage, replicated on m+1 machines.
  void FillSingleStages(Table* out) const {
    Table& a = *out;
    for (int64_t i = 0; i < a.rows; ++i) {
      for (int64_t j = i; j < seg_.s; ++j) {
        double c = C(i, j), act = seg_.Get(seg_.act, i, j), w = seg_.Get(seg_.w, i, j);
        int64_t max_m = o_.straight_pipeline ? 1 : num_machines_;
        for (int64_t m = 0; m < max_m; ++m) {
          double stashed = CeilDiv(M_ - static_cast<double>(m + 1), static_cast<double>(m + 1)) * (act + w);
          if (o_.use_memory_constraint && stashed > o_.memory_bytes) continue;
          double dp = (4.0 * static_cast<double>(m) * w) / (bandwidth_ * static_cast<double>(m + 1));
          dp /= static_cast<double>(machines_within_);
          if (IsNone(c)) continue;
          a.at(i, j, m) = Entry{(c + dp) / static_cast<double>(m + 1), -1, -1, static_cast<int32_t>(m + 1)};
        }
      }
    }
  }

  // The best of: the single stage, fewer machines (when allowed), and every
  // split "prefix up to state k on m+1-mp machines, last stage on mp".
  Entry BestSplit(const Table& a, int64_t i, int64_t j, int64_t m) const {
    Entry best = a.at(i, j, m);
    if (o_.use_fewer_machines) {
      const Entry& fewer = a.at(i, j, m - 1);
      if (IsNone(best.value) || (!IsNone(fewer.value) && fewer.value < best.value)) best = fewer;
    }
    for (int k : pred_[static_cast<size_t>(j)]) {
      if (i > 0 && is_pred_[static_cast<size_t>(i - 1)][static_cast<size_t>(k)]) continue;
      int64_t max_mp = o_.straight_pipeline ? 2 : m + 1;
      for (int64_t mp = 1; mp < max_mp; ++mp) {
        double pt = SplitTime(a, i, j, m, k, mp);
        if (IsNone(pt)) continue;
        if (IsNone(best.value) || best.value > pt) {
          best = Entry{pt, k, static_cast<int32_t>(m - mp), static_cast<int32_t>(mp)};
        }
      }
    }
    return best;
  }

  // Time per minibatch of the split at state k with a last stage on mp
  // machines; None when the last stage or the prefix is infeasible.
  double SplitTime(const Table& a, int64_t i, int64_t j, int64_t m, int k, int64_t mp) const {
    const double r = static_cast<double>(mp);
    double last = C(k + 1, j);
    if (IsNone(last)) return kNone;
    double last_w = seg_.Get(seg_.w, k + 1, j);
    double stashed = (seg_.Get(seg_.act, k + 1, j) + last_w) * CeilDiv(M_ - static_cast<double>(m + 1), r);
    if (o_.use_memory_constraint && stashed > o_.memory_bytes) return kNone;
    last = (last + (4.0 * (r - 1) * last_w) / (bandwidth_ * r)) / r;
    const Entry& prefix = a.at(i, k, m - mp);
    if (IsNone(prefix.value)) return kNone;
    double pt = std::max(prefix.value, last);
    const double acr = o_.activation_compression_ratio;
    if (acr > 0) {
      // Activation + gradient of the boundary tensors, only when a
      // compression ratio is given (PipeDream's default ignores them).
      pt = std::max(pt, 2.0 * seg_.out[static_cast<size_t>(k)] / (bandwidth_ * r) / acr);
      if (j < seg_.s - 1) pt = std::max(pt, 2.0 * seg_.out[static_cast<size_t>(j)] / (bandwidth_ * r) / acr);
    }
    return pt;
  }

  const Segments& seg_;
  const std::vector<double>& compute_times_;
  const std::vector<std::vector<int>>& pred_;
  const std::vector<std::vector<char>>& is_pred_;
  int64_t num_machines_, machines_within_;
  double bandwidth_;
  const PipeDreamOptions& o_;
  double M_;
};

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

constexpr size_t kMaxPipeDreamLayers = 11585;  // (S + 1) x S within kMaxPipeDreamEntries at one machine
constexpr double kMaxPipeDreamEntries = double(int64_t{1} << 27), kMaxPipeDreamWork = double(int64_t{1} << 30);

Status ValidateOptions(const PipeDreamOptions& o) {
  if (o.machines.empty() || o.machines.size() != o.bandwidths.size()) {
    return Status::InvalidArgument("pipedream mode needs one machine count and one bandwidth per level");
  }
  for (size_t l = 0; l < o.machines.size(); ++l) {
    if (o.machines[l] < 1) return Status::InvalidArgument("machine counts must be at least 1");
    if (!(o.bandwidths[l] > 0)) return Status::InvalidArgument("bandwidths must be positive (bytes/s)");
  }
  return Status::OK();
}

// The profile's layer DAG as producer lists (inputs) and consumer lists (outs).
struct LayerDag {
  std::vector<std::vector<int>> inputs, outs;
  std::vector<char> alive;  // kept by PipeDream's preprocessing
  int start = -1;           // the first alive source
};

// PipeDream's preprocessing: Input* sources are dropped (forced into stage
// 0 with zero cost), then unused __getitem__ sinks are dropped.
void DropInputsAndUnusedGetitems(const Profile& profile, LayerDag* g) {
  const int n = static_cast<int>(profile.layers.size());
  g->alive.assign(static_cast<size_t>(n), 1);
  for (int v = 0; v < n; ++v) {
    const auto& l = profile.layers[static_cast<size_t>(v)];
    if (g->inputs[static_cast<size_t>(v)].empty() && l.desc.rfind("Input", 0) == 0)
      g->alive[static_cast<size_t>(v)] = 0;
  }
  for (int v = 0; v < n; ++v) {
    if (!g->alive[static_cast<size_t>(v)]) continue;
    bool sink = true;
    for (int w : g->outs[static_cast<size_t>(v)]) sink = sink && !g->alive[static_cast<size_t>(w)];
    if (sink && profile.layers[static_cast<size_t>(v)].desc.rfind("__getitem__", 0) == 0)
      g->alive[static_cast<size_t>(v)] = 0;
  }
}

Status BuildLayerDag(const Profile& profile, LayerDag* out) {
  const int n = static_cast<int>(profile.layers.size());
  LayerDag g;
  g.inputs.assign(static_cast<size_t>(n), {});
  g.outs.assign(static_cast<size_t>(n), {});
  for (int v = 0; v < n; ++v) {
    for (const auto& name : profile.layers[static_cast<size_t>(v)].inputs) {
      int u = profile.FindLayer(name);
      g.inputs[static_cast<size_t>(v)].push_back(u);
      g.outs[static_cast<size_t>(u)].push_back(v);
    }
  }
  DropInputsAndUnusedGetitems(profile, &g);
  for (int v = 0; v < n && g.start < 0; ++v) {
    if (!g.alive[static_cast<size_t>(v)]) continue;
    bool source = true;
    for (int u : g.inputs[static_cast<size_t>(v)]) source = source && !g.alive[static_cast<size_t>(u)];
    if (source) g.start = v;
  }
  if (g.start < 0)
    return Status::InvalidArgument(profile.path + ": the profile has no layer left after removing Input nodes");
  *out = std::move(g);
  return Status::OK();
}

// Per-state sums over the nodes up to each state: compute (fwd+bwd), output
// bytes, parameter bytes; and the output bytes of each state's frontier.
Segments BuildSegments(const Profile& profile, const AntichainStates& st) {
  const int n = static_cast<int>(profile.layers.size());
  Segments seg;
  seg.s = static_cast<int64_t>(st.frontier.size());
  auto timing = [&](int v) {
    const auto& t = profile.layers[static_cast<size_t>(v)].timings;
    return t.empty() ? 0.0 : t[0].forward_s + t[0].backward_s;
  };
  for (int64_t s = 0; s < seg.s; ++s) {
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
  return seg;
}

// Solves every level, innermost first; a level's stages cost what the level
// below found for their segment on all of its machines.
std::vector<Table> SolveLevels(const Segments& seg, const AntichainStates& st, const PipeDreamOptions& o) {
  const int64_t S = seg.s;
  std::vector<std::vector<char>> is_pred(static_cast<size_t>(S), std::vector<char>(static_cast<size_t>(S), 0));
  for (int64_t s = 0; s < S; ++s)
    for (int k : st.pred[static_cast<size_t>(s)]) is_pred[static_cast<size_t>(s)][static_cast<size_t>(k)] = 1;
  const size_t levels = o.machines.size();
  std::vector<Table> tables(levels);
  std::vector<double> compute;  // empty: level 1 uses raw compute
  int64_t within = 1;
  for (size_t l = 0; l < levels; ++l) {
    LevelSolver(seg, compute, st.pred, is_pred, o.machines[l], within, o.bandwidths[l], o)
        .Solve(l + 1 == levels, &tables[l]);
    within = o.machines[l];
    if (l + 1 < levels) {
      compute.assign(static_cast<size_t>((S + 1) * S), kNone);
      for (int64_t i = 0; i <= S; ++i)
        for (int64_t j = 0; j < S; ++j)
          compute[static_cast<size_t>(i * S + j)] = tables[l].at(i, j, o.machines[l] - 1).value;
    }
  }
  return tables;
}

struct StateRange {
  int64_t start, end, replication;
  std::vector<int64_t> units;  // first device of every unit of the current level the segment runs on
};

// Reconstructs the flattened configuration level by level, outermost first. A level-l stage on
// r units takes the next r level-(l-1) units in pipeline order inside EVERY unit its parent
// stage holds (the hierarchy the DP costs: a top-level stage's replicas are whole servers, its
// sub-stages split each server alike), so a flattened stage's devices are the product of the
// levels' choices; units are numbered innermost fastest (device = server x M_1 + GPU).
Status FlattenStages(const std::vector<Table>& tables, const PipeDreamOptions& o, int64_t num_states,
                     std::vector<StateRange>* out) {
  std::vector<StateRange> segs = {{0, num_states, 1, {0}}};
  for (size_t l = tables.size(); l-- > 0;) {
    int64_t sub = 1;  // devices in one level-(l-1) unit
    for (size_t i = 0; i < l; ++i) sub *= o.machines[i];
    std::vector<StateRange> next;
    for (const auto& sg : segs) {
      std::vector<std::tuple<int64_t, int64_t, int64_t>> parts;
      if (!Backtrack(tables[l], sg.start, sg.end, o.machines[l], &parts)) {
        return Status::Internal("pipedream backtrack reached an infeasible entry");
      }
      int64_t used = 0;
      for (const auto& [a, b, r] : parts) {
        StateRange x{a, b, r * sg.replication, {}};
        for (int64_t base : sg.units)
          for (int64_t q = 0; q < r; ++q) x.units.push_back(base + (used + q) * sub);
        std::sort(x.units.begin(), x.units.end());
        used += r;
        next.push_back(std::move(x));
      }
    }
    segs = std::move(next);
  }
  *out = std::move(segs);
  return Status::OK();
}

// PipeDream's data-parallel baseline: the whole model replicated on every
// machine of every level.
double DataParallelSeconds(const Segments& seg, const PipeDreamOptions& o) {
  const size_t last = static_cast<size_t>(seg.s - 1);
  double d = seg.t[last];
  int64_t within = 1;
  for (size_t l = 0; l < o.machines.size(); ++l) {
    double m = static_cast<double>(o.machines[l]);
    d = (d + (4 * (m - 1) * seg.w[last]) / (o.bandwidths[l] * m) / static_cast<double>(within)) / m;
    within = o.machines[l];
  }
  return d;
}

// Fills the result's stages (each layer in the first stage whose state
// includes it), machine count and configuration string.
void AssignLayers(const Profile& profile, const LayerDag& g, const AntichainStates& st, const Segments& seg,
                  const std::vector<StateRange>& segs, PipeDreamResult* r) {
  const int n = static_cast<int>(profile.layers.size());
  std::vector<char> assigned(static_cast<size_t>(n), 0);
  for (int v = 0; v < n; ++v)
    if (!g.alive[static_cast<size_t>(v)]) assigned[static_cast<size_t>(v)] = 1;
  for (const auto& sg : segs) {
    PipeDreamStage ps;
    ps.first_state = sg.start;
    ps.end_state = sg.end;
    ps.replicas = sg.replication;
    ps.devices = sg.units;
    ps.compute_s = seg.Get(seg.t, sg.start, sg.end - 1);
    for (int v = 0; v < n; ++v) {
      if (assigned[static_cast<size_t>(v)] || !st.members[static_cast<size_t>(sg.end - 1)][static_cast<size_t>(v)])
        continue;
      assigned[static_cast<size_t>(v)] = 1;
      ps.layers.push_back(profile.layers[static_cast<size_t>(v)].name);
    }
    r->machines_used += ps.replicas;
    if (!r->config.empty()) r->config += '-';
    r->config += std::to_string(ps.replicas);
    r->stages.push_back(std::move(ps));
  }
}

}  // namespace

Status SolvePipeDream(const Profile& profile, const PipeDreamOptions& o, PipeDreamResult* out) {
  PLANNER_RETURN_IF_ERROR(ValidateOptions(o));
  // Every layer is at least one antichain state; past this many the tables below would be refused anyway.
  if (profile.layers.size() > kMaxPipeDreamLayers) {
    return Status::InvalidArgument(
        fmt::format("pipedream mode: {} layers is more than the {} PipeDream's optimizer is run for; use --mode auto "
                    "or merge layers",
                    profile.layers.size(), kMaxPipeDreamLayers));
  }
  LayerDag g;
  PLANNER_RETURN_IF_ERROR(BuildLayerDag(profile, &g));
  AntichainStates st;
  PLANNER_RETURN_IF_ERROR(BuildAntichainStates(g.inputs, g.alive, g.start, /*max_states=*/20000, &st));
  const Segments seg = BuildSegments(profile, st);
  const int64_t S = seg.s;
  // The DP's tables hold (S + 1) x S entries per machine count, and each entry tries every split
  // of its machines: both bounded before anything is allocated.
  const double max_m = static_cast<double>(*std::max_element(o.machines.begin(), o.machines.end()));
  const double entries = static_cast<double>(S + 1) * static_cast<double>(S) * max_m;
  if (entries > kMaxPipeDreamEntries || entries * max_m > kMaxPipeDreamWork) {
    return Status::InvalidArgument(fmt::format(
        "pipedream mode: {} antichain states x {} machines needs {:.3g} table entries, more than the {:.3g} "
        "this planner allocates (or as many split trials); use fewer machines per level (--pd-machines) or --mode auto",
        S, *std::max_element(o.machines.begin(), o.machines.end()), entries, kMaxPipeDreamEntries));
  }
  const std::vector<Table> tables = SolveLevels(seg, st, o);
  const Entry& top = tables.back().at(0, S - 1, o.machines.back() - 1);
  if (IsNone(top.value)) {
    return Status::Infeasible(
        fmt::format("no PipeDream configuration fits: every stage needs more than the {:.3g} bytes "
                    "of memory per machine (-s); raise it or drop --use-memory-constraint",
                    o.memory_bytes));
  }
  std::vector<StateRange> segs;
  PLANNER_RETURN_IF_ERROR(FlattenStages(tables, o, S, &segs));
  PipeDreamResult r;
  r.objective_s = top.value;
  r.num_states = S;
  r.single_machine_s = seg.t[static_cast<size_t>(S - 1)];
  r.data_parallel_s = DataParallelSeconds(seg, o);
  AssignLayers(profile, g, st, seg, segs, &r);
  *out = std::move(r);
  return Status::OK();
}

}  // namespace planner
