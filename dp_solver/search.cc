#include "dp_solver/search.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "common/units.h"
#include "dp_solver/replicated_dp.h"

namespace planner {

std::vector<int64_t> BalancedPartition(const CostTable& t, int64_t k) {
  const int64_t n = static_cast<int64_t>(t.rows.size());
  std::vector<int64_t> cuts;
  if (k < 1 || k > n) return cuts;
  auto greedy = [&](double limit, std::vector<int64_t>* out) {
    std::vector<int64_t> b = {0};
    int64_t pos = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t end = pos + 1;
      if (j == k - 1) {
        end = n;
      } else {
        while (end < n - (k - j - 1) && t.Time(pos, end + 1) <= limit) ++end;
      }
      if (t.Time(pos, end) > limit) return false;
      b.push_back(end);
      pos = end;
    }
    if (out) *out = b;
    return true;
  };
  double lo = 0, hi = t.Time(0, n);
  for (int64_t i = 0; i < n; ++i) lo = std::max(lo, t.Time(i, i + 1));
  if (greedy(lo, &cuts)) return cuts;
  for (int it = 0; it < 100 && hi - lo > 1e-13 * hi; ++it) {
    double mid = 0.5 * (lo + hi);
    if (greedy(mid, nullptr)) hi = mid;
    else lo = mid;
  }
  greedy(hi, &cuts);
  return cuts;
}

namespace {

struct Scored {
  Plan plan;
  double iteration_s = 0;
};

std::vector<int64_t> Divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i) if (n % i == 0) d.push_back(i);
  return d;
}

// Model-state bytes per parameter on one GPU with ZeRO stage z over d replicas
// (ZeRO section 3; weights w, gradients g, optimizer states os bytes/param).
double StateBytesPerParam(double beta, double w, double os, int64_t z, int64_t d) {
  double g = beta - w - os;
  double dd = static_cast<double>(d);
  switch (z) {
    case 0: return beta;
    case 1: return w + g + os / dd;
    case 2: return w + (g + os) / dd;
    default: return beta / dd;
  }
}

}  // namespace

namespace {

// One point of the uniform (Megatron-style) family.
struct Key {
  size_t table = 0;
  int64_t t = 1, b = 1, p = 1, d = 1, m = 1, v = 1;
  Schedule s = Schedule::k1F1B;
  Recompute rc = Recompute::kNone;
  double bound = 0;  // lower bound on the iteration time
};

// Everything the plan needs about a candidate, short of its simulation.
struct Detail {
  const std::vector<int64_t>* cuts = nullptr;
  std::vector<SimStage> sim;
  std::vector<double> send, dev_params, dev_stash, dev_work, dev_bwd, dev_peak, dev_ar;
  int64_t zero = -1;
  double peak = 0, dp_s = 0, opt_s = 0;
};

struct Ctx {
  const ClusterSpec* c = nullptr;
  const SearchOptions* o = nullptr;
  double w_bytes = 2, os_bytes = 12, beta = 18, usable = 0;
  std::vector<CostTable> tables;
  std::map<std::pair<size_t, int64_t>, std::vector<int64_t>> partitions;

  const std::vector<int64_t>& Partition(size_t table, int64_t k) {
    auto it = partitions.find({table, k});
    if (it == partitions.end()) it = partitions.emplace(std::make_pair(table, k), BalancedPartition(tables[table], k)).first;
    return it->second;
  }

  int64_t InFlight(const Key& k, int64_t r) const {
    switch (k.s) {
      case Schedule::kGpipe: return k.m;
      case Schedule::kInterleaved: return std::min(k.m * k.v, (k.p - r - 1) * 2 + (k.v - 1) * k.p + 1);
      default: return std::min(k.p - r, k.m);
    }
  }

