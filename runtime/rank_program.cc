#include "runtime/rank_program.h"

#include <algorithm>

#include <fmt/format.h>

namespace planner {

Status RankProgramOf(const LaunchPlan& L, const LaunchLayout& y, int64_t rank, int64_t start, int64_t end, std::vector<Action>* out) {
  out->clear();
  const LaunchRank& me = L.ranks[static_cast<size_t>(rank)];
  if (me.program < 0 || me.program >= static_cast<int64_t>(L.programs.size())) {
    return Status::InvalidArgument(fmt::format("{}: rank {} has no program; regenerate the launch directory with planner codegen", L.path, rank));
  }
  const std::vector<Action>& all = L.programs[static_cast<size_t>(me.program)].actions;
  if (!y.async) {
    *out = all;
    return Status::OK();
  }
  int64_t covered = 0;  // microbatches the run's program numbers
  for (const Action& a : all) {
    if (a.kind != ActionKind::kGradReduce && a.kind != ActionKind::kOptimizerStep) covered = std::max<int64_t>(covered, a.microbatch + 1);
  }
  const int64_t m = y.microbatches;
  if (end > L.run.iterations) {
    return Status::InvalidArgument(fmt::format("{}: the asynchronous (pipedream) programs cover {} iterations ({} microbatches of this rank's), "
                                               "the run asks for {}; run planner codegen again with --iterations {}",
                                               L.path, L.run.iterations, covered, end, end));
  }
  *out = ActionsOfMicrobatches(all, start * m, end * m);
  for (Action& a : *out) {
    if (a.kind != ActionKind::kGradReduce && a.kind != ActionKind::kOptimizerStep) a.microbatch -= static_cast<int32_t>(start * m);
  }
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
