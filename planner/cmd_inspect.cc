// planner inspect PLAN.yaml [--svg FILE] [--width N]
// planner inspect LAUNCH/runs/<id>/            (a run: report against the prediction, loss curve, trace)
// planner inspect LAUNCH/launch.yaml --rank N  (rank N's program, one action a line, peers resolved)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "dp_solver/programs.h"
#include "planner/commands.h"
#include "planner/html_report.h"
#include "spec/calibration.h"
#include "planner/output_guard.h"
#include "planner/render.h"
#include "common/units.h"
#include "spec/launch_plan.h"
#include "spec/yaml_reader.h"

namespace planner {

namespace {

// Measured events of the run's last iteration (from its first forward of microbatch 0 on rank 0),
// one row per rank; communication (receive waits, all-reduces) as 'C'.
Status MeasuredTimeline(const std::string& dir, std::vector<std::string>* labels, std::vector<SimEvent>* events,
                        double* makespan) {
  namespace fs = std::filesystem;
  YAML::Node root;
  std::string text;
  const std::string path = (fs::path(dir) / "trace.json").string();
  PLANNER_RETURN_IF_ERROR(ReadTextFile(path, &text));
  PLANNER_RETURN_IF_ERROR(ParseYamlText(path, text, &root));
  if (!root.IsMap() || !root["traceEvents"].IsSequence())
    return Status::InvalidArgument(path + ": no traceEvents list");
  const YAML::Node& ev = root["traceEvents"];
  struct Raw {
    int pid;
    std::string name;
    double ts, dur;
  };
  std::vector<Raw> raw;
  int ranks = 0;
  double window = 0;
  YamlReader reader(path);
  for (size_t i = 0; i < ev.size(); ++i) {
    const YAML::Node& e = ev[i];
    std::string ph;
    if (!e.IsMap() || !reader.GetString(e, "ph", "", &ph, false).ok() || ph != "X") continue;
    const std::string f = fmt::format("traceEvents[{}]", i);
    int64_t pid = 0;
    Raw r{0, "", 0, 0};
    PLANNER_RETURN_IF_ERROR(reader.GetInt(e, "pid", f + ".pid", &pid, true, 0));
    if (pid > 1 << 20) return reader.FieldError(e["pid"], f + ".pid", "must be a rank below 1048576");
    r.pid = static_cast<int>(pid);
    PLANNER_RETURN_IF_ERROR(reader.GetString(e, "name", f + ".name", &r.name, true));
    if (r.name.empty()) return reader.FieldError(e["name"], f + ".name", "must not be empty");
    PLANNER_RETURN_IF_ERROR(
        reader.GetDouble(e, "ts", f + ".ts", &r.ts, true, -std::numeric_limits<double>::max(), false));
    PLANNER_RETURN_IF_ERROR(reader.GetDouble(e, "dur", f + ".dur", &r.dur, true, 0.0, false));
    r.ts *= 1e-6;
    r.dur *= 1e-6;
    ranks = std::max(ranks, r.pid + 1);
    if (r.pid == 0 && r.name == "F0") window = std::max(window, r.ts);
    raw.push_back(r);
  }
  labels->clear();
  for (int r = 0; r < ranks; ++r) labels->push_back(fmt::format("rank {}", r));
  events->clear();
  *makespan = 0;
  for (const auto& r : raw) {
    if (r.ts + r.dur < window || r.name == "dp all-reduce busy") continue;
    SimEvent e;
    e.device = r.pid;
    e.kind = r.name[0] == 'F' ? 'F' : (r.name[0] == 'B' ? 'B' : (r.name[0] == 'W' ? 'W' : 'C'));
    e.start_s = std::max(0.0, r.ts - window);
    e.end_s = r.ts + r.dur - window;
    *makespan = std::max(*makespan, e.end_s);
    events->push_back(e);
  }
  return Status::OK();
}

// A run directory: its report, the loss curve as text, the measured timeline, where the trace is.
// A launch plan's predicted timeline (PredictedTimeline), simulated once for the pages that show it.
struct LaunchPrediction {
  bool ok = false;  // false: the plan cannot be simulated (the pages go without)
  SimResult sim;
  std::vector<int64_t> stage_first_device;
  explicit LaunchPrediction(const LaunchPlan& L) { ok = PredictedTimeline(L, &sim, &stage_first_device).ok(); }
};

// The predicted timeline as SVG ("" when it cannot be simulated).
std::string PredictedLaunchSvg(const LaunchPlan& L, const LaunchPrediction& p, const std::string& what) {
  if (!p.ok) return "";
  std::vector<std::string> labels;
  if (PerStageReplication(L)) {
    for (size_t q = 0; q < L.stages.size(); ++q)
      for (int64_t k = 0; k < L.stages[q].replicas; ++k) labels.push_back(fmt::format("stage {} replica {}", q, k));
  } else {
    for (int64_t d = 0; d < L.pp; ++d) labels.push_back(fmt::format("position {}", d));
  }
  return RenderEventsSvg(fmt::format("{}: predicted, {}", what, FormatSeconds(p.sim.makespan_s)), labels, p.sim.events,
                         p.sim.makespan_s);
}

// Per rank: the measured last iteration's compute (F, B, W), communication and the rest, and the compute
// the launch plan predicts for the rank's pipeline device (per iteration: PipeDream's asynchronous
// schedule is simulated over the whole run). `L` and `p` may be null (no launch plan beside the run).
std::vector<RankFigures> PerRankFigures(const std::vector<SimEvent>& measured, double makespan, const LaunchPlan* L,
                                        const LaunchPrediction* p) {
  std::vector<RankFigures> out;
  for (const SimEvent& e : measured) {
    if (e.device < 0 || e.device >= (1 << 20)) continue;
    if (static_cast<size_t>(e.device) >= out.size()) out.resize(static_cast<size_t>(e.device) + 1);
    RankFigures& r = out[static_cast<size_t>(e.device)];
    (e.kind == 'C' ? r.measured_comm_s : r.measured_compute_s) += e.end_s - e.start_s;
  }
  const bool have = L != nullptr && p != nullptr && p->ok;
  std::vector<double> predicted;  // per device of the predicted timeline
  if (have) {
    const double runs =
        L->schedule == Schedule::kPipeDream ? static_cast<double>(std::max<int64_t>(1, L->run.iterations)) : 1.0;
    for (const SimEvent& e : p->sim.events) {
      if (e.kind == 'C' || e.device < 0) continue;
      if (static_cast<size_t>(e.device) >= predicted.size()) predicted.resize(static_cast<size_t>(e.device) + 1, 0.0);
      predicted[static_cast<size_t>(e.device)] += (e.end_s - e.start_s) / runs;
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    RankFigures& r = out[i];
    r.rank = static_cast<int64_t>(i);
    r.measured_idle_s = std::max(0.0, makespan - r.measured_compute_s);
    if (!have || i >= L->ranks.size()) continue;
    const LaunchRank& lr = L->ranks[i];
    r.stage = lr.stage;
    const std::vector<int64_t>& first = p->stage_first_device;
    int64_t device = lr.stage;  // the uniform family: the stage's position
    if (!first.empty())         // per-stage replication: the stage's first device plus the replica
      device = lr.stage >= 0 && static_cast<size_t>(lr.stage) < first.size()
                   ? first[static_cast<size_t>(lr.stage)] + lr.replica
                   : -1;
    if (device >= 0 && static_cast<size_t>(device) < predicted.size())
      r.predicted_compute_s = predicted[static_cast<size_t>(device)];
  }
  return out;
}

Status InspectRun(const std::string& dir, int width, const std::string& svg_path, const std::string& html_path) {
  namespace fs = std::filesystem;
  std::string report, metrics;
  std::error_code ec;
  if (!fs::exists(fs::path(dir) / "report.md", ec) && !fs::exists(fs::path(dir) / "metrics.csv", ec)) {
    return Status::InvalidArgument(
        fmt::format("{}: not a run directory (no report.md or metrics.csv) nor a launch directory (no launch.yaml); "
                    "give a plan.yaml, LAUNCH --rank N, or LAUNCH/runs/<id>",
                    dir));
  }
  if (!fs::exists(fs::path(dir) / "report.md", ec))
    return Status::InvalidArgument(
        fmt::format("{}: a run directory without report.md (planner run writes it when the run ends; this run "
                    "stopped before): run it again to its end, or read {}/metrics.csv as it is",
                    dir, dir));
  PLANNER_RETURN_IF_ERROR(ReadTextFile((fs::path(dir) / "report.md").string(), &report));
  PLANNER_RETURN_IF_ERROR(ReadTextFile((fs::path(dir) / "metrics.csv").string(), &metrics));
  std::vector<double> loss, seconds;
  std::istringstream in(metrics);
  std::string line;
  std::getline(in, line);
  if (line.rfind("iteration,loss", 0) != 0) {
    return Status::InvalidArgument(fmt::format(
        "{}/metrics.csv:1: the header is not 'iteration,loss,iteration_seconds'; the file is not planner run's metrics",
        dir));
  }
  for (int line_no = 2; std::getline(in, line); ++line_no) {
    size_t a = line.find(','), b = line.find(',', a + 1);
    if (line.empty()) continue;
    if (a == std::string::npos || b == std::string::npos) {
      return Status::InvalidArgument(fmt::format("{}/metrics.csv:{}: not 'iteration,loss,iteration_seconds': '{}'", dir,
                                                 line_no, line.substr(0, 80)));
    }
    const std::string field = line.substr(a + 1, b - a - 1);
    // A diverged run writes nan or inf losses (fmt's spelling): kept, and drawn as '?' below.
    const bool diverged = field == "nan" || field == "-nan" || field == "inf" || field == "-inf";
    const std::optional<double> v =
        diverged ? std::optional<double>(std::numeric_limits<double>::quiet_NaN()) : ParseDouble(field);
    if (!v) {
      return Status::InvalidArgument(
          fmt::format("{}/metrics.csv:{}: field 'loss': must be a number, got '{}'", dir, line_no, field));
    }
    loss.push_back(*v);
    const std::optional<double> t = ParseDouble(line.substr(b + 1));
    seconds.push_back(t ? *t : std::numeric_limits<double>::quiet_NaN());
  }
  std::string text = report;
  if (!loss.empty()) {
    // A diverged run's nan or inf losses are drawn as '?' and left out of the scale.
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (double v : loss) {
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
    const char* bars = " .:-=+*#%@";
    std::string curve;
    for (double v : loss)
      curve += !std::isfinite(v) ? '?' : bars[hi > lo ? static_cast<int>((v - lo) / (hi - lo) * 9.0 + 0.5) : 5];
    text += fmt::format("\nloss per iteration ({} iterations, {:.4f} .. {:.4f}; higher = taller): |{}|\n", loss.size(),
                        lo, hi, curve);
  }
  std::vector<std::string> labels;
  std::vector<SimEvent> events;
  double makespan = 0;
  PLANNER_RETURN_IF_ERROR(MeasuredTimeline(dir, &labels, &events, &makespan));
  text += "\n" + RenderEventsText("measured timeline of the last iteration", labels, events, makespan, width);
  text += fmt::format("trace: {}/trace.json (chrome://tracing or ui.perfetto.dev)\n", dir);
  std::fwrite(text.data(), 1, text.size(), stdout);
  const std::string svg = RenderEventsSvg(fmt::format("{}: measured, last iteration, {}", dir, FormatSeconds(makespan)),
                                          labels, events, makespan);
  if (!svg_path.empty()) {
    PLANNER_RETURN_IF_ERROR(WriteFileAtomic(svg_path, svg));
    LogNote("wrote " + svg_path);
  }
  if (!html_path.empty()) {
    // The run's launch plan (LAUNCH/runs/<id>/../../launch.yaml): its predicted timeline above the measured one.
    std::string predicted;
    const fs::path launch = fs::path(dir) / ".." / ".." / "launch.yaml";
    LaunchPlan L;
    const bool have = fs::exists(launch, ec) && LoadLaunchPlan(launch.lexically_normal().string(), &L).ok();
    std::optional<LaunchPrediction> prediction;
    if (have) {
      prediction.emplace(L);
      predicted = PredictedLaunchSvg(L, *prediction, launch.lexically_normal().string());
    }
    std::string page;
    PLANNER_RETURN_IF_ERROR(RenderRunHtml(
        "planner inspect " + dir, report, loss, seconds, svg, predicted,
        PerRankFigures(events, makespan, have ? &L : nullptr, prediction ? &*prediction : nullptr), &page));
    PLANNER_RETURN_IF_ERROR(WriteFileAtomic(html_path, page));
    LogNote("wrote " + html_path);
  }
  return Status::OK();
}

// What one action of rank `me` does, with its peer rank resolved.
std::string DescribeAction(const LaunchPlan& L, const LaunchRank& me, const Action& a) {
  const int64_t peer = PeerRank(L, me, a);
  const std::string at = fmt::format("stage {}, microbatch {}", a.stage, a.microbatch);
  switch (a.kind) {
    case ActionKind::kForward: return fmt::format("forward of {}", at);
    case ActionKind::kBackwardInput:
      return fmt::format(
          "{} of {}",
          L.schedule == Schedule::kZbH1 || L.schedule == Schedule::kDualPipeV ? "backward-input" : "backward", at);
    case ActionKind::kBackwardWeight: return fmt::format("backward-weight of {}", at);
    case ActionKind::kRecvActivation: return fmt::format("receive the activation entering {} from rank {}", at, peer);
    case ActionKind::kSendActivation: return fmt::format("send the activation leaving {} to rank {}", at, peer);
    case ActionKind::kRecvGrad: return fmt::format("receive the gradient of {}'s output from rank {}", at, peer);
    case ActionKind::kSendGrad: return fmt::format("send the gradient of {}'s input to rank {}", at, peer);
    case ActionKind::kGradReduce: break;
    case ActionKind::kOptimizerStep: return "optimizer step";
  }
  std::string group;
  for (const auto& g : L.dp_groups) {
    if (std::find(g.begin(), g.end(), me.rank) == g.end()) continue;
    for (size_t i = 0; i < g.size(); ++i) group += fmt::format("{}{}", i ? ", " : "", g[i]);
  }
  return fmt::format("all-reduce {} gradients over ranks [{}]",
                     a.stage < 0 ? "all of this rank's" : fmt::format("stage {}'s", a.stage), group);
}

// Rank `rank`'s program from a launch.yaml (or a launch directory).
Status InspectProgram(const std::string& path, int64_t rank) {
  namespace fs = std::filesystem;
  std::error_code ec;  // a path that cannot be examined is read as a file: LoadLaunchPlan names why it cannot be
  const std::string file = fs::is_directory(path, ec) ? (fs::path(path) / "launch.yaml").string() : path;
  LaunchPlan L;
  PLANNER_RETURN_IF_ERROR(LoadLaunchPlan(file, &L));
  const int64_t n = static_cast<int64_t>(L.ranks.size());
  if (rank < 0 || rank >= n)
    return Status::InvalidArgument(fmt::format("--rank {}: {} has ranks 0..{}", rank, file, n - 1));
  const LaunchRank& me = L.ranks[static_cast<size_t>(rank)];
  const RankProgram& g = L.programs[static_cast<size_t>(me.program)];
  int64_t sharing = 0;
  for (const auto& r : L.ranks) sharing += r.program == me.program;
  std::string text = fmt::format(
      "rank {}: stage {}, replica {}, tp rank {}; program {} of {} (position {}, replica {}) run by {} rank{}; {} "
      "actions\n",
      me.rank, me.stage, me.replica, me.tp_rank, me.program + 1, L.programs.size(), g.position,
      g.replica < 0 ? std::string("any") : std::to_string(g.replica), sharing, sharing == 1 ? "" : "s",
      g.actions.size());
  for (size_t i = 0; i < g.actions.size(); ++i) {
    text += fmt::format("{:6}  {:<12} {}\n", i + 1, ActionToString(g.actions[i]), DescribeAction(L, me, g.actions[i]));
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  return Status::OK();
}

// A launch plan's page (and its predicted timeline as --svg).
Status InspectLaunchHtml(const std::string& path, const std::string& svg_path, const std::string& html_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string file = fs::is_directory(path, ec) ? (fs::path(path) / "launch.yaml").string() : path;
  LaunchPlan L;
  PLANNER_RETURN_IF_ERROR(LoadLaunchPlan(file, &L));
  const std::string svg = PredictedLaunchSvg(L, LaunchPrediction(L), file);
  std::fputs(fmt::format("launch plan {}: {} ranks, {} programs, predicted iteration {:.4f} s\n", file, L.ranks.size(),
                         L.programs.size(), L.predicted_iteration_s)
                 .c_str(),
             stdout);
  if (!svg_path.empty() && !svg.empty()) {
    PLANNER_RETURN_IF_ERROR(WriteFileAtomic(svg_path, svg));
    LogNote("wrote " + svg_path);
  }
  std::string page;
  PLANNER_RETURN_IF_ERROR(RenderLaunchHtml(L, "planner inspect " + file, svg, &page));
  PLANNER_RETURN_IF_ERROR(WriteFileAtomic(html_path, page));
  LogNote("wrote " + html_path);
  return Status::OK();
}

// Whether `path` starts with the calibration file's first line (planner calibrate's output).
bool IsCalibrationFile(const std::string& path) {
  std::ifstream in(path);
  std::string first;
  return in && std::getline(in, first) && first == kCalibrationHeader;
}

}  // namespace

Runner RegisterInspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "show a plan: configuration, per-stage table, memory, predicted timeline");
  struct Args {
    std::string plan, svg, html;
    int width = 100;
    int64_t rank = -1;
    bool force = false;  // --svg may replace a file the planner did not write
  };
  auto args = std::make_shared<Args>();
  cmd->add_option(
         "plan", args->plan,
         "plan.yaml written by planner solve, a run directory (launch/runs/<id>), launch/launch.yaml with --rank, or a "
         "calibration written by planner calibrate")
      ->required();
  cmd->add_option("--rank", args->rank,
                  "with a launch.yaml (or launch directory): print this rank's program, one action a line")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--svg", args->svg, "also write the timeline as an SVG file");
  cmd->add_option("--html", args->html,
                  "also write one self-contained HTML page: a plan's (configuration, memory per stage, timeline, "
                  "communication, runners-up), a run directory's (report, curves, predicted and measured timelines), "
                  "a launch plan's (groups, ranks, programs, predicted timeline) or a calibration's");
  cmd->add_option("--width", args->width, "columns of the text timeline")->check(CLI::Range(20, 1000));
  cmd->add_flag("--force", args->force, "let --svg replace a file the planner did not write");
  return [args]() -> Status {
    namespace fs = std::filesystem;
    if (!args->svg.empty())
      PLANNER_RETURN_IF_ERROR(CheckReplaceable("--svg", args->svg, OutputKind::kSvg, args->force));
    if (!args->html.empty())
      PLANNER_RETURN_IF_ERROR(CheckReplaceable("--html", args->html, OutputKind::kHtml, args->force));
    std::error_code ec;  // a path that cannot be examined is no run directory; LoadPlan names why it cannot be read
    if (args->rank >= 0 || fs::path(args->plan).filename() == "launch.yaml" ||
        fs::exists(fs::path(args->plan) / "launch.yaml", ec)) {
      if (!args->html.empty() && args->rank >= 0)
        return Status::InvalidArgument(fmt::format(
            "--html with --rank: a launch plan's page holds every rank's program; drop --rank (or drop --html for one "
            "rank's program as text)"));
      if (!args->html.empty()) return InspectLaunchHtml(args->plan, args->svg, args->html);
      if (args->rank < 0)
        return Status::InvalidArgument(fmt::format(
            "{} is a launch plan; add --rank N to print rank N's program (or --html FILE for its page)", args->plan));
      return InspectProgram(args->plan, args->rank);
    }
    if (fs::is_directory(args->plan, ec)) return InspectRun(args->plan, args->width, args->svg, args->html);
    if (IsCalibrationFile(args->plan)) {
      if (!args->svg.empty())
        return Status::InvalidArgument(
            fmt::format("--svg: {} is a calibration, which has no timeline; drop --svg", args->plan));
      Calibration c;
      PLANNER_RETURN_IF_ERROR(LoadCalibration(args->plan, &c));
      const std::string text = RenderCalibration(c);
      std::fwrite(text.data(), 1, text.size(), stdout);
      if (!args->html.empty()) {
        std::string page;
        PLANNER_RETURN_IF_ERROR(RenderCalibrationHtml(c, "planner inspect " + args->plan, &page));
        PLANNER_RETURN_IF_ERROR(WriteFileAtomic(args->html, page));
        LogNote("wrote " + args->html);
      }
      return Status::OK();
    }
    Plan p;
    PLANNER_RETURN_IF_ERROR(LoadPlan(args->plan, &p));
    std::string text = RenderPlanSummary(p) + "\n" + RenderStageTable(p);
    const std::string comm = RenderCommunication(p);
    if (!comm.empty()) text += "\n" + comm;
    std::string runners = RenderRunnersUp(p);
    if (!runners.empty()) text += "\nrunners-up:\n" + runners;
    std::string timeline;
    PLANNER_RETURN_IF_ERROR(RenderTimelineText(p, args->width, &timeline));
    text += "\n" + timeline;
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (!args->html.empty()) {
      std::string page;
      PLANNER_RETURN_IF_ERROR(RenderPlanHtml(p, "planner inspect " + args->plan, &page));
      PLANNER_RETURN_IF_ERROR(WriteFileAtomic(args->html, page));
      LogNote("wrote " + args->html);
    }
    if (!args->svg.empty()) {
      std::string svg;
      PLANNER_RETURN_IF_ERROR(RenderTimelineSvg(p, &svg));
      PLANNER_RETURN_IF_ERROR(WriteFileAtomic(args->svg, svg));
      LogNote("wrote " + args->svg);
    }
    return Status::OK();
  };
}

}  // namespace planner
