// planner inspect PLAN.yaml [--svg FILE] [--width N]
// planner inspect LAUNCH/runs/<id>/            (a run: report against the prediction, loss curve, trace)
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "planner/commands.h"
#include "planner/render.h"
#include "spec/yaml_reader.h"

namespace planner {

namespace {

// A run directory: its report, the loss curve as text, where the trace is.
Status InspectRun(const std::string& dir) {
  namespace fs = std::filesystem;
  std::string report, metrics;
  PLANNER_RETURN_IF_ERROR(ReadTextFile((fs::path(dir) / "report.md").string(), &report));
  PLANNER_RETURN_IF_ERROR(ReadTextFile((fs::path(dir) / "metrics.csv").string(), &metrics));
  std::vector<double> loss;
  std::istringstream in(metrics);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    size_t a = line.find(','), b = line.find(',', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    loss.push_back(std::stod(line.substr(a + 1, b - a - 1)));
  }
  std::string text = report;
  if (!loss.empty()) {
    double lo = *std::min_element(loss.begin(), loss.end()), hi = *std::max_element(loss.begin(), loss.end());
    const char* bars = " .:-=+*#%@";
    std::string curve;
    for (double v : loss) curve += bars[hi > lo ? static_cast<int>((v - lo) / (hi - lo) * 9.0 + 0.5) : 5];
    text += fmt::format("\nloss per iteration ({} iterations, {:.4f} .. {:.4f}; higher = taller): |{}|\n", loss.size(), lo, hi, curve);
  }
  text += fmt::format("trace: {}/trace.json (chrome://tracing or ui.perfetto.dev)\n", dir);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return Status::OK();
}

}  // namespace

Runner RegisterInspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "show a plan: configuration, per-stage table, memory, predicted timeline");
  struct Args { std::string plan, svg; int width = 100; };
  auto args = std::make_shared<Args>();
  cmd->add_option("plan", args->plan, "plan.yaml written by planner solve, or a run directory (launch/runs/<id>)")->required();
  cmd->add_option("--svg", args->svg, "also write the timeline as an SVG file");
  cmd->add_option("--width", args->width, "columns of the text timeline")->check(CLI::Range(20, 1000));
  return [args]() -> Status {
    if (std::filesystem::is_directory(args->plan)) return InspectRun(args->plan);
    Plan p;
    PLANNER_RETURN_IF_ERROR(LoadPlan(args->plan, &p));
    std::string text = RenderPlanSummary(p) + "\n" + RenderStageTable(p);
    std::string runners = RenderRunnersUp(p);
    if (!runners.empty()) text += "\nrunners-up:\n" + runners;
    std::string timeline;
    PLANNER_RETURN_IF_ERROR(RenderTimelineText(p, args->width, &timeline));
    text += "\n" + timeline;
    std::fwrite(text.data(), 1, text.size(), stdout);
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
