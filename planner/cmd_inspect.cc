// planner inspect PLAN.yaml [--svg FILE] [--width N]
#include <cstdio>

#include <fmt/format.h>

#include "common/log.h"
#include "planner/commands.h"
#include "planner/render.h"

namespace planner {

Runner RegisterInspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "show a plan: configuration, per-stage table, memory, predicted timeline");
  struct Args { std::string plan, svg; int width = 100; };
  auto args = std::make_shared<Args>();
  cmd->add_option("plan", args->plan, "plan.yaml written by planner solve")->required();
  cmd->add_option("--svg", args->svg, "also write the timeline as an SVG file");
  cmd->add_option("--width", args->width, "columns of the text timeline")->check(CLI::Range(20, 1000));
  return [args]() -> Status {
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
