// planner run LAUNCH_DIR [--iterations N] [--dump-gradients] [--reference]   (one process per rank: bash LAUNCH_DIR/run.sh)
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

#include "common/digest.h"
#include "common/file_writer.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/units.h"
#include "planner/commands.h"
#include "runtime/agree.h"
#include "runtime/executor.h"
#include "runtime/launch_layout.h"
#include "runtime/run_lock.h"
#include "spec/input_limits.h"
#include "spec/yaml_reader.h"

namespace planner {

namespace {

struct RunArgs {
  std::string dir;
  int64_t iterations = 0;
  bool dump = false, reference = false, comm_only = false;
  std::string run_id, resume;
  int64_t checkpoint_every = -1;
  double initial_loss_scale = 0;  // 0: LossScaler's default (65536)
};

std::string Stamp(int64_t secs) {
  std::time_t t = static_cast<std::time_t>(secs);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::gmtime(&t));
  return buf;
}

// --run-id and --resume name a directory under LAUNCH/runs: a plain name, never a path that
// would leave it ("..", "/") or hide it.
Status CheckRunId(const char* flag, const std::string& id) {
  const bool plain = !id.empty() && id[0] != '.' && id.size() <= 200 && std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
  if (plain) return Status::OK();
  return Status::InvalidArgument(fmt::format(
      "{} '{}': must be a plain name of letters, digits, '-', '_' and '.' (not starting with '.'), not a path; "
      "it names LAUNCH/runs/<id>",
      flag, Printable(id)));
}

// Everything about the launch directory and the flags that one process can check, before any MPI
// call: the run ids, the model against the stages, the layout, the checkpoint to resume.
Status CheckLaunchDir(const RunArgs& a, const std::string& lpath, const std::string& mpath, const LaunchPlan& L,
                      const ModelSpec& model) {
  namespace fs = std::filesystem;
  if (!a.run_id.empty()) PLANNER_RETURN_IF_ERROR(CheckRunId("--run-id", a.run_id));
  if (!a.resume.empty()) PLANNER_RETURN_IF_ERROR(CheckRunId("--resume", a.resume));
  if (!a.resume.empty() && !a.run_id.empty()) {
    return Status::InvalidArgument("--resume continues runs/<ID> in place; drop --run-id");
  }
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const auto& s : L.stages) ranges.emplace_back(s.first_layer, s.last_layer);
  Status cover = CheckLayerCover(lpath, ranges, static_cast<int64_t>(model.layers.size()), mpath);
  if (!cover.ok()) return Status::InvalidArgument(cover.message() + " (or run planner codegen again)");
  // LoRA trains adapters beside frozen weights; the runtime trains every weight: another run than the plan's.
  if (model.is_gpt && model.gpt.lora.rank > 0)
    return Status::NotSupported(fmt::format(
        "{}:{}: field 'gpt.lora': planner run trains every weight, not the plan's LoRA adapters (rank {}); run the "
        "plan with megatron_bridge.py (planner codegen --export megatron-bridge), or remove gpt.lora and solve again",
        mpath, model.gpt.lora.line, model.gpt.lora.rank));
  LaunchLayout layout;
  PLANNER_RETURN_IF_ERROR(LayoutOf(L, &layout));
  PLANNER_RETURN_IF_ERROR(CheckRunPrecision(L, model));
  if (a.resume.empty()) return Status::OK();
  const std::string run_dir = (fs::path(a.dir) / "runs" / a.resume).string();
  std::error_code ec;
  if (!fs::exists(fs::path(run_dir) / "ckpt", ec)) {
    return Status::NotFound(
        fmt::format("{}: no checkpoint to resume{}; run with --checkpoint-every N first", run_dir,
                    ec && ec != std::errc::no_such_file_or_directory ? " (" + ec.message() + ")" : std::string()));
  }
  return Status::OK();
}

}  // namespace

