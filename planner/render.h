// Human-readable views of a plan: the summary and per-stage tables and the
// predicted timeline (re-simulated from the plan's stage times) as terminal
// text and as SVG. Pure functions returning strings; thread-safe.
#pragma once

#include <string>

#include "common/status.h"
#include "dp_solver/schedule_sim.h"
#include "spec/plan.h"

namespace planner {

std::string RenderPlanSummary(const Plan& plan);
std::string RenderStageTable(const Plan& plan);
std::string RenderRunnersUp(const Plan& plan);
// Timeline of the plan's schedule, one row per pipeline device, `width` columns.
Status RenderTimelineText(const Plan& plan, int width, std::string* out);
// Any timeline (predicted or measured): one row per label, events by device index.
std::string RenderEventsText(const std::string& title, const std::vector<std::string>& labels, const std::vector<SimEvent>& events,
                             double makespan_s, int width);
std::string RenderEventsSvg(const std::string& title, const std::vector<std::string>& labels, const std::vector<SimEvent>& events,
                            double makespan_s);
Status RenderTimelineSvg(const Plan& plan, std::string* out);

}  // namespace planner
