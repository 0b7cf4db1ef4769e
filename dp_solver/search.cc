#include "dp_solver/search.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/parallel.h"
#include "dp_solver/candidates.h"
#include "dp_solver/dp_comm_cost.h"
#include "dp_solver/evaluate.h"
#include "dp_solver/rank.h"
#include "dp_solver/replicated_dp.h"

namespace planner {

namespace {

// The parts of BalancedPartition at its largest part `limit`: many partitions share it (a heavy unit, the lm_head
// and loss, sets it), and the greedy one packs the front parts to the limit and leaves single units behind.
// Instead each part ends where the prefix time is closest to its share of the whole, (j + 1) T / k, among the ends
// that keep it within the limit and leave a rest the remaining parts can cover (parts[u]: the fewest parts covering
// units [u, units) within the limit, greedy from u, which is optimal; reach[u]: the furthest end of a part starting
// at u). O(units + k log units). `at`: the cut points (units + 1 of them, from 0 to the table's rows).
std::vector<int64_t> EqualizedCuts(const CostTable& t, int64_t k, const std::vector<int64_t>& at, double limit) {
  auto cut = [&](int64_t i) { return at[static_cast<size_t>(i)]; };
  auto time_to = [&](int64_t u) { return t.Time(0, cut(u)); };
  const int64_t units = static_cast<int64_t>(at.size()) - 1;
  const auto U = static_cast<size_t>(units);
  std::vector<int64_t> reach(U + 1, units), parts(U + 1, 0);
  for (int64_t u = 0, v = 1; u < units; ++u) {
    v = std::max(v, u + 1);
    while (v < units && t.Time(cut(u), cut(v + 1)) <= limit) ++v;
    reach[static_cast<size_t>(u)] = v;
  }
  for (int64_t u = units - 1; u >= 0; --u)
    parts[static_cast<size_t>(u)] = 1 + parts[static_cast<size_t>(reach[static_cast<size_t>(u)])];
  // The first u in [l, h] with pred(u) (pred false then true over the range), h when none.
  auto first = [](int64_t l, int64_t h, const auto& pred) {
    while (l < h) {
      const int64_t mid = (l + h) / 2;
      if (pred(mid)) h = mid;
      else l = mid + 1;
    }
    return l;
  };
  std::vector<int64_t> cuts = {0};
  int64_t pos = 0;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t rest = k - j - 1;
    const int64_t hi = j == k - 1 ? units : std::min(reach[static_cast<size_t>(pos)], units - rest);
    const int64_t lo =
        j == k - 1 ? units : first(pos + 1, hi, [&](int64_t u) { return parts[static_cast<size_t>(u)] <= rest; });
    const double target = t.Time(0, cut(units)) * static_cast<double>(j + 1) / static_cast<double>(k);
    const int64_t past = first(lo, hi, [&](int64_t u) { return time_to(u) >= target; });
    int64_t best = past;
    if (past > lo && std::abs(time_to(past - 1) - target) < std::abs(time_to(past) - target)) best = past - 1;
    cuts.push_back(cut(best));
    pos = best;
  }
  return cuts;
}

}  // namespace

std::vector<int64_t> BalancedPartition(const CostTable& t, int64_t k, std::vector<int64_t> at) {
  const int64_t n = static_cast<int64_t>(t.rows.size());
  if (at.empty()) {
    for (int64_t i = 0; i <= n; ++i) at.push_back(i);
  }
  const int64_t units = static_cast<int64_t>(at.size()) - 1;
  auto cut = [&](int64_t i) { return at[static_cast<size_t>(i)]; };
  if (k < 1 || k > units) return {};
  // Greedy feasibility over the units between cut points: each part extends while it stays within the limit.
  auto greedy = [&](double limit) {
    int64_t pos = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t end = pos + 1;
      if (j == k - 1) {
        end = units;
      } else {
        while (end < units - (k - j - 1) && t.Time(cut(pos), cut(end + 1)) <= limit) ++end;
      }
      if (t.Time(cut(pos), cut(end)) > limit) return false;
      pos = end;
    }
    return true;
  };
  double lo = 0, hi = t.Time(0, n);
  for (int64_t i = 0; i < units; ++i) lo = std::max(lo, t.Time(cut(i), cut(i + 1)));
  if (greedy(lo)) return EqualizedCuts(t, k, at, lo);
  for (int it = 0; it < 100 && hi - lo > 1e-13 * hi; ++it) {
    double mid = 0.5 * (lo + hi);
    if (greedy(mid)) hi = mid;
    else lo = mid;
  }
  return EqualizedCuts(t, k, at, hi);
}

