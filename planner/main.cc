// planner: decides how to train a deep network on many GPUs.
// The only place that turns failures into text and exit codes (README: exit codes).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "common/edit_distance.h"
#include "common/log.h"
#include "common/progress.h"
#include "planner/commands.h"
#include "planner_config.h"

namespace planner {

int RunCli(int argc, char** argv) {
  CLI::App app{"planner: decides how to train a deep network on many GPUs"};
  app.set_version_flag("--version", std::string("planner ") + PLANNER_VERSION);
  app.require_subcommand(1);
  bool quiet = false;
  app.add_flag("-q,--quiet", quiet, "print no notes on stderr");
  std::map<CLI::App*, Runner> runners;
  auto add = [&](Runner (*reg)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    Runner r = reg(app);
    runners[app.get_subcommands({})[before]] = r;
  };
  add(RegisterSolve);
  add(RegisterInspect);
  add(RegisterImport);
  add(RegisterRun);
  {
    size_t before = app.get_subcommands({}).size();
    Runner r = RegisterProfile(app, argc, argv);
    runners[app.get_subcommands({})[before]] = r;
  }
  {
    std::error_code ec;
    std::string self = std::filesystem::canonical("/proc/self/exe", ec).string();
    size_t before = app.get_subcommands({}).size();
    Runner r = RegisterCodegen(app, ec ? std::string("planner") : self);
    runners[app.get_subcommands({})[before]] = r;
  }
  if (argc >= 2 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (auto* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      LogError(fmt::format("unknown subcommand '{}'{}; run 'planner --help'", argv[1], DidYouMean(argv[1], names)));
      return kExitInput;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    LogError(fmt::format("{}; run 'planner --help'", e.what()));
    return kExitInput;
  }
  SetQuiet(quiet);
  for (auto& [sub, run] : runners) {
    if (sub->parsed()) {
      Status s = run();
      if (!s.ok()) LogError(s.message());
      if (!s.ok() && Interrupted()) return kExitInterrupted;
      return ExitCodeFor(s);
    }
  }
  return kExitInput;
}

}  // namespace planner

int main(int argc, char** argv) {
  try {
    return planner::RunCli(argc, argv);
  } catch (const std::exception& e) {  // last resort; reaching this is a bug
    planner::LogError(fmt::format("internal error: {}", e.what()));
    return planner::kExitFailure;
  }
}
