#include "dp_solver/search.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "common/units.h"

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
  const double w_bytes = model ? DTypeBytes(model->dtype) : 4.0;
  const double os_bytes = mixed ? 12.0 : 8.0;
  const double beta = o.cost.bytes_per_param > 0 ? o.cost.bytes_per_param : (mixed ? 18.0 : 16.0);
  const double grad_ar_bytes = w_bytes;  // gradients all-reduced in the training dtype
  const double usable = c.UsableMemoryBytes();

  std::vector<int64_t> tps = o.tp;
  if (tps.empty()) for (int64_t t = 1; t <= node; t *= 2) tps.push_back(t);
  std::vector<int64_t> mbs = o.microbatch;
  if (mbs.empty()) {
    if (src.profile) mbs = {src.profile->reference_microbatch};
    else for (int64_t b = 1; b <= 64; b *= 2) mbs.push_back(b);
  }
  std::vector<Schedule> scheds = o.schedules;
  if (scheds.empty()) scheds = {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1};
  std::vector<Recompute> rcs = o.recompute;
  bool transformer = false;
  if (model) for (const auto& l : model->layers) transformer = transformer || l.type == "transformer_block" || l.type == "attention";
  if (rcs.empty()) {
    rcs = {Recompute::kNone, Recompute::kFull};
    if (transformer) rcs.insert(rcs.begin() + 1, Recompute::kSelective);
  }

  std::vector<Scored> best;  // sorted by iteration time, at most top_k
  auto worst_kept = [&]() { return best.size() < static_cast<size_t>(o.top_k) ? INFINITY : best.back().iteration_s; };
  // The candidate closest to fitting, for the Infeasible message.
  double least_overflow = INFINITY;
  std::string binding;

  for (int64_t t : tps) {
    if (t < 1 || n % t != 0 || t > node) continue;
    if (model && !TpDegreeValid(*model, t)) continue;
    for (int64_t b : mbs) {
      for (Recompute rc : rcs) {
        CostTable table;
        if (!BuildCostTable(src, b, t, rc, o.cost, &table).ok()) continue;
        const int64_t layers = static_cast<int64_t>(table.rows.size());
        std::vector<int64_t> pps = o.pp.empty() ? Divisors(n / t) : o.pp;
        for (int64_t p : pps) {
          if (p < 1 || p > layers || (n / t) % p != 0) continue;
          const int64_t d = n / (t * p);
          if (batch % (b * d) != 0) continue;
          const int64_t m = batch / (b * d);
          for (Schedule s : scheds) {
            if (s == Schedule::kPipeDream) continue;
            std::vector<int64_t> vs = {1};
            if (s == Schedule::kInterleaved) {
              vs.clear();
              if (p < 2 || m % p != 0) continue;
              for (int64_t v : o.interleave) if (v >= 2 && p * v <= layers) vs.push_back(v);
            }
            if ((s == Schedule::kZbH1 || s == Schedule::kGpipe) && p == 1) continue;  // same as 1f1b at p = 1
            for (int64_t v : vs) {
              ++o.considered;
              const int64_t q_count = p * v;
              std::vector<int64_t> cuts = BalancedPartition(table, q_count);
              if (cuts.empty()) continue;
              // Per virtual stage costs; p2p on the pipeline link (ranks t*d apart).
              std::vector<SimStage> sim(static_cast<size_t>(q_count));
              std::vector<double> send(static_cast<size_t>(q_count), 0.0);
              for (int64_t q = 0; q < q_count; ++q) {
                int64_t a = cuts[static_cast<size_t>(q)], e = cuts[static_cast<size_t>(q + 1)];
                SimStage& x = sim[static_cast<size_t>(q)];
                x.forward_s = table.pre_f[e] - table.pre_f[a];
                x.backward_input_s = table.pre_bi[e] - table.pre_bi[a];
                x.backward_weight_s = table.pre_bw[e] - table.pre_bw[a];
                if (q + 1 < q_count) {
                  double bytes = table.rows[static_cast<size_t>(e - 1)].out_bytes;
                  if (o.cost.scatter_gather && t > 1) bytes /= static_cast<double>(t);
                  int64_t ra = (q % p) * t * d, rb = ((q + 1) % p) * t * d;
                  send[static_cast<size_t>(q)] = P2PSeconds(c, bytes, ra, rb);
                }
              }
              for (int64_t q = 0; q < q_count; ++q) {
                double sq = send[static_cast<size_t>(q)];
                if (o.cost.p2p_overlap) {
                  sim[static_cast<size_t>(q)].send_s = sq;
                } else {
                  // Exposed: the sender is busy for the transfer (activation forward, gradient backward).
                  sim[static_cast<size_t>(q)].forward_s += sq;
                  if (q > 0) sim[static_cast<size_t>(q)].backward_input_s += send[static_cast<size_t>(q - 1)];
                }
              }
              // Memory per device and the cheapest ZeRO stage that fits.
              std::vector<double> dev_params(static_cast<size_t>(p), 0), dev_stash(static_cast<size_t>(p), 0),
                  dev_work(static_cast<size_t>(p), 0), dev_bwd(static_cast<size_t>(p), 0);
              for (int64_t q = 0; q < q_count; ++q) {
                size_t r = static_cast<size_t>(q % p);
                int64_t a = cuts[static_cast<size_t>(q)], e = cuts[static_cast<size_t>(q + 1)];
                dev_params[r] += table.Params(a, e);
                dev_stash[r] = std::max(dev_stash[r], table.Stash(a, e));
                dev_bwd[r] += sim[static_cast<size_t>(q)].backward_input_s + sim[static_cast<size_t>(q)].backward_weight_s;
                for (int64_t i = a; i < e; ++i) {
                  double ob = table.rows[static_cast<size_t>(i)].out_bytes / static_cast<double>(t);
                  dev_work[r] = std::max(dev_work[r], 2 * ob);
                }
              }
              auto in_flight = [&](int64_t r) -> int64_t {
                switch (s) {
                  case Schedule::kGpipe: return m;
                  case Schedule::kInterleaved: return std::min(m * v, (p - r - 1) * 2 + (v - 1) * p + 1);
                  default: return std::min(p - r, m);
                }
              };
              int64_t zero = -1;
              double peak = 0;
              std::vector<double> dev_peak(static_cast<size_t>(p));
              for (int64_t z = 0; z <= std::min<int64_t>(o.max_zero_stage, d > 1 ? 3 : 0); ++z) {
                peak = 0;
                for (int64_t r = 0; r < p; ++r) {
                  size_t ru = static_cast<size_t>(r);
                  double states = dev_params[ru] * StateBytesPerParam(beta, w_bytes, os_bytes, z, d);
                  double acts = static_cast<double>(in_flight(r)) * dev_stash[ru];
                  dev_peak[ru] = states + acts + dev_work[ru];
                  peak = std::max(peak, dev_peak[ru]);
                }
                if (peak <= usable) { zero = z; break; }
              }
              if (zero < 0) {
                double over = peak - usable;
                if (over < least_overflow) {
                  least_overflow = over;
                  size_t worst = static_cast<size_t>(std::max_element(dev_peak.begin(), dev_peak.end()) - dev_peak.begin());
                  binding = fmt::format("stage {} needs {:.1f} GiB > {:.1f} GiB usable (best try: tp={} pp={} dp={} microbatch={} {} recompute={}, ZeRO-3)",
                                        worst, dev_peak[worst] / kGiB, usable / kGiB, t, p, d, b, ScheduleName(s), RecomputeName(rc));
                }
                continue;
              }
              // Exposed data-parallel all-reduce (max over stages) and the optimizer step.
              double dp_s = 0, opt_s = 0;
              std::vector<double> dev_ar(static_cast<size_t>(p), 0);
              for (int64_t r = 0; r < p; ++r) {
                size_t ru = static_cast<size_t>(r);
                double ar = d > 1 ? AllReduceSeconds(c, dev_params[ru] * grad_ar_bytes, GroupSpread(c, d, t)) : 0;
                if (zero == 3) ar *= 1.5;
                dev_ar[ru] = ar;
                double exposed = o.cost.dp_overlap ? std::max(0.0, ar - dev_bwd[ru] / static_cast<double>(v)) : ar;
                dp_s = std::max(dp_s, exposed);
                double shard = zero >= 1 ? static_cast<double>(d) : 1.0;
                opt_s = std::max(opt_s, dev_params[ru] / shard * o.cost.optimizer_bytes_per_param /
                                            (c.hbm_bandwidth_GBps * 1e9 * c.hbm_efficiency));
              }
              // Lower bound: the busiest device works m times its per-microbatch load.
              double lb = 0;
              for (int64_t r = 0; r < p; ++r) {
                double work = 0;
                for (int64_t q = r; q < q_count; q += p) {
                  const auto& x = sim[static_cast<size_t>(q)];
                  work += x.forward_s + x.backward_input_s + x.backward_weight_s;
                }
                lb = std::max(lb, work * static_cast<double>(m));
              }
              if (lb + dp_s + opt_s >= worst_kept()) continue;
              SimResult res;
              if (!SimulateSchedule(s, sim, p, m, false, &res).ok()) continue;
              ++o.simulated;
              double iter = res.makespan_s + dp_s + opt_s;
              if (iter >= worst_kept()) continue;

              Plan pl;
              pl.mode = "auto";
              pl.gpus = n;
              pl.gpus_used = t * p * d;
              pl.global_batch = batch;
              pl.tp = t;
              pl.pp = p;
              pl.dp = d;
              pl.microbatch_size = b;
              pl.num_microbatches = m;
              pl.schedule = ScheduleName(s);
              pl.interleave = v;
              pl.recompute = RecomputeName(rc);
              pl.zero_stage = zero;
              pl.usable_memory_bytes = usable;
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
                for (int64_t k = 0; k < t * d && k < 4096; ++k) ps.devices.push_back(ps.device_offset + k);
                const auto& x = sim[static_cast<size_t>(q)];
                ps.forward_s = x.forward_s;
                ps.backward_input_s = x.backward_input_s;
                ps.backward_weight_s = x.backward_weight_s;
                ps.tp_comm_s = table.pre_tp[e] - table.pre_tp[a];
                ps.p2p_s = send[static_cast<size_t>(q)];
                ps.dp_allreduce_s = dev_ar[r];
                ps.in_flight = in_flight(static_cast<int64_t>(r));
                ps.weights_bytes = dev_params[r] * w_bytes / (zero == 3 ? static_cast<double>(d) : 1.0);
                ps.optimizer_bytes = dev_params[r] * StateBytesPerParam(beta, w_bytes, os_bytes, zero, d) - ps.weights_bytes;
                ps.activations_bytes = static_cast<double>(ps.in_flight) * dev_stash[r];
                ps.peak_memory_bytes = dev_peak[r];
                pl.stages.push_back(std::move(ps));
              }
              std::string cfg;
              for (int64_t q = 0; q < p; ++q) cfg += (q ? "-" : "") + std::to_string(d);
              pl.config = cfg;
              pl.predicted.iteration_s = iter;
              pl.predicted.pipeline_s = res.makespan_s;
              pl.predicted.dp_allreduce_s = dp_s;
              pl.predicted.optimizer_s = opt_s;
              pl.predicted.bubble_fraction = res.bubble_fraction;
              pl.predicted.samples_per_second = static_cast<double>(batch) / iter;
              pl.predicted.peak_memory_bytes = peak;
              if (model) {
                double hw = model->IterationFlops(static_cast<double>(batch), rc == Recompute::kFull);
                double mf = model->IterationFlops(static_cast<double>(batch), false);
                pl.predicted.tflops_per_gpu = hw / (static_cast<double>(pl.gpus_used) * iter) / 1e12;
                pl.predicted.mfu = mf / (static_cast<double>(pl.gpus_used) * c.PeakFlops(model->dtype) * iter);
              }
              Scored sc{std::move(pl), iter};
              auto pos = std::upper_bound(best.begin(), best.end(), iter, [](double x, const Scored& y) { return x < y.iteration_s; });
              best.insert(pos, std::move(sc));
              if (best.size() > static_cast<size_t>(o.top_k)) best.pop_back();
            }
          }
        }
      }
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