namespace {

std::vector<std::string> NamesOf(const std::vector<DpComm>& v) {
  std::vector<std::string> out;
  for (DpComm d : v) out.push_back(DpCommName(d));
  return out;
}

std::string JoinValues(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

// --ep / --etp against the model and the GPUs: a dense model takes only 1; ep divides the experts;
// some forced ep x etp divides the GPUs of a pipeline stage (gpus / pp). InvalidArgument naming the fix.
Status CheckExpertFlags(const CostSource& src, const SearchOptions& o) {
  for (int64_t v : o.ep) {
    if (v < 1) return Status::InvalidArgument(fmt::format("--ep {}: expert-parallel sizes start at 1", v));
  }
  for (int64_t v : o.etp) {
    if (v < 0) return Status::InvalidArgument(fmt::format("--etp {}: expert tensor-parallel sizes start at 1", v));
  }
  const int64_t experts = ModelExperts(src.profile == nullptr ? src.model : nullptr);
  const bool forced = std::any_of(o.ep.begin(), o.ep.end(), [](int64_t v) { return v > 1; }) ||
                      std::any_of(o.etp.begin(), o.etp.end(), [](int64_t v) { return v > 1; });
  if (experts == 0) {
    if (!forced) return Status::OK();
    return Status::InvalidArgument(
        fmt::format("--ep {} --etp {}: {} has no MoE layers (no experts to split); drop --ep / --etp",
                    o.ep.empty() ? "1" : JoinValues(o.ep), o.etp.empty() ? "1" : JoinValues(o.etp),
                    src.model != nullptr && src.profile == nullptr ? src.model->name : "a measured profile"));
  }
  const bool sp_off =
      !o.sequence_parallel.empty() &&
      std::none_of(o.sequence_parallel.begin(), o.sequence_parallel.end(), [](int v) { return v != 0; });
  if (sp_off && !o.tp.empty() && std::all_of(o.tp.begin(), o.tp.end(), [](int64_t t) { return t > 1; })) {
    return Status::InvalidArgument(
        fmt::format("--sp off with --tp {}: Megatron-Core's MoE layers need sequence parallelism with tp > 1; use --sp "
                    "on or --tp 1",
                    JoinValues(o.tp)));
  }
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d <= experts; ++d)
    if (experts % d == 0) divisors.push_back(d);
  for (int64_t v : o.ep) {
    if (experts % v != 0) {
      return Status::InvalidArgument(
          fmt::format("--ep {}: does not divide the {} experts of {}; choose a divisor of {} ({})", v, experts,
                      src.model->name, experts, JoinValues(divisors)));
    }
  }
  if (o.ep.empty()) return Status::OK();
  const std::vector<int64_t> etps = o.etp.empty() ? std::vector<int64_t>{1} : o.etp,
                             pps = o.pp.empty() ? std::vector<int64_t>{1} : o.pp;
  for (int64_t ep : o.ep)
    for (int64_t etp : etps)
      for (int64_t p : pps)
        if (o.gpus % p == 0 && (o.gpus / p) % (ep * std::max<int64_t>(1, etp)) == 0) return Status::OK();
  return Status::InvalidArgument(fmt::format(
      "--ep {}{}: ep x etp divides no stage's GPUs (--gpus {}{}): Megatron-Core folds the expert groups out of "
      "a pipeline stage's tp x cp x dp GPUs; choose --ep (x --etp) dividing {}",
      JoinValues(o.ep), o.etp.empty() ? "" : " --etp " + JoinValues(o.etp), o.gpus,
      o.pp.empty() ? "" : " / --pp " + JoinValues(o.pp),
      o.pp.size() == 1 ? o.gpus / std::max<int64_t>(1, o.pp[0]) : o.gpus));
}

// What the search cannot serve, before any candidate: InvalidArgument naming
// the flag or file and the fix.
// --recompute-modules: with selective recompute among those tried, on an analytic model, mla_up_proj
// only with MLA (Megatron-Core raises "mla_up_proj in recompute_modules is only supported with
// multi_latent_attention"); the MoE modules on a dense model change nothing, as in Megatron-Core.
Status CheckRecomputeModules(const CostSource& src, const SearchOptions& o) {
  if (o.recompute_modules == 0) return Status::OK();
  const std::string flag =
      fmt::format("--recompute-modules {}", fmt::join(RecomputeModuleList(o.recompute_modules), ","));
  if (!o.recompute.empty() &&
      std::find(o.recompute.begin(), o.recompute.end(), Recompute::kSelective) == o.recompute.end()) {
    return Status::InvalidArgument(fmt::format(
        "{}: the modules are selective recompute's, which --recompute leaves out; add --recompute selective", flag));
  }
  if (src.profile != nullptr || src.model == nullptr) {
    return Status::InvalidArgument(
        fmt::format("{}: a measured profile has no per-module costs; plan with --model", flag));
  }
  if (HasRecomputeModule(o.recompute_modules, RecomputeModule::kMlaUpProj) &&
      !HasRecomputeModule(ApplicableRecomputeModules(src.model), RecomputeModule::kMlaUpProj)) {
    return Status::InvalidArgument(
        fmt::format("{}: mla_up_proj recomputes multi-latent attention's up projections and model '{}' has no MLA "
                    "(Megatron-Core refuses it too); drop mla_up_proj",
                    flag, src.model->name));
  }
  return Status::OK();
}

// --dp-comm and --ps-servers against the cluster's CPU machines (docs/cost_model.md, "Data-parallel
// communication architectures"): ps / byteps need cpu_machines; ps at least one server; no more
// servers than the cluster declares.
Status CheckDpComm(const ClusterSpec& c, const SearchOptions& o) {
  const int64_t machines = c.cpu_machines.count;
  const std::vector<DpComm> tried = o.dp_comms.empty() ? DefaultDpComms(c) : o.dp_comms;
  if ((o.ps_placement_named || o.ps_colocated) &&
      std::find(tried.begin(), tried.end(), DpComm::kParameterServer) == tried.end()) {
    return Status::InvalidArgument(fmt::format(
        "--ps-placement: ps is not among the architectures tried ({}); add ps to --dp-comm or drop --ps-placement",
        fmt::join(NamesOf(tried), ",")));
  }
  for (DpComm d : o.dp_comms) {
    if (DpCommUsesServers(d) && machines < 1 && !(d == DpComm::kParameterServer && o.ps_colocated)) {
      return Status::InvalidArgument(fmt::format(
          "--dp-comm {}: {} declares no CPU machines to sum on; add 'cpu_machines: {{count, bandwidth_GBps, "
          "sum_GBps}}' "
          "to it{} or choose allreduce-ring, allreduce-tree or allreduce-hier",
          DpCommName(d), c.path,
          d == DpComm::kParameterServer ? ", add --ps-placement colocated (a server on every GPU machine)" : ""));
    }
  }
  const bool servers_only =
      !o.dp_comms.empty() && std::none_of(o.dp_comms.begin(), o.dp_comms.end(), DpCommIsAllReduce);
  if (servers_only && !o.zero.empty() && std::find(o.zero.begin(), o.zero.end(), 0) == o.zero.end()) {
    return Status::InvalidArgument(
        fmt::format("--dp-comm {} with --zero {}: ps and byteps synchronise ZeRO-0 gradients only; add --zero 0 or an "
                    "all-reduce (--dp-comm allreduce-hier)",
                    DpCommName(o.dp_comms[0]), JoinValues(o.zero)));
  }
  if (o.ps_servers < 0) return Status::OK();
  if (o.ps_servers > 0 && machines < 1) {
    return Status::InvalidArgument(fmt::format(
        "--ps-servers {}: {} declares no CPU machines; add 'cpu_machines: {{count, bandwidth_GBps, sum_GBps}}' "
        "to it or drop --ps-servers",
        o.ps_servers, c.path));
  }
  if (o.ps_servers > machines) {
    return Status::InvalidArgument(
        fmt::format("--ps-servers {}: {} declares {} CPU machine(s); give at most {} (the default is all of them)",
                    o.ps_servers, c.path, machines, machines));
  }
  const bool ps = std::find(o.dp_comms.begin(), o.dp_comms.end(), DpComm::kParameterServer) != o.dp_comms.end();
  if (o.ps_servers == 0 && ps && !o.ps_colocated) {  // without --dp-comm, --ps-servers 0 leaves ps out of the defaults
    return Status::InvalidArgument(
        "--ps-servers 0: a parameter server (ps) needs at least 1 server; give --ps-servers 1 or more, "
        "or --dp-comm byteps (0 servers is its all-reduce split)");
  }
  return Status::OK();
}

Status CheckRequest(const CostSource& src, const SearchOptions& o, int64_t* batch) {
  if (src.cluster == nullptr) return Status::InvalidArgument("the search needs a cluster (--cluster)");
  if (src.model == nullptr && src.profile == nullptr)
    return Status::InvalidArgument("the search needs a model (--model) or a profile (--profile)");
  const ClusterSpec& c = *src.cluster;
  if (c.levels.empty())
    return Status::InvalidArgument(fmt::format(
        "{}: the cluster has no topology; add 'topology:' with one entry per level, innermost first", c.path));
  const int64_t n = o.gpus;
  if (n < 1) return Status::InvalidArgument("--gpus must be at least 1");
  if (n > c.TotalGpus()) {
    return Status::InvalidArgument(
        fmt::format("{}: the cluster holds {} GPUs but --gpus is {}; lower --gpus or add topology levels", c.path,
                    c.TotalGpus(), n));
  }
  if (o.top_k < 1) return Status::InvalidArgument(fmt::format("--top {}: rank at least 1 plan", o.top_k));
  for (const auto& [flag, values] : {std::pair{"--tp", &o.tp},
                                     {"--pp", &o.pp},
                                     {"--microbatch", &o.microbatch},
                                     {"--replication", &o.replication}}) {
    for (int64_t v : *values) {
      if (v < 1) return Status::InvalidArgument(fmt::format("{} {}: every value must be at least 1", flag, v));
    }
  }
  const bool pipedream_named =
      std::find(o.schedules.begin(), o.schedules.end(), Schedule::kPipeDream) != o.schedules.end();
  if ((pipedream_named || !o.replication.empty()) && CostSourceLayers(src) > kMaxReplicatedLayers) {
    return Status::InvalidArgument(fmt::format(
        "{}: per-stage replication (PipeDream's schedule) is searched for models of at most {} layers, "
        "this one has {}; drop it or merge layers",
        pipedream_named ? "--schedule pipedream" : "--replication", kMaxReplicatedLayers, CostSourceLayers(src)));
  }
  *batch = o.global_batch > 0 ? o.global_batch : (src.model ? src.model->global_batch : 0);
  if (*batch < 1) return Status::InvalidArgument("the global batch is unknown; pass --global-batch");
  PLANNER_RETURN_IF_ERROR(CheckExpertFlags(src, o));
  PLANNER_RETURN_IF_ERROR(CheckRecomputeModules(src, o));
  PLANNER_RETURN_IF_ERROR(CheckDpComm(c, o));
  return CheckCostSource(src);
}

// The (cp, sp) pairs tried at tensor-parallel degree t: sp only changes anything at t > 1.
std::vector<std::pair<int64_t, bool>> SequenceSplits(const CostSource& src, const SearchSpace& sp, int64_t t,
                                                     Ranking* rank) {
  std::vector<std::pair<int64_t, bool>> out;
  for (int64_t cp : sp.cp) {
    std::string rejected = CpRejection(sp, src, cp);
    if (!rejected.empty()) {
      if (rank->rejections().cp.empty()) rank->rejections().cp = std::move(rejected);
      continue;
    }
    bool off = false, on = false;
    for (int s : sp.sp) (s != 0 && t > 1 ? on : off) = true;
    if (off && t > 1 && sp.experts > 0) {  // Megatron-Core's MoE layers assert sequence parallelism with TP
      if (rank->rejections().tp.empty())
        rank->rejections().tp =
            fmt::format("tp={} without sequence parallelism: MoE layers need --sp on with tp > 1", t);
      off = false;
    }
    if (off) out.emplace_back(cp, false);
    if (on) out.emplace_back(cp, true);
  }
  return out;
}

// The tables at one (tp, cp, sp, ep, etp): one per microbatch and recompute. A table the inputs
// cannot cost is an error when --tp asked for its tp, else noted in *first_error.
Status BuildTablesAt(const CostSource& src, const SearchSpace& sp, const SearchOptions& o, TableShape shape,
                     Evaluator* ev, Status* first_error) {
  for (int64_t b : sp.microbatch) {
    for (Recompute rc : sp.recompute) {
      const size_t sets = rc == Recompute::kSelective ? sp.selective_modules.size() : 1;
      for (size_t mi = 0; mi < sets; ++mi) {
        shape.microbatch = b;
        shape.recompute = rc;
        shape.recompute_modules = rc == Recompute::kSelective ? sp.selective_modules[mi] : kDefaultRecomputeModules;
        CostTable table;
        Status s = BuildCostTable(src, shape, o.cost, &table);
        if (s.ok()) {
          ev->AddTable(std::move(table));
          continue;
        }
        if (!o.tp.empty()) return s;  // a tp asked for
        if (first_error->ok()) *first_error = s;
      }
    }
  }
  return Status::OK();
}

// One cost table per admissible (tp, cp, sp, ep, etp, microbatch, recompute), in that order.
// A table the inputs cannot cost (a profile without timings at a tp) is an
// error when --tp asked for that tp or when no table can be costed; else the
// search goes on without it (the cause is named if no plan is found).
Status BuildCostTables(const CostSource& src, const SearchSpace& sp, const SearchOptions& o, Evaluator* ev,
                       Ranking* rank) {
  Status first_error = Status::OK();
  for (int64_t t : sp.tp) {
    std::string rejected = TpRejection(sp, src.model, t);
    if (!rejected.empty()) {
      if (rank->rejections().tp.empty()) rank->rejections().tp = std::move(rejected);
      continue;
    }
    for (const auto& [cp, seq_par] : SequenceSplits(src, sp, t, rank)) {
      for (const auto& [ep, etp] : ExpertSplits(sp, t)) {
        std::string ep_rejected = EpRejection(sp, src.model, ep, etp);
        if (!ep_rejected.empty()) {
          if (rank->rejections().ep.empty()) rank->rejections().ep = std::move(ep_rejected);
          continue;
        }
        PLANNER_RETURN_IF_ERROR(
            BuildTablesAt(src, sp, o, TableShape{1, t, cp, seq_par, Recompute::kNone, ep, etp}, ev, &first_error));
      }
    }
  }
  if (!first_error.ok() && ev->tables().empty()) return first_error;
  rank->Dropped(first_error);
  return Status::OK();
}

// The recompute-full table of table ti's (tp, cp, sp, microbatch); -1: none built.
int64_t FullTableOf(const std::vector<CostTable>& tables, size_t ti) {
  const CostTable& a = tables[ti];
  for (size_t j = 0; j < tables.size(); ++j) {
    const CostTable& f = tables[j];
    if (f.recompute == Recompute::kFull && f.tp == a.tp && f.cp == a.cp && f.sp == a.sp &&
        f.microbatch == a.microbatch && f.ep == a.ep && f.etp == a.etp) {
      return static_cast<int64_t>(j);
    }
  }
  return -1;
}

// Block recompute of a recompute-none candidate k (evaluated in *x): the smallest N >= 1 blocks per
// chunk that fits. Memory does not grow with N (a recomputed block keeps only its input), so a
// binary search over N in [1, the largest chunk's blocks, less one when full recompute is ranked
// itself]. False (*k unchanged in its table) when no N fits.
Status SmallestBlockRecompute(const SearchSpace& sp, size_t full_table, Evaluator* ev, Candidate* k, Evaluation* x,
                              bool* found) {
  *found = false;
  const std::vector<int64_t> cuts = *x->cuts;
  int64_t most = 0;
  for (size_t q = 0; q + 1 < cuts.size(); ++q) {
    const int64_t lo = std::max<int64_t>(cuts[q], 1), hi = std::min<int64_t>(cuts[q + 1], 1 + sp.blocks);
    most = std::max<int64_t>(most, hi - lo);
  }
  const bool full_ranked = std::find(sp.ranked.begin(), sp.ranked.end(), Recompute::kFull) != sp.ranked.end();
  int64_t lo = 1, hi = most - (full_ranked ? 1 : 0);
  if (hi < lo) return Status::OK();
  Candidate b = *k;
  b.recompute = Recompute::kFull;
  b.full_table = full_table;
  auto fits = [&](int64_t n) {
    b.recompute_num_layers = n;
    Status s = ev->Evaluate(b, x);
    return s.ok() ? Status(x->zero >= 0 ? Status::OK() : Status::Infeasible("")) : s;
  };
  Status s = fits(hi);
  if (s.code() == StatusCode::kInternal) return s;
  if (!s.ok()) return Status::OK();
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    s = fits(mid);
    if (s.code() == StatusCode::kInternal) return s;
    if (s.ok()) hi = mid;
    else lo = mid + 1;
  }
  PLANNER_RETURN_IF_ERROR(fits(lo));
  *k = b;
  *found = true;
  return Status::OK();
}