  // Stage costs, memory, ZeRO stage, exposed DP all-reduce, optimizer step.
  // False when the partition does not exist.
  bool Evaluate(const Key& k, Detail* x) {
    const CostTable& table = tables[k.table];
    const int64_t p = k.p, v = k.v, t = k.t, d = k.d, q_count = p * v;
    x->cuts = &Partition(k.table, q_count);
    const auto& cuts = *x->cuts;
    if (cuts.empty()) return false;
    auto Z = [](int64_t i) { return static_cast<size_t>(i); };
    x->sim.assign(Z(q_count), SimStage{});
    x->send.assign(Z(q_count), 0.0);
    for (int64_t q = 0; q < q_count; ++q) {
      int64_t a = cuts[Z(q)], e = cuts[Z(q + 1)];
      SimStage& y = x->sim[Z(q)];
      y.forward_s = table.pre_f[Z(e)] - table.pre_f[Z(a)];
      y.backward_input_s = table.pre_bi[Z(e)] - table.pre_bi[Z(a)];
      y.backward_weight_s = table.pre_bw[Z(e)] - table.pre_bw[Z(a)];
      if (q + 1 < q_count) {
        double bytes = table.rows[Z(e - 1)].out_bytes;
        if (o->cost.scatter_gather && t > 1) bytes /= static_cast<double>(t);
        int64_t ra = (q % p) * t * d, rb = ((q + 1) % p) * t * d;
        x->send[Z(q)] = P2PSeconds(*c, bytes, ra, rb);
      }
    }
    for (int64_t q = 0; q < q_count; ++q) {
      double sq = x->send[Z(q)];
      // Exposed: the sender is busy for the transfer (activation after F, gradient after B).
      if (o->cost.p2p_overlap) x->sim[Z(q)].send_s = sq;
      else x->sim[Z(q)].exposed_send_s = sq;
    }
    x->dev_params.assign(Z(p), 0);
    x->dev_stash.assign(Z(p), 0);
    x->dev_work.assign(Z(p), 0);
    x->dev_bwd.assign(Z(p), 0);
    x->dev_peak.assign(Z(p), 0);
    x->dev_ar.assign(Z(p), 0);
    for (int64_t q = 0; q < q_count; ++q) {
      size_t r = Z(q % p);
      int64_t a = cuts[Z(q)], e = cuts[Z(q + 1)];
      x->dev_params[r] += table.Params(a, e);
      x->dev_stash[r] = std::max(x->dev_stash[r], table.Stash(a, e));
      x->dev_bwd[r] += x->sim[Z(q)].backward_input_s + x->sim[Z(q)].backward_weight_s;
      for (int64_t i = a; i < e; ++i) {
        double ob = table.rows[Z(i)].out_bytes / static_cast<double>(t);
        x->dev_work[r] = std::max(x->dev_work[r], 2 * ob);
      }
    }
    x->zero = -1;
    for (int64_t z = 0; z <= std::min<int64_t>(o->max_zero_stage, d > 1 ? 3 : 0); ++z) {
      x->peak = 0;
      for (int64_t r = 0; r < p; ++r) {
        double states = x->dev_params[Z(r)] * StateBytesPerParam(beta, w_bytes, os_bytes, z, d);
        double acts = static_cast<double>(InFlight(k, r)) * x->dev_stash[Z(r)];
        x->dev_peak[Z(r)] = states + acts + x->dev_work[Z(r)];
        x->peak = std::max(x->peak, x->dev_peak[Z(r)]);
      }
      if (x->peak <= usable) {
        x->zero = z;
        break;
      }
    }
    x->dp_s = 0;
    x->opt_s = 0;
    if (x->zero < 0) return true;
    const double grad_ar_bytes = w_bytes;  // gradients all-reduced in the training dtype
    for (int64_t r = 0; r < p; ++r) {
      size_t ru = Z(r);
      double ar = d > 1 ? AllReduceSeconds(*c, x->dev_params[ru] * grad_ar_bytes, GroupSpread(*c, d, t), AllReduceUse::kGradient) : 0;
      if (x->zero == 3) ar *= 1.5;
      x->dev_ar[ru] = ar;
      double exposed = o->cost.dp_overlap ? std::max(0.0, ar - x->dev_bwd[ru] / static_cast<double>(v)) : ar;
      x->dp_s = std::max(x->dp_s, exposed);
      double shard = x->zero >= 1 ? static_cast<double>(d) : 1.0;
      x->opt_s = std::max(x->opt_s, x->dev_params[ru] / shard * o->cost.optimizer_bytes_per_param /
                                        (c->hbm_bandwidth_GBps * 1e9 * c->hbm_efficiency));
    }
    return true;
  }
};

void FillFlops(const ModelSpec* model, const ClusterSpec& c, Recompute rc, Plan* pl) {
  if (!model) return;
  const double iter = pl->predicted.iteration_s;
  const double batch = static_cast<double>(pl->global_batch);
  double hw = model->IterationFlops(batch, rc == Recompute::kFull);
  double mf = model->IterationFlops(batch, false);
  pl->predicted.tflops_per_gpu = hw / (static_cast<double>(pl->gpus_used) * iter) / 1e12;
  pl->predicted.mfu = mf / (static_cast<double>(pl->gpus_used) * c.PeakFlops(model->dtype) * iter);
}

}  // namespace

