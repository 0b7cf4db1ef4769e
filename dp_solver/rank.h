// Ranking and pruning in the joint search (docs/cost_model.md section 4,
// "Search order and pruning"): a lower bound per candidate, the top K plans
// by predicted iteration time, the runners-up with why each lost, and, when
// no plan is left, the error that says why. Thread-compatible.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "dp_solver/candidates.h"
#include "dp_solver/evaluate.h"
#include "spec/plan.h"

namespace planner {

// Lower bound on an evaluated candidate's iteration time: the simulator's
// makespan bound plus the exposed DP all-reduce and the optimizer step.
double IterationLowerBound(const Candidate& k, const Evaluation& x);

class Ranking {
 public:
  explicit Ranking(int top_k) : top_k_(static_cast<size_t>(top_k)) {}

  // The K-th best iteration time so far; infinite while fewer are kept. A
  // candidate whose lower bound reaches it cannot enter the ranking.
  double WorstKept() const;
  // Keeps `plan` if it is among the K fastest. A plan that only differs from
  // a kept one by an equally fast microbatch size adds nothing and is dropped.
  void Keep(Plan&& plan);

  // Why candidates were dropped, for Finish when no plan is kept: a uniform
  // candidate with no ZeRO stage that fits (the one closest to fitting is
  // named), layouts that do not divide the problem, and the first other cause
  // (a family that does not fit, a table the inputs cannot cost).
  void NoFit(const Candidate& k, const Evaluation& x, double usable_bytes);
  Rejections& rejections() { return rejections_; }
  void Dropped(const Status& why);

  // The best plan with the others as runners-up (why each lost). When none is
  // kept: Infeasible naming the binding constraint (memory, else what left
  // the layouts out), or the one cause that dropped candidates as it is.
  Status Finish(int64_t gpus, int64_t global_batch, Plan* out);

  // One pass over two selective module sets (SolveAuto): whether any candidate that fits uses another
  // recompute than selective with `set` (the note's "with core_attn alone no plan fits").
  void Watch(uint32_t set) { watch_set_ = set; }
  void Fits(Recompute rc, uint32_t modules) {
    if (!(rc == Recompute::kSelective && modules == watch_set_)) other_fits_ = true;
  }
  bool OtherFits() const { return other_fits_; }

  // A ranking with the same K and watched set and nothing recorded: one part of the search run apart
  // (a thread's share), absorbed afterwards in the order the parts would have run one after another.
  Ranking Fresh() const {
    Ranking r(static_cast<int>(top_k_));
    r.watch_set_ = watch_set_;
    return r;
  }
  // What `later` recorded, as if its calls had followed this one's: the first rejection of each kind
  // and the first zero conflict stay, the closest misfit is the earlier one on ties, its plans are kept.
  void Absorb(Ranking&& later);

 private:
  struct Scored {
    Plan plan;
    double iteration_s = 0;
  };
  size_t top_k_;
  std::vector<Scored> best_;  // by iteration time, at most top_k_
  double least_overflow_bytes_ = INFINITY;
  std::string binding_;  // the uniform candidate closest to fitting
  std::string
      zero_conflict_;  // a layout --zero left no stage for (ZeRO-2/3 with pipelining, ZeRO >= 1 without replicas)
  Status dropped_ = Status::OK();
  uint32_t watch_set_ = 0;
  bool other_fits_ = false;
  Rejections rejections_;
};

}  // namespace planner