// The evaluators of SearchOptions::threads: the search's own (worker 0) and one copy per further
// thread, made once the cost tables are built. Evaluations are pure functions of the candidate (the
// caches only memoise), so any worker's result is the one the search's own evaluator would give.
class EvaluatorPool {
 public:
  // At most as many threads as the machine runs at once: a copy holds every cost table.
  EvaluatorPool(Evaluator* own, int threads)
      : own_(own), copies_(static_cast<size_t>(std::clamp(threads, 1, MaxThreads()) - 1), *own) {}
  static int MaxThreads() {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : static_cast<int>(std::min(n, 256u));
  }
  int size() const { return static_cast<int>(copies_.size()) + 1; }
  Evaluator* at(int worker) { return worker == 0 ? own_ : &copies_[static_cast<size_t>(worker - 1)]; }

 private:
  Evaluator* own_;
  std::vector<Evaluator> copies_;
};

// One table's share of phase 1: its candidates in order, what its misfits and rejections say (a
// Ranking::Fresh, absorbed in table order), the candidates it considered and its first error.
struct TableScan {
  explicit TableScan(Ranking r) : rank(std::move(r)) {}
  std::vector<Candidate> cands;
  Ranking rank;
  int64_t considered = 0;
  Status status = Status::OK();
};

// Phase 1 over table ti: each candidate with its memory settled and a lower bound on its iteration
// time (cheap: no simulation). Candidates with no ZeRO stage that fits go to the ranking's binding
// constraint. A recompute-none candidate that does not fit (or is not ranked itself) also gives its
// block-recompute one.
Status ScanTable(const SearchSpace& sp, const SearchOptions& o, size_t ti, Evaluator* ev, TableScan* out) {
  const bool forced_replication = !o.replication.empty();  // the uniform family is not ranked
  const Recompute rc = ev->tables()[ti].recompute;
  const bool ranked = std::find(sp.ranked.begin(), sp.ranked.end(), rc) != sp.ranked.end();
  const int64_t full = sp.block && rc == Recompute::kNone ? FullTableOf(ev->tables(), ti) : -1;
  if (!ranked && full < 0) return Status::OK();
  Rejections unused;
  Rejections* why = forced_replication ? &unused : &out->rank.rejections();
  Evaluation x;
  for (Candidate k : UniformCandidates(sp, o, ti, ev->tables()[ti], why)) {
    ++out->considered;
    PLANNER_RETURN_IF_ERROR(ev->Evaluate(k, &x));
    const bool fits = x.zero >= 0;
    if (fits && ranked) out->rank.Fits(rc, ev->tables()[ti].recompute_modules);
    if (ranked && !fits && !forced_replication) out->rank.NoFit(k, x, ev->state_bytes().usable);
    if (ranked && fits) {
      k.bound = IterationLowerBound(k, x);
      out->cands.push_back(k);
    }
    // Block recompute is full recompute of N blocks: no EP overlap with it (MoeOverlapRuns).
    if (full < 0 || (fits && ranked) || (o.cost.moe_overlap && k.ep > 1)) continue;
    bool found = false;
    PLANNER_RETURN_IF_ERROR(SmallestBlockRecompute(sp, static_cast<size_t>(full), ev, &k, &x, &found));
    if (!found) continue;
    k.bound = IterationLowerBound(k, x);
    out->cands.push_back(k);
  }
  return Status::OK();
}

