// Human-readable views of a plan: the summary and per-stage tables and the
// predicted timeline (re-simulated from the plan's stage times) as terminal
// text and as SVG. Pure functions returning strings; thread-safe.
#pragma once

#include <string>

#include "common/status.h"
#include "spec/plan.h"

namespace planner {

std::string RenderPlanSummary(const Plan& plan);
std::string RenderStageTable(const Plan& plan);
std::string RenderRunnersUp(const Plan& plan);
// Timeline of the plan's schedule, one row per pipeline device, `width` columns.
Status RenderTimelineText(const Plan& plan, int width, std::string* out);
Status RenderTimelineSvg(const Plan& plan, std::string* out);

}  // namespace planner
