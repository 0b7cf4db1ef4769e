// What the thread-rank executor tests share: a fresh run directory under the temp directory, and
// a launch run with one thread per rank (every rank's summary).
#pragma once

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include "runtime/comm/communicator.h"
#include "runtime/executor.h"
#include "spec/launch_plan.h"

namespace planner::testing {

// An empty directory <tmp>/planner-<prefix>-<pid>-<n>-<name>, n counting up per process.
inline std::string FreshRunDir(const std::string& prefix, const std::string& name) {
  static std::atomic<int> n{0};
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / fmt::format("planner-{}-{}-{}-{}", prefix, ::getpid(), n++, name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

// Runs `L` with one thread per rank, quiet and keeping gradients; every rank's summary.
inline Status RunOnThreads(const LaunchPlan& L, const ModelSpec& model, RunOptions opt, std::vector<RunSummary>* out,
                           const std::string& prefix) {
  opt.quiet = true;
  opt.keep_gradients = true;
  if (opt.run_dir.empty()) opt.run_dir = FreshRunDir(prefix, "run");
  out->assign(L.ranks.size(), RunSummary());
  return RunThreadRanks(
      static_cast<int>(L.ranks.size()),
      [&](Communicator& world) -> Status {
        world.set_timeout_seconds(L.run.timeout_s);
        return RunLaunch(L, model, world, opt, &(*out)[static_cast<size_t>(world.rank())]);
      },
      L.run.timeout_s);
}

}  // namespace planner::testing