// Phase 1: the uniform family, table by table (in parallel over the pool's workers), combined in
// table order as one thread would have produced it.
Status EnumerateUniform(const SearchSpace& sp, const SearchOptions& o, EvaluatorPool* pool, Ranking* rank,
                        std::vector<Candidate>* out, SearchStats* stats) {
  const size_t n = pool->at(0)->tables().size();
  std::vector<TableScan> scans;
  scans.reserve(n);
  for (size_t ti = 0; ti < n; ++ti) scans.emplace_back(rank->Fresh());
  ParallelFor(static_cast<int64_t>(n), pool->size(), [&](int64_t ti, int worker) {
    TableScan& scan = scans[static_cast<size_t>(ti)];
    scan.status = ScanTable(sp, o, static_cast<size_t>(ti), pool->at(worker), &scan);
  });
  for (TableScan& scan : scans) {
    stats->considered += scan.considered;
    rank->Absorb(std::move(scan.rank));
    PLANNER_RETURN_IF_ERROR(scan.status);
    out->insert(out->end(), scan.cands.begin(), scan.cands.end());
  }
  return Status::OK();
}

// One simulated candidate of phase 2: its error, iteration time, and plan when it may rank.
struct Simulated {
  Status status = Status::OK();
  double iteration_s = 0;
  bool cut = false;          // stopped past the cutoff (SimResult::cut)
  bool closed_form = false;  // timed by UniformMakespan
  std::optional<Plan> plan;
};

