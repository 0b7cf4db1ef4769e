#include "dp_solver/schedule_sim.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace planner {

const char* ScheduleName(Schedule s) {
  switch (s) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::k1F1B: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kZbH1: return "zb-h1";
    case Schedule::kPipeDream: return "pipedream";
  }
  return "1f1b";
}

bool ParseSchedule(const std::string& t, Schedule* out) {
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1, Schedule::kPipeDream}) {
    if (t == ScheduleName(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

double ClosedFormMakespan(Schedule s, double f, double b, double w, int64_t p, int64_t m, int64_t v) {
  double pd = static_cast<double>(p), md = static_cast<double>(m), vd = static_cast<double>(v);
  switch (s) {
    case Schedule::kGpipe:
    case Schedule::k1F1B:
    case Schedule::kPipeDream: return (md + pd - 1) * (f + b + w);
    case Schedule::kInterleaved: return (md + (pd - 1) / vd) * (f + b + w);
    case Schedule::kZbH1: return md * (f + b + w) + (pd - 1) * (f + b - w);
  }
  return 0;
}

double MakespanLowerBound(Schedule s, const std::vector<SimStage>& st, int64_t p, int64_t m) {
  if (p < 1 || st.empty()) return 0;
  const int64_t q_count = static_cast<int64_t>(st.size());
  double best = 0, head = 0, tail = 0;
  for (int64_t r = 0; r < p && r < q_count; ++r) {
    double work = 0;
    for (int64_t q = r; q < q_count; q += p) {
      const SimStage& x = st[static_cast<size_t>(q)];
      work += x.forward_s + x.backward_input_s + x.backward_weight_s;
    }
    best = std::max(best, head + static_cast<double>(m) * work + (s == Schedule::kZbH1 ? 0.0 : tail));
    const SimStage& x = st[static_cast<size_t>(r)];
    head += x.forward_s + x.send_s;
    tail += x.backward_input_s + x.backward_weight_s + x.send_s;
  }
  return best;
}

namespace {

struct Op {
  char kind;  // 'F', 'B' (with W fused unless split), 'W'
  int32_t stage;
  int32_t mb;
};

// Per-device operation lists for the fixed-order schedules.
std::vector<std::vector<Op>> BuildOrders(Schedule s, int64_t p, int64_t v, int64_t m) {
  std::vector<std::vector<Op>> orders(static_cast<size_t>(p));
  for (int64_t r = 0; r < p; ++r) {
    auto& ord = orders[static_cast<size_t>(r)];
    auto F = [&](int64_t q, int64_t i) { ord.push_back({'F', static_cast<int32_t>(q), static_cast<int32_t>(i)}); };
    auto B = [&](int64_t q, int64_t i) { ord.push_back({'B', static_cast<int32_t>(q), static_cast<int32_t>(i)}); };
    if (s == Schedule::kGpipe) {
      for (int64_t i = 0; i < m; ++i) F(r, i);
      for (int64_t i = 0; i < m; ++i) B(r, i);
    } else if (s == Schedule::k1F1B || s == Schedule::kPipeDream) {
      int64_t warm = std::min(p - r - 1, m);
      for (int64_t i = 0; i < warm; ++i) F(r, i);
      for (int64_t i = 0; i < m - warm; ++i) {
        F(r, warm + i);
        B(r, i);
      }
      for (int64_t i = m - warm; i < m; ++i) B(r, i);
    } else if (s == Schedule::kInterleaved) {
      // Megatron-LM's interleaved order with microbatch groups of size p.
      int64_t total = m * v;
      auto chunk_of = [&](int64_t k, bool forward) {
        int64_t c = (k / p) % v;
        return forward ? c : v - 1 - c;
      };
      auto mb_of = [&](int64_t k) { return (k / (p * v)) * p + k % p; };
      int64_t warm = std::min((p - r - 1) * 2 + (v - 1) * p, total);
      for (int64_t k = 0; k < warm; ++k) F(chunk_of(k, true) * p + r, mb_of(k));
      for (int64_t k = 0; k < total - warm; ++k) {
        F(chunk_of(warm + k, true) * p + r, mb_of(warm + k));
        B(chunk_of(k, false) * p + r, mb_of(k));
      }
      for (int64_t k = total - warm; k < total; ++k) B(chunk_of(k, false) * p + r, mb_of(k));
    }
  }
  return orders;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

Status SimulateSchedule(Schedule s, const std::vector<SimStage>& st, int64_t p, int64_t m, bool record, SimResult* out) {
  if (p < 1 || m < 1 || st.empty() || static_cast<int64_t>(st.size()) % p != 0) {
    return Status::InvalidArgument("schedule simulation needs p >= 1, m >= 1 and p * v stages");
  }
  const int64_t q_count = static_cast<int64_t>(st.size());
  const int64_t v = q_count / p;
  if (s == Schedule::kInterleaved && m % p != 0) {
    return Status::InvalidArgument(fmt::format("the interleaved schedule needs the number of microbatches ({}) to be a multiple of the pipeline depth ({})", m, p));
  }
  if (s != Schedule::kInterleaved && v != 1) return Status::InvalidArgument("only the interleaved schedule takes several chunks per device");
  const bool split_w = s == Schedule::kZbH1;
  // Completion times per (virtual stage, microbatch); NaN-free: -1 = not done.
  std::vector<double> f_end(static_cast<size_t>(q_count * m), -1), b_end(static_cast<size_t>(q_count * m), -1);
  auto idx = [&](int64_t q, int64_t i) { return static_cast<size_t>(q * m + i); };
  auto f_ready = [&](int64_t q, int64_t i) -> double {
    if (q == 0) return 0;
    double e = f_end[idx(q - 1, i)];
    return e < 0 ? kInf : e + st[static_cast<size_t>(q - 1)].send_s;
  };
  auto b_ready = [&](int64_t q, int64_t i) -> double {
    double own = f_end[idx(q, i)];
    if (own < 0) return kInf;
    if (q == q_count - 1) return own;
    double e = b_end[idx(q + 1, i)];
    return e < 0 ? kInf : std::max(own, e + st[static_cast<size_t>(q)].send_s);
  };
  SimResult r;
  r.busy_s.assign(static_cast<size_t>(p), 0.0);
  std::vector<double> free_at(static_cast<size_t>(p), 0.0);
  auto run = [&](int64_t dev, char kind, int64_t q, int64_t i, double ready) {
    const SimStage& x = st[static_cast<size_t>(q)];
    double dur = kind == 'F' ? x.forward_s : (kind == 'W' ? x.backward_weight_s : (split_w ? x.backward_input_s : x.backward_input_s + x.backward_weight_s));
    double start = std::max(free_at[static_cast<size_t>(dev)], ready);
    double end = start + dur;
    free_at[static_cast<size_t>(dev)] = end;
    r.busy_s[static_cast<size_t>(dev)] += dur;
    if (kind == 'F') f_end[idx(q, i)] = end;
    if (kind == 'B') b_end[idx(q, i)] = end;
    if (record) r.events.push_back({static_cast<int32_t>(dev), static_cast<int32_t>(q), static_cast<int32_t>(i), kind, start, end});
    r.makespan_s = std::max(r.makespan_s, end);
  };

  if (!split_w) {
    auto orders = BuildOrders(s, p, v, m);
    std::vector<size_t> next(static_cast<size_t>(p), 0);
    size_t remaining = 0;
    for (const auto& o : orders) remaining += o.size();
    while (remaining > 0) {
      bool progressed = false;
      for (int64_t d = 0; d < p; ++d) {
        auto& k = next[static_cast<size_t>(d)];
        const auto& ord = orders[static_cast<size_t>(d)];
        while (k < ord.size()) {
          const Op& op = ord[k];
          double ready = op.kind == 'F' ? f_ready(op.stage, op.mb) : b_ready(op.stage, op.mb);
          if (ready == kInf) break;
          run(d, op.kind, op.stage, op.mb, ready);
          ++k;
          --remaining;
          progressed = true;
        }
      }
      if (!progressed) return Status::Internal("schedule deadlock in the simulator");
    }
  } else {
    // ZB-H1 by list scheduling: device r keeps at most p - r microbatches
    // between F and B and at most r deferred W; priority B > F > W.
    std::vector<int64_t> nf(static_cast<size_t>(p), 0), nb(static_cast<size_t>(p), 0), nw(static_cast<size_t>(p), 0);
    int64_t done = 0, total = 3 * p * m;
    while (done < total) {
      // The device that can start something earliest acts next.
      int64_t best_dev = -1;
      char best_kind = 0;
      double best_start = kInf;
      for (int64_t d = 0; d < p; ++d) {
        size_t du = static_cast<size_t>(d);
        double fa = free_at[du];
        struct Cand { char kind; double ready; };
        std::vector<Cand> cands;
        if (nb[du] < m && nb[du] - nw[du] < d + 1 && nb[du] < nf[du]) cands.push_back({'B', b_ready(d, nb[du])});
        if (nf[du] < m && nf[du] - nb[du] < p - d) cands.push_back({'F', f_ready(d, nf[du])});
        if (nw[du] < nb[du]) cands.push_back({'W', b_end[idx(d, nw[du])]});
        // The highest-priority candidate ready when the device is free; else the earliest ready one.
        double start = kInf;
        char kind = 0;
        for (const auto& c : cands) {
          if (c.ready <= fa) { start = fa; kind = c.kind; break; }
        }
        if (kind == 0) {
          for (const auto& c : cands) {
            if (c.ready < start) { start = c.ready; kind = c.kind; }
          }
        }
        if (kind != 0 && start < best_start) {
          best_start = start;
          best_dev = d;
          best_kind = kind;
        }
      }
      if (best_dev < 0) return Status::Internal("ZB-H1 simulation found no runnable operation");
      size_t du = static_cast<size_t>(best_dev);
      if (best_kind == 'F') { run(best_dev, 'F', best_dev, nf[du], best_start); ++nf[du]; }
      else if (best_kind == 'B') { run(best_dev, 'B', best_dev, nb[du], best_start); ++nb[du]; }
      else { run(best_dev, 'W', best_dev, nw[du], best_start); ++nw[du]; }
      ++done;
    }
  }
  double busy = 0;
  for (double b : r.busy_s) busy += b;
  r.bubble_fraction = r.makespan_s > 0 ? 1.0 - busy / (static_cast<double>(p) * r.makespan_s) : 0;
  *out = std::move(r);
  return Status::OK();
}

}  // namespace planner