Status SolveAuto(const CostSource& src, SearchOptions& o, Plan* out) {
  const ClusterSpec& c = *src.cluster;
  const int64_t n = o.gpus;
  if (n < 1) return Status::InvalidArgument("--gpus must be at least 1");
  if (n > c.TotalGpus()) {
    return Status::InvalidArgument(fmt::format("{}: the cluster holds {} GPUs but --gpus is {}; lower --gpus or add topology levels",
                                               c.path, c.TotalGpus(), n));
  }
  const ModelSpec* model = src.model;
  const int64_t batch = o.global_batch > 0 ? o.global_batch : (model ? model->global_batch : 0);
  if (batch < 1) return Status::InvalidArgument("the global batch is unknown; pass --global-batch");
  const int64_t node = c.levels[0].size;
  const bool mixed = model == nullptr || model->dtype != DType::kFp32;
  Ctx ctx;
  ctx.c = &c;
  ctx.o = &o;
  ctx.w_bytes = model ? DTypeBytes(model->dtype) : 4.0;
  ctx.os_bytes = mixed ? 12.0 : 8.0;
  ctx.beta = o.cost.bytes_per_param > 0 ? o.cost.bytes_per_param : (mixed ? 18.0 : 16.0);
  ctx.usable = c.UsableMemoryBytes();

  std::vector<int64_t> tps = o.tp;
  if (tps.empty()) for (int64_t t = 1; t <= node; t *= 2) tps.push_back(t);
  std::vector<int64_t> mbs = o.microbatch;
  if (mbs.empty()) {
    if (src.profile) {
      // Every microbatch size the profile measured (at tp = 1).
      for (const auto& l : src.profile->layers) {
        for (const auto& t : l.timings) {
          if (t.tp == 1 && std::find(mbs.begin(), mbs.end(), t.microbatch) == mbs.end()) mbs.push_back(t.microbatch);
        }
      }
      if (mbs.empty()) mbs = {src.profile->reference_microbatch};
      std::sort(mbs.begin(), mbs.end());
    }
    else for (int64_t b = 1; b <= 64; b *= 2) mbs.push_back(b);
  }
  std::vector<Schedule> scheds = o.schedules;
  if (scheds.empty()) scheds = {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1, Schedule::kPipeDream};
  const bool want_async = !o.replication.empty() || std::find(scheds.begin(), scheds.end(), Schedule::kPipeDream) != scheds.end();
  std::vector<Recompute> rcs = o.recompute;
  bool transformer = false;
  if (model) for (const auto& l : model->layers) transformer = transformer || l.type == "transformer_block" || l.type == "attention";
  if (rcs.empty()) {
    rcs = {Recompute::kNone, Recompute::kFull};
    if (transformer) rcs.insert(rcs.begin() + 1, Recompute::kSelective);
  }

  std::vector<Scored> best;  // sorted by iteration time, at most top_k
  auto worst_kept = [&]() { return best.size() < static_cast<size_t>(o.top_k) ? INFINITY : best.back().iteration_s; };
  auto keep = [&](Plan&& pl) {
    double iter = pl.predicted.iteration_s;
    // A runner-up that only differs by an equally fast microbatch size adds
    // nothing: keep one per layout and time.
    for (const auto& k : best) {
      const Plan& q = k.plan;
      if (q.config == pl.config && q.tp == pl.tp && q.pp == pl.pp && q.schedule == pl.schedule && q.interleave == pl.interleave &&
          q.recompute == pl.recompute && std::fabs(k.iteration_s - iter) <= 1e-9 * iter) {
        return;
      }
    }
    auto pos = std::upper_bound(best.begin(), best.end(), iter, [](double x, const Scored& y) { return x < y.iteration_s; });
    best.insert(pos, Scored{std::move(pl), iter});
    if (best.size() > static_cast<size_t>(o.top_k)) best.pop_back();
  };
  // The candidate closest to fitting, for the Infeasible message.
  double least_overflow = INFINITY;
  std::string binding;

  // Phase 1: enumerate the uniform family with a lower bound each (cheap:
  // partitions are cached per cost table and stage count).
  std::vector<Key> keys;
  Detail x;
  for (int64_t t : tps) {
    if (t < 1 || n % t != 0 || t > node) continue;
    if (model && !TpDegreeValid(*model, t)) continue;
    for (int64_t b : mbs) {
      for (Recompute rc : rcs) {
        CostTable table;
        if (!BuildCostTable(src, b, t, rc, o.cost, &table).ok()) continue;
        const int64_t layers = static_cast<int64_t>(table.rows.size());
        ctx.tables.push_back(std::move(table));
        const size_t ti = ctx.tables.size() - 1;
        std::vector<int64_t> pps = o.pp.empty() ? Divisors(n / t) : o.pp;
        for (int64_t p : pps) {
          if (p < 1 || p > layers || (n / t) % p != 0) continue;
          const int64_t d = n / (t * p);
          if (batch % (b * d) != 0) continue;
          const int64_t m = batch / (b * d);
          for (Schedule s : scheds) {
            if (s == Schedule::kPipeDream) continue;  // the replicated family below
            std::vector<int64_t> vs = {1};
            if (s == Schedule::kInterleaved) {
              vs.clear();
              if (p < 2 || m % p != 0) continue;
              for (int64_t v : o.interleave) if (v >= 2 && p * v <= layers) vs.push_back(v);
            }
            if ((s == Schedule::kZbH1 || s == Schedule::kGpipe) && p == 1) continue;  // same as 1f1b at p = 1
            for (int64_t v : vs) {
              ++o.considered;
              Key k{ti, t, b, p, d, m, v, s, rc, 0};
              if (!ctx.Evaluate(k, &x)) continue;
              if (x.zero < 0) {
                double over = x.peak - ctx.usable;
                if (over < least_overflow) {
                  least_overflow = over;
                  size_t worst = static_cast<size_t>(std::max_element(x.dev_peak.begin(), x.dev_peak.end()) - x.dev_peak.begin());
                  binding = fmt::format("stage {} needs {:.1f} GiB > {:.1f} GiB usable (best try: tp={} pp={} dp={} microbatch={} {} recompute={}, ZeRO-3)",
                                        worst, x.dev_peak[worst] / kGiB, ctx.usable / kGiB, t, p, d, b, ScheduleName(s), RecomputeName(rc));
                }
                continue;
              }
              k.bound = MakespanLowerBound(s, x.sim, p, m) + x.dp_s + x.opt_s;
              keys.push_back(k);
            }
          }
        }
      }
    }
  }

  // Phase 2: best first. Simulate in order of the lower bound and stop once
  // the bound cannot beat the k-th best plan.
  std::stable_sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) { return a.bound < b.bound; });
  if (!o.replication.empty()) keys.clear();  // only the requested per-stage replication
  for (const Key& k : keys) {
    if (!o.exhaustive && k.bound >= worst_kept()) break;
    ctx.Evaluate(k, &x);
    const CostTable& table = ctx.tables[k.table];
    const auto& cuts = *x.cuts;
    SimResult res;
    if (!SimulateSchedule(k.s, x.sim, k.p, k.m, false, &res).ok()) continue;
    ++o.simulated;
    const double iter = res.makespan_s + x.dp_s + x.opt_s;
    if (iter >= worst_kept() && !o.exhaustive) continue;
    const int64_t t = k.t, p = k.p, d = k.d, q_count = k.p * k.v;
    Plan pl;
    pl.mode = "auto";
    pl.gpus = n;
    pl.gpus_used = t * p * d;
    pl.global_batch = batch;
    pl.tp = t;
    pl.pp = p;
    pl.dp = d;
    pl.microbatch_size = k.b;
    pl.num_microbatches = k.m;
    pl.schedule = k.s;
    pl.interleave = k.v;
    pl.recompute = k.rc;
    pl.zero_stage = x.zero;
    pl.p2p_overlap = o.cost.p2p_overlap;
    pl.usable_memory_bytes = ctx.usable;
    for (int64_t q = 0; q < q_count; ++q) {
      PlanStage ps;
      int64_t a = cuts[static_cast<size_t>(q)], e = cuts[static_cast<size_t>(q + 1)];
      size_t r = static_cast<size_t>(q % p);
      ps.first_layer = a;
      ps.last_layer = e - 1;
      ps.first_layer_name = table.names[static_cast<size_t>(a)];
      ps.last_layer_name = table.names[static_cast<size_t>(e - 1)];
      ps.replicas = d;
      ps.tp = t;
      ps.chunk = q / p;
      ps.device_offset = static_cast<int64_t>(r) * t * d;
      for (int64_t j = 0; j < t * d && j < 4096; ++j) ps.devices.push_back(ps.device_offset + j);
      const auto& y = x.sim[static_cast<size_t>(q)];
      ps.forward_s = y.forward_s;
      ps.backward_input_s = y.backward_input_s;
      ps.backward_weight_s = y.backward_weight_s;
      ps.tp_comm_s = table.pre_tp[static_cast<size_t>(e)] - table.pre_tp[static_cast<size_t>(a)];
      ps.p2p_s = x.send[static_cast<size_t>(q)];
      ps.dp_allreduce_s = x.dev_ar[r];
      ps.in_flight = ctx.InFlight(k, static_cast<int64_t>(r));
      ps.weights_bytes = x.dev_params[r] * ctx.w_bytes / (x.zero == 3 ? static_cast<double>(d) : 1.0);
      ps.optimizer_bytes = x.dev_params[r] * StateBytesPerParam(ctx.beta, ctx.w_bytes, ctx.os_bytes, x.zero, d) - ps.weights_bytes;
      ps.activations_bytes = static_cast<double>(ps.in_flight) * x.dev_stash[r];
      ps.peak_memory_bytes = x.dev_peak[r];
      pl.stages.push_back(std::move(ps));
    }
    std::string cfg;
    for (int64_t q = 0; q < p; ++q) cfg += (q ? "-" : "") + std::to_string(d);
    pl.config = cfg;
    pl.predicted.iteration_s = iter;
    pl.predicted.pipeline_s = res.makespan_s;
    pl.predicted.dp_allreduce_s = x.dp_s;
    pl.predicted.optimizer_s = x.opt_s;
    pl.predicted.bubble_fraction = res.bubble_fraction;
    pl.predicted.samples_per_second = static_cast<double>(batch) / iter;
    pl.predicted.peak_memory_bytes = x.peak;
    FillFlops(model, c, k.rc, &pl);
    keep(std::move(pl));
  }

  // The per-stage replication family (PipeDream's "2-1-1"), run with
  // PipeDream's asynchronous 1F1B: no flush, a weight version per microbatch
  // in flight, weights synchronised over each stage's replicas every
  // microbatch. Recompute is not combined with it (PipeDream has none).
  if (want_async) {
    for (size_t ti = 0; ti < ctx.tables.size(); ++ti) {
      const CostTable& table = ctx.tables[ti];
      if (table.recompute != Recompute::kNone) continue;
      const int64_t t = table.tp, b = table.microbatch;
      const int64_t workers = n / t;
      if (batch % b != 0 || workers < 2) continue;
      const int64_t m = batch / b;
      ReplicatedOptions ro;
      ro.workers = workers;
      ro.tp = t;
      ro.worker_unit = 1;
      while (workers / ro.worker_unit > o.max_replicated_units || workers % ro.worker_unit != 0) ++ro.worker_unit;
      ro.grad_bytes_per_param = ctx.w_bytes;
      ro.state_bytes_per_param = ctx.beta;
      ro.weight_bytes_per_param = ctx.w_bytes;
      ro.usable_bytes = ctx.usable;
      ro.p2p_overlap = true;
      ro.scatter_gather = o.cost.scatter_gather;
      ro.optimizer_bytes_per_param = o.cost.optimizer_bytes_per_param;
      if (!o.replication.empty()) {
        ro.forced = o.replication;
        ro.worker_unit = 1;
      }
      ReplicatedResult rr;
      ++o.considered;
      if (!SolveReplicated(table, c, ro, &rr).ok()) continue;
      const int64_t p = static_cast<int64_t>(rr.stages.size());
      if (p < 2 && o.replication.empty()) continue;  // one stage replicated everywhere is plain data parallelism, already ranked
      // No flush: in steady state an iteration of m microbatches takes m
      // bottleneck steps; the fill (one microbatch through every stage and
      // back) is paid once per run, not per iteration.
      double fill = 0, busy = 0;
      for (const auto& st : rr.stages) {
        fill += st.compute_s + st.send_s;
        busy += static_cast<double>(m) * (st.compute_s + st.allreduce_s) * static_cast<double>(t);
      }
      const double iter = static_cast<double>(m) * rr.bottleneck_s;
      if (iter >= worst_kept()) continue;
      Plan pl;
      pl.mode = "auto";
      pl.gpus = n;
      pl.gpus_used = n;
      pl.global_batch = batch;
      pl.tp = t;
      pl.pp = p;
      pl.dp = 1;
      pl.microbatch_size = b;
      pl.num_microbatches = m;
      pl.schedule = Schedule::kPipeDream;
      pl.interleave = 1;
      pl.recompute = Recompute::kNone;
      pl.zero_stage = 0;
      pl.p2p_overlap = true;
      pl.usable_memory_bytes = ctx.usable;
      std::string cfg;
      double peak = 0;
      for (const auto& st : rr.stages) {
        PlanStage ps;
        ps.first_layer = st.first;
        ps.last_layer = st.end - 1;
        ps.first_layer_name = table.names[static_cast<size_t>(st.first)];
        ps.last_layer_name = table.names[static_cast<size_t>(st.end - 1)];
        ps.replicas = st.replicas;
        ps.tp = t;
        ps.device_offset = st.offset * t;
        for (int64_t j = 0; j < st.replicas * t && j < 4096; ++j) ps.devices.push_back(ps.device_offset + j);
        ps.forward_s = table.pre_f[static_cast<size_t>(st.end)] - table.pre_f[static_cast<size_t>(st.first)];
        ps.backward_input_s = table.pre_bi[static_cast<size_t>(st.end)] - table.pre_bi[static_cast<size_t>(st.first)];
        ps.backward_weight_s = table.pre_bw[static_cast<size_t>(st.end)] - table.pre_bw[static_cast<size_t>(st.first)];
        ps.tp_comm_s = table.pre_tp[static_cast<size_t>(st.end)] - table.pre_tp[static_cast<size_t>(st.first)];
        ps.p2p_s = st.send_s / 2;
        ps.dp_allreduce_s = st.allreduce_s * static_cast<double>(m) / static_cast<double>(st.replicas);
        ps.in_flight = st.in_flight;
        double params = table.Params(st.first, st.end);
        ps.weights_bytes = params * ctx.w_bytes * static_cast<double>(st.in_flight);
        ps.optimizer_bytes = params * (ctx.beta - ctx.w_bytes);
        ps.activations_bytes = static_cast<double>(st.in_flight) * table.Stash(st.first, st.end);
        ps.peak_memory_bytes = st.peak_memory_bytes;
        peak = std::max(peak, st.peak_memory_bytes);
        cfg += (cfg.empty() ? "" : "-") + std::to_string(st.replicas);
        pl.stages.push_back(std::move(ps));
      }
      pl.config = cfg;
      pl.predicted.iteration_s = iter;
      pl.predicted.pipeline_s = iter;
      pl.predicted.bubble_fraction = std::max(0.0, 1.0 - busy / (static_cast<double>(n) * iter));
      pl.predicted.samples_per_second = static_cast<double>(batch) / iter;
      pl.predicted.peak_memory_bytes = peak;
      pl.notes.push_back(fmt::format("asynchronous (PipeDream): weights up to {} microbatch(es) stale; bottleneck {} per microbatch; "
                                     "pipeline fill {} once per run (not in the iteration time)",
                                     rr.stages.front().in_flight - 1, FormatSeconds(rr.bottleneck_s), FormatSeconds(fill)));
      if (ro.worker_unit > 1) pl.notes.push_back(fmt::format("replicas searched in units of {} workers", ro.worker_unit));
      FillFlops(model, c, Recompute::kNone, &pl);
      keep(std::move(pl));
    }
  }
  if (best.empty()) {
    if (!binding.empty()) return Status::Infeasible("no plan fits in memory: " + binding);
    return Status::Infeasible(fmt::format("no configuration divides the problem: {} GPUs, global batch {}; "
                                          "choose a batch divisible by microbatch x data-parallel size, or other --tp/--pp",
                                          n, batch));
  }
  Plan win = std::move(best.front().plan);
  for (size_t i = 1; i < best.size(); ++i) {
    const Plan& r = best[i].plan;
    PlanSummary s;
    s.config = r.config;
    s.tp = r.tp; s.pp = r.pp; s.dp = r.dp;
    s.microbatch_size = r.microbatch_size;
    s.num_microbatches = r.num_microbatches;
    s.schedule = r.schedule;
    s.interleave = r.interleave;
    s.recompute = r.recompute;
    s.zero_stage = r.zero_stage;
    s.iteration_s = r.predicted.iteration_s;
    s.samples_per_second = r.predicted.samples_per_second;
    s.peak_memory_bytes = r.predicted.peak_memory_bytes;
    s.why_lost = fmt::format("{:.1f}% slower: pipeline {} vs {}, bubble {:.1f}% vs {:.1f}%, exposed DP all-reduce {} vs {}",
                             100.0 * (r.predicted.iteration_s / win.predicted.iteration_s - 1.0),
                             FormatSeconds(r.predicted.pipeline_s), FormatSeconds(win.predicted.pipeline_s),
                             100 * r.predicted.bubble_fraction, 100 * win.predicted.bubble_fraction,
                             FormatSeconds(r.predicted.dp_allreduce_s), FormatSeconds(win.predicted.dp_allreduce_s));
    win.runners_up.push_back(std::move(s));
  }
  *out = std::move(win);
  return Status::OK();
}

}  // namespace planner