constexpr double kNoCutoff = std::numeric_limits<double>::infinity();

// The makespan above which a candidate's iteration (makespan + data-parallel + optimizer seconds) reaches
// `worst`, the k-th best kept when its window began, which only falls later: a simulation stopped there is
// a plan that one thread would simulate whole and not keep.
double CutoffFor(double worst, const Evaluation& x) {
  if (!(worst < kNoCutoff)) return kNoCutoff;
  const double cutoff = worst - x.dp_s - x.optimizer_s;
  return cutoff > 0 ? cutoff : kNoCutoff;
}

// Phase 2: best first. Simulate in increasing lower bound and stop once the bound cannot beat the
// k-th best plan (SearchOptions::exhaustive: simulate all). With several workers, windows of
// candidates below the current k-th best are simulated in parallel, then ranked in order exactly as
// one thread would (a candidate past the point one thread would stop at is simulated but not counted).
Status SimulateBestFirst(std::vector<Candidate>& cands, const SearchOptions& o, EvaluatorPool* pool, Ranking* rank,
                         SearchStats* stats) {
  std::stable_sort(cands.begin(), cands.end(),
                   [](const Candidate& a, const Candidate& b) { return a.bound < b.bound; });
  const size_t window = pool->size() <= 1 ? 1 : 4 * static_cast<size_t>(pool->size());
  std::vector<Evaluation> xs(static_cast<size_t>(pool->size()));
  for (size_t i = 0; i < cands.size();) {
    const double worst = rank->WorstKept();
    size_t end = i;
    while (end < cands.size() && end - i < window && (o.exhaustive || cands[end].bound < worst)) ++end;
    std::vector<Simulated> sims(end - i);
    ParallelFor(static_cast<int64_t>(end - i), pool->size(), [&](int64_t j, int worker) {
      const Candidate& k = cands[i + static_cast<size_t>(j)];
      Evaluator* ev = pool->at(worker);
      Evaluation& x = xs[static_cast<size_t>(worker)];
      Simulated& r = sims[static_cast<size_t>(j)];
      SimResult res;
      r.status = ev->Evaluate(k, &x);
      if (r.status.ok()) r.status = ev->Simulate(k, x, &res, o.exhaustive ? kNoCutoff : CutoffFor(worst, x));
      if (!r.status.ok()) return;
      r.cut = res.cut;
      r.closed_form = res.closed_form;
      // A cut simulation's makespan is a bound above the cutoff: the plan cannot rank (not kept below).
      r.iteration_s = res.cut ? kNoCutoff : res.makespan_s + x.dp_s + x.optimizer_s;
      // Not `< worst`: a NaN time, which one thread would keep, must have its plan too.
      if (o.exhaustive || !(r.iteration_s >= worst)) r.plan = ev->UniformPlan(k, x, res);
    });
    for (size_t j = 0; j < sims.size(); ++j) {
      if (!o.exhaustive && cands[i + j].bound >= rank->WorstKept()) return Status::OK();
      PLANNER_RETURN_IF_ERROR(sims[j].status);
      ++stats->simulated;
      stats->closed_form += sims[j].closed_form ? 1 : 0;
      stats->cut += sims[j].cut ? 1 : 0;
      if (sims[j].iteration_s >= rank->WorstKept() && !o.exhaustive) continue;
      rank->Keep(std::move(*sims[j].plan));
    }
    if (end == i) break;  // the next candidate's bound reaches the k-th best
    i = end;
  }
  return Status::OK();
}

