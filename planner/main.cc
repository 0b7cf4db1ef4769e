// planner: decides how to train a deep network on many GPUs.
// The only place that turns failures into text and exit codes (README: exit codes).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>

#include <fmt/format.h>

#include "common/edit_distance.h"
#include "common/log.h"
#include "common/progress.h"
#include "planner/commands.h"
#include "planner_config.h"
#include "runtime/comm/communicator.h"

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
  add(RegisterCalibrate);
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
      if (s.ok()) return kExitOk;
      // An empty message: another rank of the job prints the line (planner run's interruption).
      if (!s.message().empty()) LogError(s.message());
      SetStopMode(StopMode::kSilent);  // a signal from now on (mpirun ending the job) adds no line
      const int code = Interrupted() ? InterruptExitCode() : ExitCodeFor(s);
      LeaveJobAfterError(code);  // under mpirun: the other ranks end now, not at their timeout
      return code;
    }
  }
  return kExitInput;
}

}  // namespace planner

// Results go to stdout through stdio's buffer: a failed write (a full disk
// behind `> file`, /dev/full) shows only when it is flushed. Checked once at
// the end, so a truncated result is exit 1, not 0.
int FlushStdout(int rc) {
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return rc;
  const int e = errno;
  planner::LogError(fmt::format("standard output: write failed: {}", std::strerror(e != 0 ? e : EIO)));
  return rc == planner::kExitOk ? planner::kExitFailure : rc;
}

int main(int argc, char** argv) {
  // Exceptions are turned into Status where they arise (file, line, field; the
  // path for I/O). This is the last resort for one that was not: still one
  // "planner: error:" line and exit 1, never an abort.
  try {
    return FlushStdout(planner::RunCli(argc, argv));
  } catch (const std::bad_alloc&) {
    std::fputs("planner: error: out of memory\n", stderr);  // allocates nothing
    return planner::kExitFailure;
  } catch (const std::exception& e) {
    planner::LogError(planner::StatusFromException(e).message());
    return planner::kExitFailure;
  } catch (...) {
    planner::LogError("internal error: an exception of unknown type");
    return planner::kExitFailure;
  }
}
