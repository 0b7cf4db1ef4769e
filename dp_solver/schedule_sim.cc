#include "dp_solver/schedule_sim.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <utility>

#include <fmt/format.h>

namespace planner {

double ClosedFormMakespan(Schedule s, double f, double b, double w, int64_t p, int64_t m, int64_t v) {
  double pd = static_cast<double>(p), md = static_cast<double>(m), vd = static_cast<double>(v);
  switch (s) {
    case Schedule::kGpipe:
    case Schedule::k1F1B:
    case Schedule::kPipeDream: return (md + pd - 1) * (f + b + w);
    case Schedule::kInterleaved: return (md + (pd - 1) / vd) * (f + b + w);
    case Schedule::kZbH1: return md * (f + b + w) + (pd - 1) * (f + b - w);
    // Per chunk F, B (input), W; each device runs 2m of each. DeepSeek-V3's DualPipe bubble
    // (PP/2 - 1)(F&B + B' - 3W) with PP = 2p ranks of the uncut DualPipe, B' = B + W the full
    // backward and F&B = F + B' the overlapped pair run back to back: (p - 1)(F + 2B - W). Exact for
    // the simulator's order when F = B and W <= B (docs/cost_model.md section 4).
    case Schedule::kDualPipeV: return 2 * md * (f + b + w) + (pd - 1) * (f + 2 * b - w);
  }
  return 0;
}

bool UniformMakespan(Schedule s, const std::vector<SimStage>& st, int64_t p, int64_t m, SimResult* out) {
  if (s != Schedule::kGpipe && s != Schedule::k1F1B && s != Schedule::kInterleaved) return false;
  if (p < 1 || m < 1 || st.empty() || static_cast<int64_t>(st.size()) % p != 0) return false;
  const int64_t v = static_cast<int64_t>(st.size()) / p;
  if ((s == Schedule::kInterleaved && m % p != 0) || (s != Schedule::kInterleaved && v != 1)) return false;
  const SimStage& a = st.front();
  for (const SimStage& x : st) {
    if (x.forward_s != a.forward_s || x.backward_input_s != a.backward_input_s ||
        x.backward_weight_s != a.backward_weight_s || x.send_s != 0 || x.exposed_send_s != 0)
      return false;
  }
  const double vd = static_cast<double>(v);
  SimResult r;
  r.makespan_s = ClosedFormMakespan(s, vd * a.forward_s, vd * a.backward_input_s, vd * a.backward_weight_s, p, m, v);
  const double busy = static_cast<double>(m) * vd * (a.forward_s + a.backward_input_s + a.backward_weight_s);
  r.busy_s.assign(static_cast<size_t>(p), busy);
  r.bubble_fraction = r.makespan_s > 0 ? 1.0 - busy / r.makespan_s : 0.0;
  r.closed_form = true;
  *out = std::move(r);
  return true;
}

namespace {

// ZB-H1's last microbatch as a chain, with each device's serial work before its last F and its last B
// (the caps of ZbH1Scheduler: before F number j, device r has run at least j - (p - r) + 1 B; before B
// number j, at least j - r W). y: the last microbatch's forward output published from stage r (after
// its exposed send); x: its input gradient published from stage r. The run ends no earlier than
// x_r + W_r on any device r (its last W waits for that B). On uniform stages with m >= p and no sends
// it is ClosedFormMakespan's m (F + B + W) + (p - 1)(F + B - W), reached on device 0; when m < p it
// charges the fill and drain the per-device bound misses.
double ZbH1ChainBound(const std::vector<SimStage>& st, int64_t p, int64_t m) {
  std::vector<double> head(static_cast<size_t>(p), 0.0), y(static_cast<size_t>(p), 0.0);
  auto es_f = [&](int64_t r) { return r + 1 < p ? st[static_cast<size_t>(r)].exposed_send_s : 0.0; };
  auto es_b = [&](int64_t r) { return r > 0 ? st[static_cast<size_t>(r - 1)].exposed_send_s : 0.0; };
  for (int64_t r = 1; r < p; ++r) {
    const SimStage& e = st[static_cast<size_t>(r - 1)];
    head[static_cast<size_t>(r)] = head[static_cast<size_t>(r - 1)] + e.forward_s + es_f(r - 1) + e.send_s;
  }
  for (int64_t r = 0; r < p; ++r) {
    const SimStage& x = st[static_cast<size_t>(r)];
    const double f = x.forward_s + es_f(r), b = x.backward_input_s + es_b(r), w = x.backward_weight_s;
    const int64_t bs = std::max<int64_t>(0, m - p + r), ws = std::max<int64_t>(0, bs - 1 - r);
    double start = head[static_cast<size_t>(r)] + static_cast<double>(m - 1) * f + static_cast<double>(bs) * b +
                   static_cast<double>(ws) * w;
    if (r > 0) start = std::max(start, y[static_cast<size_t>(r - 1)] + st[static_cast<size_t>(r - 1)].send_s);
    y[static_cast<size_t>(r)] = start + f;
  }
  double best = 0, x_next = 0;
  for (int64_t r = p - 1; r >= 0; --r) {
    const SimStage& x = st[static_cast<size_t>(r)];
    const double f = x.forward_s + es_f(r), b = x.backward_input_s + es_b(r), w = x.backward_weight_s;
    double start = head[static_cast<size_t>(r)] + static_cast<double>(m) * f + static_cast<double>(m - 1) * b +
                   static_cast<double>(std::max<int64_t>(0, m - 1 - r)) * w;
    start = std::max(start, y[static_cast<size_t>(r)]);
    if (r + 1 < p) start = std::max(start, x_next + x.send_s);
    x_next = start + b;
    best = std::max(best, x_next + w);
  }
  return best;
}

}  // namespace

double MakespanLowerBound(Schedule s, const std::vector<SimStage>& st, int64_t p, int64_t m) {
  if (p < 1 || st.empty()) return 0;
  const int64_t q_count = static_cast<int64_t>(st.size());
  double best = 0, head = 0, tail = 0, btail = 0;
  const bool no_tail = s == Schedule::kZbH1 || s == Schedule::kDualPipeV;  // their last operations may be W
  for (int64_t r = 0; r < p && r < q_count; ++r) {
    double work = 0;
    for (int64_t c = 0; c * p < q_count; ++c) {
      const int64_t q = ChunkStage(s, c, r, p);
      const SimStage& x = st[static_cast<size_t>(q)];
      work += x.forward_s + x.backward_input_s + x.backward_weight_s;
      // Exposed sends, but none between two stages of this device (DualPipeV's stages p - 1 and p).
      if (q + 1 < q_count && StagePosition(s, q + 1, p) != r) work += x.exposed_send_s;
      if (q > 0 && StagePosition(s, q - 1, p) != r) work += st[static_cast<size_t>(q - 1)].exposed_send_s;
    }
    best = std::max(best, head + static_cast<double>(m) * work + (no_tail ? 0.0 : tail));
    const SimStage& x = st[static_cast<size_t>(r)];
    // ZB-H1: device r defers at most r + 1 weight gradients past its last B, after which the last
    // microbatch's input gradients still run back through stages r - 1 .. 0.
    if (s == Schedule::kZbH1)
      best = std::max(best,
                      head + static_cast<double>(m) * work - static_cast<double>(r + 1) * x.backward_weight_s + btail);
    head += x.forward_s + x.send_s + x.exposed_send_s;
    tail += x.backward_input_s + x.backward_weight_s + x.send_s +
            (r > 0 ? st[static_cast<size_t>(r - 1)].exposed_send_s : 0.0);
    btail += x.backward_input_s + x.send_s;
  }
  if (s == Schedule::kZbH1 && q_count == p) best = std::max(best, ZbH1ChainBound(st, p, m));
  return best;
}

namespace {

struct Op {
  char kind;  // 'F', 'B' (with W fused unless split), 'W'
  int32_t stage;
  int32_t mb;
  bool hold = false;  // its output leaves with the next operation of its device that holds nothing (SimEvent::held)
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

// DualPipeV's per-rank order (torch.distributed.pipelining's ScheduleDualPipeV, after DeepSeek's
// dualpipev.py), rank r of p holding stages r (chunk 0) and 2p - 1 - r (chunk 1), m >= 2p:
//   1. 2(p-r-1) x F0              2. r+1 x (F0 F1)              3. p-r-1 x (I1 W F1)
//   4. m-2p+r+1 x (F0&B1 F1&B0)   5. p-r-1 x (B1 F1&B0)         6. r+1 x (B1 B0), the second half as I
//   7. p-r-1 x (W I0)             8. r+1 x W
// F: forward; B: full backward, played as its input part then its W, its gradient leaving after
// both (torch's FULL_BACKWARD); I: input-gradient backward, its W queued (FIFO); W: the queue's
// oldest. X&Y: an overlapped pair (torch's OVERLAP_F_B, DeepSeek's F&B chunk): the two run back to
// back and their outputs leave together at the pair's end. The last rank's first step-4 F0 B1 is
// not paired (torch: "we don't overlap these two chunks").
std::vector<Op> DualPipeVOrder(int64_t r, int64_t p, int64_t m) {
  std::vector<Op> ord;
  const int32_t stage[2] = {static_cast<int32_t>(r), static_cast<int32_t>(2 * p - 1 - r)};
  int32_t nf[2] = {0, 0}, nb[2] = {0, 0};
  std::deque<Op> deferred;
  auto F = [&](int c, bool paired = false) { ord.push_back({'F', stage[c], nf[c]++, paired}); };
  auto B = [&](int c, bool zb) {
    const Op w{'W', stage[c], nb[c]};
    ord.push_back({'B', stage[c], nb[c]++, !zb});
    if (zb) deferred.push_back(w);
    else ord.push_back(w);
  };
  auto W = [&]() {
    if (deferred.empty()) return;
    ord.push_back(deferred.front());
    deferred.pop_front();
  };
  for (int64_t i = 0; i < 2 * (p - r - 1); ++i) F(0);
  for (int64_t i = 0; i < r + 1; ++i) F(0), F(1);
  for (int64_t i = 0; i < p - r - 1; ++i) B(1, true), W(), F(1);
  for (int64_t i = 0; i < m - 2 * p + r + 1; ++i) F(0, i > 0 || r < p - 1), B(1, false), F(1, true), B(0, false);
  for (int64_t i = 0; i < p - r - 1; ++i) B(1, false), F(1, true), B(0, false);
  bool zb = false;  // the zero-bubble split starts halfway through step 6 (odd ranks: before a B1, even: before a B0)
  for (int64_t i = 0; i < r + 1; ++i) {
    if (i == (r + 1) / 2 && r % 2 == 1) zb = true;
    B(1, zb);
    if (i == (r + 1) / 2 && r % 2 == 0) zb = true;
    B(0, zb);
  }
  for (int64_t i = 0; i < p - r - 1; ++i) W(), B(0, true);
  while (!deferred.empty()) W();
  return ord;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

// Plays operations on devices: dependency times per (stage, microbatch),
// device availability, busy time, events. Exposed sends ('C') follow the F
// of a stage (activation to the next) and the B of a stage (gradient to the
// previous) on the same device.
class Engine {
 public:
  Engine(const std::vector<SimStage>& st, int64_t devices, int64_t m, bool split_w, bool record)
      : st_(st), q_count_(static_cast<int64_t>(st.size())), m_(m), split_w_(split_w), record_(record) {
    f_end_.assign(static_cast<size_t>(q_count_ * m), -1);
    b_end_.assign(static_cast<size_t>(q_count_ * m), -1);
    free_at_.assign(static_cast<size_t>(devices), 0.0);
    held_.assign(static_cast<size_t>(devices), {});
    r_.busy_s.assign(static_cast<size_t>(devices), 0.0);
  }
  // Stop once some device's end is bound to pass cutoff_s: its free time plus the compute it has left
  // (`work_s`: per device, the F + B + W of its stages over every microbatch). SimResult::cut then.
  // The bound is a running difference of sums; the 1e-9 relative margin keeps its rounding from
  // cutting a run that ends exactly at the cutoff.
  void SetCutoff(double cutoff_s, std::vector<double> work_s) {
    cutoff_s_ = cutoff_s * (1 + 1e-9);
    left_s_ = std::move(work_s);
  }
  bool cut() const { return r_.cut; }
  // Boundary q -> q + 1 stays on one device (DualPipeV's stages p - 1 and p): no transfer there.
  void SetLocalBoundary(int64_t q) { local_.at(static_cast<size_t>(q)) = true; }
  double FReady(int64_t q, int64_t i) const {
    if (q == 0) return 0;
    double e = f_end_[Idx(q - 1, i)];
    return e < 0 ? kInf : e + Send(q - 1);
  }
  double BReady(int64_t q, int64_t i) const {
    double own = f_end_[Idx(q, i)];
    if (own < 0) return kInf;
    if (q == q_count_ - 1) return own;
    double e = b_end_[Idx(q + 1, i)];
    return e < 0 ? kInf : std::max(own, e + Send(q));
  }
  double Ready(const Op& op) const {
    if (op.kind == 'F') return FReady(op.stage, op.mb);
    if (op.kind == 'W') return 0;  // a fixed order puts W after its own B on the same device
    return BReady(op.stage, op.mb);
  }
  double BEnd(int64_t q, int64_t i) const { return b_end_[Idx(q, i)]; }
  double FreeAt(int64_t dev) const { return free_at_[static_cast<size_t>(dev)]; }
  // Runs one operation. A held one (hold) publishes its output only with the device's next
  // operation that holds nothing: then every held output leaves, each after its exposed send.
  void Run(int64_t dev, char kind, int64_t q, int64_t i, double ready, bool hold = false) {
    const SimStage& x = st_[static_cast<size_t>(q)];
    double dur = kind == 'F'
                     ? x.forward_s
                     : (kind == 'W' ? x.backward_weight_s
                                    : (split_w_ ? x.backward_input_s : x.backward_input_s + x.backward_weight_s));
    double end = Put(dev, kind, q, i, std::max(FreeAt(dev), ready), dur, hold);
    auto& held = held_[static_cast<size_t>(dev)];
    const Op op{kind, static_cast<int32_t>(q), static_cast<int32_t>(i)};
    if (hold) {
      held.push_back(op);
    } else {
      for (const Op& h : held) end = Publish(dev, h, end);
      held.clear();
      Publish(dev, op, end);
    }
    if (left_s_.empty()) return;
    double& left = left_s_[static_cast<size_t>(dev)];
    left -= dur;
    const double bound = FreeAt(dev) + std::max(0.0, left);
    if (bound > cutoff_s_) {
      r_.cut = true;
      r_.makespan_s = std::max(r_.makespan_s, bound);
    }
  }
  // Plays fixed per-device orders to completion.
  Status RunOrders(const std::vector<std::vector<Op>>& orders) {
    const int64_t p = static_cast<int64_t>(orders.size());
    std::vector<size_t> next(static_cast<size_t>(p), 0);
    size_t remaining = 0;
    for (const auto& o : orders) remaining += o.size();
    while (remaining > 0 && !cut()) {
      bool progressed = false;
      for (int64_t d = 0; d < p; ++d) {
        auto& k = next[static_cast<size_t>(d)];
        const auto& ord = orders[static_cast<size_t>(d)];
        while (k < ord.size() && !cut()) {
          const Op& op = ord[k];
          double ready = Ready(op);
          if (ready == kInf) break;
          Run(d, op.kind, op.stage, op.mb, ready, op.hold);
          ++k;
          --remaining;
          progressed = true;
        }
      }
      if (!progressed) return Status::Internal("schedule deadlock in the simulator");
    }
    return Status::OK();
  }
  SimResult Finish() {
    double busy = 0;
    for (double b : r_.busy_s) busy += b;
    const double devices = static_cast<double>(r_.busy_s.size());
    r_.bubble_fraction = r_.makespan_s > 0 ? 1.0 - busy / (devices * r_.makespan_s) : 0;
    return std::move(r_);
  }

 private:
  size_t Idx(int64_t q, int64_t i) const { return static_cast<size_t>(q * m_ + i); }
  // Exposed sends: the activation after F (not from the last stage), the gradient after B (not from the first).
  double Publish(int64_t dev, const Op& h, double end) {
    const int64_t q = h.stage, i = h.mb;
    const SimStage& x = st_[static_cast<size_t>(q)];
    if (h.kind == 'F' && q + 1 < q_count_ && !local_[static_cast<size_t>(q)] && x.exposed_send_s > 0)
      end = Put(dev, 'C', q, i, end, x.exposed_send_s);
    if (h.kind == 'B' && q > 0 && !local_[static_cast<size_t>(q - 1)] &&
        st_[static_cast<size_t>(q - 1)].exposed_send_s > 0) {
      end = Put(dev, 'C', q, i, end, st_[static_cast<size_t>(q - 1)].exposed_send_s);
    }
    if (h.kind == 'F') f_end_[Idx(q, i)] = end;
    if (h.kind == 'B') b_end_[Idx(q, i)] = end;
    return end;
  }
  double Send(int64_t q) const { return local_[static_cast<size_t>(q)] ? 0.0 : st_[static_cast<size_t>(q)].send_s; }
  double Put(int64_t dev, char kind, int64_t q, int64_t i, double start, double dur, bool hold = false) {
    double end = start + dur;
    free_at_[static_cast<size_t>(dev)] = end;
    r_.busy_s[static_cast<size_t>(dev)] += dur;
    if (record_)
      r_.events.push_back(
          {static_cast<int32_t>(dev), static_cast<int32_t>(q), static_cast<int32_t>(i), kind, start, end, hold});
    r_.makespan_s = std::max(r_.makespan_s, end);
    return end;
  }
  const std::vector<SimStage>& st_;
  int64_t q_count_, m_;
  bool split_w_, record_;
  std::vector<double> f_end_, b_end_, free_at_;
  std::vector<bool> local_ = std::vector<bool>(st_.size(), false);
  std::vector<std::vector<Op>> held_;  // per device: operations whose outputs wait for the next unheld one
  double cutoff_s_ = kInf;
  std::vector<double> left_s_;  // per device: compute not yet run (empty: no cutoff)
  SimResult r_;
};

// ZB-H1 by list scheduling: device r keeps at most p - r microbatches
// between F and B and at most r deferred W; priority B > F > W.
class ZbH1Scheduler {
 public:
  ZbH1Scheduler(int64_t p, int64_t m)
      : p_(p), m_(m), nf_(static_cast<size_t>(p), 0), nb_(static_cast<size_t>(p), 0), nw_(static_cast<size_t>(p), 0) {}

  // The device that can start something earliest acts next (ties: the lowest device). Running an
  // operation on device d changes only the choices of d and its neighbours (d - 1 reads d's backward
  // ends, d + 1 its forward ends): those are chosen again and a tournament tree over the devices keeps
  // the earliest, O(log p) per operation instead of a scan of every device.
  Status Run(Engine* eng) {
    int64_t done = 0, total = 3 * p_ * m_;
    choice_.assign(static_cast<size_t>(p_), Choice{0, kInf});
    size_t leaves = 1;
    while (leaves < static_cast<size_t>(p_)) leaves *= 2;
    tree_.assign(2 * leaves, -1);
    leaves_ = leaves;
    for (int64_t d = 0; d < p_; ++d) Choose(*eng, d);
    Refresh(0, p_ - 1);
    while (done < total && !eng->cut()) {
      const int64_t best_dev = tree_[1];
      if (best_dev < 0) return Status::Internal("ZB-H1 simulation found no runnable operation");
      const Choice best = choice_[static_cast<size_t>(best_dev)];
      size_t du = static_cast<size_t>(best_dev);
      int64_t& counter = best.kind == 'F' ? nf_[du] : (best.kind == 'B' ? nb_[du] : nw_[du]);
      eng->Run(best_dev, best.kind, best_dev, counter, best.start);
      ++counter;
      ++done;
      // Device d - 1 reads d's backward ends, d + 1 its forward ends: a W changes no neighbour's choice.
      const int64_t lo = best.kind == 'B' ? std::max<int64_t>(0, best_dev - 1) : best_dev,
                    hi = best.kind == 'F' ? std::min(p_ - 1, best_dev + 1) : best_dev;
      for (int64_t d = lo; d <= hi; ++d) Choose(*eng, d);
      Refresh(lo, hi);
    }
    return Status::OK();
  }

 private:
  struct Choice {
    char kind;  // 0: nothing runnable on the device
    double start;
  };

  // Device d's next operation: the highest-priority candidate ready when the
  // device is free; else the earliest ready one.
  Choice Next(const Engine& eng, int64_t d) const {
    size_t du = static_cast<size_t>(d);
    double fa = eng.FreeAt(d);
    struct Cand {
      char kind;
      double ready;
    };
    Cand cands[3];
    int nc = 0;
    if (nb_[du] < m_ && nb_[du] - nw_[du] < d + 1 && nb_[du] < nf_[du]) cands[nc++] = {'B', eng.BReady(d, nb_[du])};
    if (nf_[du] < m_ && nf_[du] - nb_[du] < p_ - d) cands[nc++] = {'F', eng.FReady(d, nf_[du])};
    if (nw_[du] < nb_[du]) cands[nc++] = {'W', eng.BEnd(d, nw_[du])};
    for (int c = 0; c < nc; ++c) {
      if (cands[c].ready <= fa) return {cands[c].kind, fa};
    }
    Choice earliest{0, kInf};
    for (int c = 0; c < nc; ++c) {
      if (cands[c].ready < earliest.start) earliest = {cands[c].kind, cands[c].ready};
    }
    return earliest;
  }

  // Device a before b: runnable, then the earlier start, then the lower device.
  bool Before(int64_t a, int64_t b) const {
    if (a < 0) return false;
    if (b < 0) return true;
    const Choice &x = choice_[static_cast<size_t>(a)], &y = choice_[static_cast<size_t>(b)];
    if ((x.kind != 0) != (y.kind != 0)) return x.kind != 0;
    if (x.kind == 0) return a < b;
    return x.start < y.start || (x.start == y.start && a < b);
  }
  // Device d's choice and its leaf; the nodes above wait for Refresh.
  void Choose(const Engine& eng, int64_t d) {
    Choice c = Next(eng, d);
    if (c.kind != 0 && !(c.start < kInf)) c.kind = 0;  // as the scan: only a finite start is runnable
    choice_[static_cast<size_t>(d)] = c;
    tree_[leaves_ + static_cast<size_t>(d)] = c.kind != 0 ? d : -1;
  }
  // The nodes above leaves lo..hi, level by level: adjacent leaves share their ancestors after a level
  // or two, so three changed devices cost about one path, not three.
  void Refresh(int64_t lo, int64_t hi) {
    for (size_t a = (leaves_ + static_cast<size_t>(lo)) / 2, b = (leaves_ + static_cast<size_t>(hi)) / 2; a >= 1;
         a /= 2, b /= 2) {
      for (size_t i = a; i <= b; ++i)
        tree_[i] = Before(tree_[2 * i], tree_[2 * i + 1]) ? tree_[2 * i] : tree_[2 * i + 1];
    }
  }

  int64_t p_, m_;
  std::vector<int64_t> nf_, nb_, nw_;  // per device: F, B and W done
  std::vector<Choice> choice_;         // per device: its current choice
  std::vector<int64_t> tree_;          // tournament tree of devices (-1: none runnable); root tree_[1]
  size_t leaves_ = 1;
};

// PipeDream's asynchronous 1F1B on one replica of a stage: its microbatches
// (every r-th from k), in_flight - 1 forwards first, then one F one B.
std::vector<Op> ReplicaOrder(int32_t stage, int64_t k, int64_t r, int64_t in_flight, int64_t m) {
  std::vector<int32_t> mbs;
  for (int64_t j = k; j < m; j += r) mbs.push_back(static_cast<int32_t>(j));
  const int64_t n = static_cast<int64_t>(mbs.size());
  const int64_t warm = std::min(in_flight - 1, n);
  std::vector<Op> ord;
  for (int64_t i = 0; i < warm; ++i) ord.push_back({'F', stage, mbs[static_cast<size_t>(i)]});
  for (int64_t i = 0; i < n - warm; ++i) {
    ord.push_back({'F', stage, mbs[static_cast<size_t>(warm + i)]});
    ord.push_back({'B', stage, mbs[static_cast<size_t>(i)]});
  }
  for (int64_t i = n - warm; i < n; ++i) ord.push_back({'B', stage, mbs[static_cast<size_t>(i)]});
  return ord;
}

}  // namespace

Status CheckDualPipeV(int64_t p, int64_t v, int64_t m) {
  if (v != 2)
    return Status::InvalidArgument(
        fmt::format("the dualpipev schedule runs 2 chunks per device (2p stages), not {}", v));
  if (m < 2 * p) {
    return Status::InvalidArgument(fmt::format(
        "the dualpipev schedule needs at least as many microbatches ({}) as stages (2 x pp = {})", m, 2 * p));
  }
  return Status::OK();
}

Status SimulateSchedule(Schedule s, const std::vector<SimStage>& st, int64_t p, int64_t m, bool record, SimResult* out,
                        double cutoff_s) {
  if (p < 1 || m < 1 || st.empty() || static_cast<int64_t>(st.size()) % p != 0) {
    return Status::InvalidArgument("schedule simulation needs p >= 1, m >= 1 and p * v stages");
  }
  const int64_t q_count = static_cast<int64_t>(st.size());
  const int64_t v = q_count / p;
  if (s == Schedule::kInterleaved && m % p != 0) {
    return Status::InvalidArgument(fmt::format(
        "the interleaved schedule needs the number of microbatches ({}) to be a multiple of the pipeline depth ({})", m,
        p));
  }
  if (s == Schedule::kDualPipeV) PLANNER_RETURN_IF_ERROR(CheckDualPipeV(p, v, m));
  if (s != Schedule::kInterleaved && s != Schedule::kDualPipeV && v != 1) {
    return Status::InvalidArgument("only the interleaved and dualpipev schedules take several chunks per device");
  }
  const bool split_w = s == Schedule::kZbH1 || s == Schedule::kDualPipeV;
  Engine eng(st, p, m, split_w, record);
  if (cutoff_s < kInf && !record) {
    std::vector<double> work(static_cast<size_t>(p), 0.0);
    for (int64_t q = 0; q < q_count; ++q) {
      const SimStage& x = st[static_cast<size_t>(q)];
      work[static_cast<size_t>(StagePosition(s, q, p))] +=
          static_cast<double>(m) * (x.forward_s + x.backward_input_s + x.backward_weight_s);
    }
    eng.SetCutoff(cutoff_s, std::move(work));
  }
  if (s == Schedule::kDualPipeV) {
    eng.SetLocalBoundary(p - 1);  // stages p - 1 and p are both on the last rank
    std::vector<std::vector<Op>> orders;
    for (int64_t r = 0; r < p; ++r) orders.push_back(DualPipeVOrder(r, p, m));
    PLANNER_RETURN_IF_ERROR(eng.RunOrders(orders));
  } else if (!split_w) {
    PLANNER_RETURN_IF_ERROR(eng.RunOrders(BuildOrders(s, p, v, m)));
  } else {
    PLANNER_RETURN_IF_ERROR(ZbH1Scheduler(p, m).Run(&eng));
  }
  *out = eng.Finish();
  return Status::OK();
}

Status SimulateReplicated(const std::vector<SimStage>& st, const std::vector<int64_t>& replicas,
                          const std::vector<int64_t>& in_flight, int64_t m, bool record, SimResult* out) {
  const size_t stages = st.size();
  if (stages == 0 || replicas.size() != stages || in_flight.size() != stages || m < 1) {
    return Status::InvalidArgument(
        "replicated simulation needs one replica count and in-flight count per stage, and m >= 1");
  }
  std::vector<std::vector<Op>> orders;
  for (size_t q = 0; q < stages; ++q) {
    const int64_t r = replicas[q];
    if (r < 1 || in_flight[q] < 1) return Status::InvalidArgument("replicas and in-flight counts must be positive");
    for (int64_t k = 0; k < r; ++k) orders.push_back(ReplicaOrder(static_cast<int32_t>(q), k, r, in_flight[q], m));
  }
  Engine eng(st, static_cast<int64_t>(orders.size()), m, false, record);
  PLANNER_RETURN_IF_ERROR(eng.RunOrders(orders));
  *out = eng.Finish();
  return Status::OK();
}

}  // namespace planner