// A forced --replication that does not fit tp's worker count (or the layers).
Status ReplicationMismatch(const std::vector<int64_t>& forced, int64_t t, int64_t workers, size_t layers) {
  std::string vec;
  int64_t sum = 0;
  for (int64_t r : forced) {
    if (!vec.empty()) vec += '-';
    vec += std::to_string(r);
    sum += r;
  }
  if (forced.size() > layers) {
    return Status::InvalidArgument(
        fmt::format("--replication {}: {} stages but the model has {} layers; give at most {} stages", vec,
                    forced.size(), layers, layers));
  }
  return Status::InvalidArgument(
      fmt::format("--replication {}: the replicas sum to {} TP groups but tp={} makes {}; "
                  "give replicas that sum to {} or pass the --tp that makes {} groups",
                  vec, sum, t, workers, workers, sum));
}

// One run of the per-stage replication DP over `table` with options `ro`; its plan kept when it ranks.
Status SolveReplicatedWith(const CostSource& src, const SearchSpace& sp, const SearchOptions& o, const Evaluator& ev,
                           const CostTable& table, const ReplicatedOptions& ro, Ranking* rank, SearchStats* stats) {
  const int64_t t = table.tp, b = table.microbatch, workers = sp.gpus / t;
  ReplicatedResult rr;
  ++stats->considered;
  Status s = SolveReplicated(table, *src.cluster, ro, &rr);
  if (s.code() == StatusCode::kInvalidArgument) {
    if (o.replication.empty()) return Status::Internal(s.message());  // the search's own options: a bug
    rank->Dropped(ReplicationMismatch(o.replication, t, workers, table.rows.size()));
    return Status::OK();
  }
  if (!s.ok()) {
    rank->Dropped(s.WithContext(fmt::format("per-stage replication at tp={} microbatch={}", t, b)));
    return Status::OK();
  }
  if (rr.stages.size() < 2 && o.replication.empty()) return Status::OK();  // plain data parallelism, already ranked
  if (static_cast<double>(sp.global_batch / b) * rr.bottleneck_s >= rank->WorstKept()) return Status::OK();
  rank->Keep(ev.ReplicatedPlan(table, ro, rr));
  return Status::OK();
}

