#include "runtime/rank_program.h"

#include <algorithm>

#include <fmt/format.h>

namespace planner {

Status RankProgramOf(const LaunchPlan& L, const LaunchLayout& y, int64_t rank, int64_t start, int64_t end,
                     std::vector<Action>* out) {
  out->clear();
  const LaunchRank& me = L.ranks[static_cast<size_t>(rank)];
  if (me.program < 0 || me.program >= static_cast<int64_t>(L.programs.size())) {
    return Status::InvalidArgument(
        fmt::format("{}: rank {} has no program; regenerate the launch directory with planner codegen", L.path, rank));
  }
  const std::vector<Action>& all = L.programs[static_cast<size_t>(me.program)].actions;
  if (!y.async) {
    *out = all;
    return Status::OK();
  }
  // The microbatches the run's programs number, over every program (a rank may have none in the
  // last round): run.iterations x m, or the file was edited and its programs cover another run.
  int64_t covered = 0;
  for (const RankProgram& g : L.programs) {
    for (const Action& a : g.actions) {
      if (HasMicrobatch(a)) covered = std::max<int64_t>(covered, a.microbatch + 1);
    }
  }
  const int64_t m = y.microbatches;
  if (covered != L.run.iterations * m) {
    return Status::InvalidArgument(
        fmt::format("{}: the asynchronous (pipedream) programs cover {} microbatches but run.iterations {} x {} per "
                    "iteration is {}; regenerate the launch directory with planner codegen",
                    L.path, covered, L.run.iterations, m, L.run.iterations * m));
  }
  if (end > L.run.iterations) {
    return Status::InvalidArgument(
        fmt::format("{}: the asynchronous (pipedream) programs cover {} iterations, the run asks for {}; "
                    "run planner codegen again with --iterations {}",
                    L.path, L.run.iterations, end, end));
  }
  *out = WindowOfRun(all, start * m, end * m);
  return Status::OK();
}

std::vector<Action> SingleDeviceProgram(int64_t microbatches) {
  std::vector<Action> v;
  for (int64_t j = 0; j < microbatches; ++j) v.push_back({ActionKind::kForward, 0, static_cast<int32_t>(j)});
  for (int64_t j = 0; j < microbatches; ++j) v.push_back({ActionKind::kBackwardInput, 0, static_cast<int32_t>(j)});
  v.push_back({ActionKind::kOptimizerStep, -1, 0});
  return v;
}

}  // namespace planner
