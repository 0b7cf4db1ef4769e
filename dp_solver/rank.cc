#include "dp_solver/rank.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/units.h"

namespace planner {

double IterationLowerBound(const Candidate& k, const Evaluation& x) {
  return MakespanLowerBound(k.schedule, x.sim, k.pp, k.num_microbatches) + x.dp_s + x.optimizer_s;
}

double Ranking::WorstKept() const { return best_.size() < top_k_ ? INFINITY : best_.back().iteration_s; }

void Ranking::Keep(Plan&& pl) {
  const double iter = pl.predicted.iteration_s;
  // One runner-up per layout and time.
  for (const auto& k : best_) {
    const Plan& q = k.plan;
    if (q.config == pl.config && q.tp == pl.tp && q.pp == pl.pp && q.cp == pl.cp && q.ep == pl.ep && q.etp == pl.etp &&
        q.sequence_parallel == pl.sequence_parallel && q.schedule == pl.schedule && q.interleave == pl.interleave &&
        q.recompute == pl.recompute && q.recompute_modules == pl.recompute_modules && q.zero_stage == pl.zero_stage &&
        std::fabs(k.iteration_s - iter) <= 1e-9 * iter) {
      return;
    }
  }
  auto pos =
      std::upper_bound(best_.begin(), best_.end(), iter, [](double x, const Scored& y) { return x < y.iteration_s; });
  best_.insert(pos, Scored{std::move(pl), iter});
  if (best_.size() > top_k_) best_.pop_back();
}

void Ranking::NoFit(const Candidate& k, const Evaluation& x, double usable) {
  if (x.zero_max < 0) {
    if (zero_conflict_.empty()) {
      zero_conflict_ = fmt::format("tp={} cp={} pp={} dp={}: {}", k.tp, k.cp, k.pp, k.dp,
                                   k.dp * k.cp <= 1 ? "ZeRO-1..3 shard over data-parallel ranks and there are none"
                                                    : "ZeRO-2/3 are not run with pipelining (DeepSpeed refuses them; "
                                                      "Megatron's distributed optimizer is ZeRO-1; torchtitan runs "
                                                      "FSDP under pipelining: --engine torchtitan)");
    }
    return;
  }
  const double over = x.peak_bytes - usable;
  if (!(over < least_overflow_bytes_)) return;
  least_overflow_bytes_ = over;
  size_t worst = static_cast<size_t>(std::max_element(x.peak.begin(), x.peak.end()) - x.peak.begin());
  binding_ = fmt::format(
      "stage {} needs {:.1f} GiB > {:.1f} GiB usable ({:.0f} bytes; best try: tp={} cp={} pp={} dp={}{} microbatch={} "
      "{} recompute={}, ZeRO-{}{})",
      worst, x.peak[worst] / kGiB, usable / kGiB, x.peak[worst], k.tp, k.cp, k.pp, k.dp,
      (k.sequence_parallel && k.tp > 1 ? " sp" : "") +
          (k.ep > 1 || k.etp > 1 ? fmt::format(" ep={} etp={}", k.ep, k.etp) : std::string()),
      k.microbatch_size, ScheduleName(k.schedule), RecomputeLabel(k.recompute, 0, k.recompute_modules), x.zero_max,
      k.pp > 1 && k.dp > 1 && x.zero_max == 1 ? "; ZeRO-2/3 are not run with pipelining" : "");
}

void Ranking::Dropped(const Status& why) {
  // A family that got as far as memory names the binding constraint better
  // than one that did not apply (a forced replication at another tp).
  const bool infeasible = why.code() == StatusCode::kInfeasible;
  if (dropped_.ok() || (infeasible && dropped_.code() != StatusCode::kInfeasible)) dropped_ = why;
}

// Absorb names every field of Rejections: a new one must be added there too.
static_assert(sizeof(Rejections) == 7 * sizeof(std::string), "Ranking::Absorb: merge the new Rejections field");

void Ranking::Absorb(Ranking&& later) {
  if (later.least_overflow_bytes_ < least_overflow_bytes_) {
    least_overflow_bytes_ = later.least_overflow_bytes_;
    binding_ = std::move(later.binding_);
  }
  if (zero_conflict_.empty()) zero_conflict_ = std::move(later.zero_conflict_);
  if (!later.dropped_.ok()) Dropped(later.dropped_);
  other_fits_ = other_fits_ || later.other_fits_;
  for (auto field : {&Rejections::tp, &Rejections::pp, &Rejections::batch, &Rejections::interleave, &Rejections::cp,
                     &Rejections::ep, &Rejections::moe_overlap}) {
    if ((rejections_.*field).empty()) rejections_.*field = std::move(later.rejections_.*field);
  }
  for (Scored& s : later.best_) Keep(std::move(s.plan));
}

namespace {

PlanSummary RunnerUp(const Plan& r, const Plan& win) {
  PlanSummary s;
  static_cast<ParallelLayout&>(s) = r;  // the runner-up's layout
  s.iteration_s = r.predicted.iteration_s;
  s.samples_per_second = r.predicted.samples_per_second;
  s.peak_memory_bytes = r.predicted.peak_memory_bytes;
  s.why_lost = fmt::format(
      "{:.1f}% slower: pipeline {} vs {}, bubble {:.1f}% vs {:.1f}%, exposed DP all-reduce {} vs {}",
      100.0 * (r.predicted.iteration_s / win.predicted.iteration_s - 1.0), FormatSeconds(r.predicted.pipeline_s),
      FormatSeconds(win.predicted.pipeline_s), 100 * r.predicted.bubble_fraction, 100 * win.predicted.bubble_fraction,
      FormatSeconds(r.predicted.dp_allreduce_s), FormatSeconds(win.predicted.dp_allreduce_s));
  return s;
}

}  // namespace

Status Ranking::Finish(int64_t gpus, int64_t batch, Plan* out) {
  if (best_.empty()) {
    if (!binding_.empty()) return Status::Infeasible("no plan fits in memory: " + binding_);
    if (!zero_conflict_.empty()) {
      return Status::InvalidArgument(
          fmt::format("--zero allows no ZeRO stage the layouts can run ({}); allow --zero 0 or 1, or other --pp / --tp",
                      zero_conflict_));
    }
    std::string why = rejections_.Summary();
    if (why.empty() && dropped_.code() == StatusCode::kInfeasible)
      return dropped_.WithContext("no plan fits in memory");
    if (why.empty() && !dropped_.ok()) return dropped_;
    if (!dropped_.ok()) why += "; " + dropped_.message();
    Rejections others = rejections_;
    others.moe_overlap.clear();
    const bool overlap_only = !rejections_.moe_overlap.empty() && others.Summary().empty();
    return Status::Infeasible(fmt::format(
        "no configuration divides the problem: {} GPUs, global batch {}{}; {}", gpus, batch,
        why.empty() ? "" : " (" + why + ")",
        overlap_only ? "allow --schedule interleaved or pp 1 with --recompute none or selective, or --moe-overlap off"
                     : "choose a batch divisible by microbatch x data-parallel size, or other --tp/--pp"));
  }
  Plan win = std::move(best_.front().plan);
  for (size_t i = 1; i < best_.size(); ++i) win.runners_up.push_back(RunnerUp(best_[i].plan, win));
  best_.clear();
  *out = std::move(win);
  return Status::OK();
}

}  // namespace planner