// Phase 3: the per-stage replication family (PipeDream's "2-1-1") over every
// table without recompute (PipeDream has none), run with PipeDream's
// asynchronous 1F1B, at cp = 1 and only when --zero allows ZeRO-0. A forced --replication that does not match a table's
// worker count skips it; memory that does not fit drops it.
Status SearchReplicated(const CostSource& src, const SearchSpace& sp, const SearchOptions& o, const Evaluator& ev,
                        Ranking* rank, SearchStats* stats) {
  if (!o.zero.empty() && std::find(o.zero.begin(), o.zero.end(), 0) == o.zero.end())
    return Status::OK();  // PipeDream runs no ZeRO
  for (const CostTable& table : ev.tables()) {
    if (table.recompute != Recompute::kNone || table.cp != 1 || table.ep != 1 || table.etp != 1)
      continue;  // no CP, no EP in PipeDream's family
    if (std::find(sp.ranked.begin(), sp.ranked.end(), Recompute::kNone) == sp.ranked.end())
      continue;  // built for block recompute only
    const int64_t t = table.tp, b = table.microbatch, workers = sp.gpus / t;
    if (sp.global_batch % b != 0 || workers < 2) continue;
    // The DP is quadratic in layers x workers: a deep model on many workers is left out unless asked for.
    const int64_t layers = static_cast<int64_t>(table.rows.size());
    const bool asked = !o.replication.empty() || !o.schedules.empty();
    if (!asked && layers > 256 && layers * workers > kMaxReplicatedLayerWorkers) continue;
    // PipeDream's hier all-reduce, or each architecture --dp-comm names (one per plan).
    for (DpComm d : o.dp_comms.empty() ? std::vector<DpComm>{DpComm::kHierAllReduce} : o.dp_comms) {
      ReplicatedOptions ro = ev.ReplicatedOptionsFor(table);
      ro.dp_comm = d;
      PLANNER_RETURN_IF_ERROR(SolveReplicatedWith(src, sp, o, ev, table, ro, rank, stats));
    }
  }
  return Status::OK();
}

}  // namespace