Runner RegisterRun(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "execute a launch directory (one process per rank, under mpirun / srun)");
  auto a = std::make_shared<RunArgs>();
  cmd->add_option("launch", a->dir, "launch directory from planner codegen")->required();
  cmd->add_option("--iterations", a->iterations, "iterations (default: launch.yaml's)")->check(CLI::Range(1, 10000000));
  cmd->add_flag("--dump-gradients", a->dump, "write the first iteration's gradients to runs/<id>/grads/ (tests)");
  cmd->add_flag("--reference", a->reference,
                "run the same training in this one process (whole model, same data), for comparison");
  cmd->add_flag("--comm-only", a->comm_only,
                "the plan's transfers and all-reduces only, with zeros instead of every layer (no compute): the "
                "transfer path alone");
  cmd->add_option("--run-id", a->run_id, "name of runs/<id> (default: the start time)");
  cmd->add_option("--checkpoint-every", a->checkpoint_every,
                  "write runs/<id>/ckpt/ every N iterations (default: launch.yaml's)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--initial-loss-scale", a->initial_loss_scale,
                  "fp16 runs: the dynamic loss scale to start from (Megatron's --initial-loss-scale; default 65536)")
      ->check(CLI::Validator(
          [](std::string& v) {
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            return end != v.c_str() && *end == '\0' && x >= 1 && x <= 1e38
                       ? std::string()
                       : "'" + v + "' is not a scale from 1 to 1e38 (e.g. 65536)";
          },
          "SCALE"));
  cmd->add_option("--resume", a->resume, "continue runs/<ID> from its last checkpoint (into the same directory)");
  return [a]() -> Status {
    namespace fs = std::filesystem;
    LaunchPlan L;
    const std::string lpath = (fs::path(a->dir) / "launch.yaml").string();
    PLANNER_RETURN_IF_ERROR(LoadLaunchPlan(lpath, &L));
    const std::string mpath = (fs::path(a->dir) / L.model_file).string();
    std::string text;
    PLANNER_RETURN_IF_ERROR(ReadTextFile(mpath, &text));
    ModelSpec model;
    PLANNER_RETURN_IF_ERROR(ParseModelSpec(mpath, text, &model));
    if (!L.model_digest.empty() && model.digest != L.model_digest) {
      return Status::InvalidArgument(
          fmt::format("{}: model_digest {} does not match {} ({}); run planner codegen again", lpath, L.model_digest,
                      mpath, model.digest));
    }
    PLANNER_RETURN_IF_ERROR(CheckLaunchDir(*a, lpath, mpath, L, model));
    if (a->reference) L = SingleProcessPlan(L, model);
    const int64_t n = static_cast<int64_t>(L.ranks.size() + L.servers.size());  // the workers and the summation servers
    auto body = [&](Communicator& world) -> Status {
      world.set_timeout_seconds(L.run.timeout_s);
      // One run id for all ranks: rank 0's clock, broadcast.
      float stamp[2] = {0, 0};
      if (world.rank() == 0) {
        int64_t now = static_cast<int64_t>(std::time(nullptr));
        stamp[0] = static_cast<float>(now >> 16);
        stamp[1] = static_cast<float>(now & 0xFFFF);
      }
      PLANNER_RETURN_IF_ERROR(world.Broadcast(stamp, 2, 0));
      std::string id = !a->resume.empty() ? a->resume
                       : a->run_id.empty()
                           ? Stamp((static_cast<int64_t>(stamp[0]) << 16) | static_cast<int64_t>(stamp[1])) +
                                 (a->reference ? "-reference" : "")
                           : a->run_id;
      RunOptions o;
      o.run_dir = (fs::path(a->dir) / "runs" / id).string();
      o.iterations = a->iterations;
      o.dump_gradients = a->dump;
      o.comm_only = a->comm_only;
      o.checkpoint_every = a->checkpoint_every;
      o.initial_loss_scale = a->initial_loss_scale;
      if (!a->resume.empty()) o.resume_from = o.run_dir;  // its checkpoint's presence: checked before MPI started
      // Rank 0 locks runs/<id> before anything is written there (a second job with this id stops
      // here, exit 2); every rank learns the outcome in one agreement step.
      RunDirLock lock;
      Status locked = MakeDirectories(o.run_dir);
      if (locked.ok() && world.rank() == 0) locked = lock.Acquire(o.run_dir);
      PLANNER_RETURN_IF_ERROR(AgreeOnStatus(world, locked));
      RunSummary s;
      PLANNER_RETURN_IF_ERROR(RunLaunch(L, model, world, o, &s));
      if (world.rank() == 0) {
        LogNote(
            fmt::format("run {}: loss {:.4f} -> {:.4f}; iteration {} measured vs {} predicted; bubble {:.1f}% vs "
                        "{:.1f}%; report {}/report.md",
                        id, s.loss.front(), s.loss.back(), FormatSeconds(s.median_iteration_s),
                        FormatSeconds(L.predicted_iteration_s), 100 * s.measured_bubble_fraction,
                        100 * L.predicted_bubble_fraction, o.run_dir));
      }
      return Status::OK();
    };
    // Ctrl-C / SIGTERM (mpirun forwards both as SIGTERM): the ranks stop together at an iteration boundary.
    InstallStopHandlers();
    if (LaunchedUnderMpi()) {
      SetStopMode(
          StopMode::kDeferred);  // outside the training loop: the watchdog thread ends the rank (after its peer check)
      std::unique_ptr<Communicator> world;
      PLANNER_RETURN_IF_ERROR(MakeMpiWorld(&world, L.run.timeout_s));
      return body(*world);
    }
    if (n != 1) {
      return Status::InvalidArgument(
          fmt::format("{} has {} ranks; start them with bash {}/run.sh (mpirun -np {})", lpath, n, a->dir, n));
    }
    return RunThreadRanks(1, body, L.run.timeout_s);
  };
}

}  // namespace planner