namespace {

// One search; `extra_modules` (non-zero) adds selective tables with that module set besides the
// default's (SearchSpace::selective_modules).
Status SearchOnce(const CostSource& src, const SearchOptions& o, uint32_t extra_modules, Plan* out, SearchStats* stats,
                  bool* other_fits = nullptr) {
  int64_t batch = 0;
  PLANNER_RETURN_IF_ERROR(CheckRequest(src, o, &batch));
  SearchSpace space = MakeSearchSpace(src, o, batch);
  if (extra_modules != 0) space.selective_modules.push_back(extra_modules);
  Evaluator ev(src, o, batch);
  Ranking rank(o.top_k);
  rank.Watch(extra_modules);

  // The layer costs at every (tp, microbatch, recompute) the search tries.
  PLANNER_RETURN_IF_ERROR(BuildCostTables(src, space, o, &ev, &rank));

  // The uniform (Megatron-style) family: enumerate with lower bounds, then
  // simulate best first. A forced per-stage replication ranks no uniform plan.
  EvaluatorPool pool(&ev, o.threads);
  std::vector<Candidate> uniform;
  PLANNER_RETURN_IF_ERROR(EnumerateUniform(space, o, &pool, &rank, &uniform, stats));
  if (!o.replication.empty()) uniform.clear();
  PLANNER_RETURN_IF_ERROR(SimulateBestFirst(uniform, o, &pool, &rank, stats));

  // The per-stage replication family (asynchronous PipeDream schedule).
  if (space.replicated) PLANNER_RETURN_IF_ERROR(SearchReplicated(src, space, o, ev, &rank, stats));

  // The best plan, runners-up and why each lost; or why there is none.
  if (other_fits != nullptr) *other_fits = rank.OtherFits();
  return rank.Finish(o.gpus, batch, out);
}

// DeepSeek-V3's module set (what of it applies) for an MLA / MoE model searched without
// --recompute-modules and with selective recompute among those tried; 0: none to try.
uint32_t SecondPassModules(const CostSource& src, const SearchOptions& o) {
  if (o.recompute_modules != 0 || src.profile != nullptr || src.model == nullptr) return 0;
  if (!o.recompute.empty() &&
      std::find(o.recompute.begin(), o.recompute.end(), Recompute::kSelective) == o.recompute.end())
    return 0;
  if (o.recompute.empty() && o.recompute_block == 1) return 0;  // --recompute block alone
  const uint32_t applicable = ApplicableRecomputeModules(src.model);
  const bool mla_or_moe = HasRecomputeModule(applicable, RecomputeModule::kMlaUpProj) || ModelExperts(src.model) > 0;
  const uint32_t set = kDeepSeekRecomputeModules & applicable;
  return mla_or_moe && (set & ~kDefaultRecomputeModules) != 0 ? set : 0;
}

}  // namespace

// The search; MLA / MoE models are searched with DeepSeek-V3's modules besides core_attn alone, one pass
// over both sets (docs/cost_model.md section 5, "Recompute modules").
Status SolveAuto(const CostSource& src, const SearchOptions& o, Plan* out, SearchStats* stats) {
  SearchStats unused;
  if (stats == nullptr) stats = &unused;
  *stats = SearchStats();
  const uint32_t set = SecondPassModules(src, o);
  if (set == 0) return SearchOnce(src, o, 0, out, stats);
  bool other_fits = false;
  PLANNER_RETURN_IF_ERROR(SearchOnce(src, o, set, out, stats, &other_fits));
  if (out->recompute != Recompute::kSelective || out->recompute_modules != set) return Status::OK();
  // The best plan without the set: the first runner-up that does not use it (the runners-up are the
  // fastest of the whole space).
  std::string versus;
  for (const PlanSummary& r : out->runners_up) {
    if (r.recompute == Recompute::kSelective && r.recompute_modules == set) continue;
    versus = fmt::format("{:.1f}% faster than the best plan with core_attn alone",
                         100 * (r.iteration_s / out->predicted.iteration_s - 1));
    break;
  }
  if (versus.empty())
    versus = other_fits ? fmt::format("the plans with core_attn alone are not among the {} fastest", o.top_k)
                        : std::string("with core_attn alone no plan fits");
  out->notes.push_back(
      fmt::format("selective recompute of {} (DeepSeek-V3's recompute, Megatron --recompute-modules): {}",
                  fmt::join(RecomputeModuleList(set), ", "), versus));
  return Status::OK();
}

}  // namespace planner
