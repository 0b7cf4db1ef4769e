// Human-readable views of a plan: the summary and per-stage tables and the
// predicted timeline (re-simulated from the plan's stage times) as terminal
// text and as SVG. Pure functions returning strings; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "dp_solver/schedule_sim.h"
#include "spec/plan.h"

namespace planner {

// `s` as XML / HTML text or attribute value: &, <, > and " escaped (the SVG and HTML writers' one escaping).
std::string XmlText(const std::string& s);

// Model, configuration, predictions, the output figures (RenderPlanFigures), then the band and lead lines.
std::string RenderPlanSummary(const Plan& plan);
// The calibration band line and the lead line (docs/cost_model.md section 2, "Bands"); empty when the plan
// has neither; the last lines of RenderPlanSummary.
std::string RenderBandAndLead(const Plan& plan);
std::string RenderStageTable(const Plan& plan);
std::string RenderRunnersUp(const Plan& plan);
// "communication per iteration": predicted.communication, one row per kind with its total, hidden and
// exposed seconds; "" when the plan has none.
std::string RenderCommunication(const Plan& plan);
// "DP gradient sync per architecture (chosen layout)": predicted.dp_comm_seconds, one row each, the
// chosen one marked, with its ratio to the chosen; "" when the plan has none (dp = 1).
std::string RenderDpCommTable(const Plan& plan);
// "405.9B", "124.4M", "8.03B": a count with a decimal suffix (three digits at least); "n/a" when not positive.
std::string FormatCount(double count);
// The plan's output figures on one line: parameters, model FLOPs per
// iteration, tokens/s/GPU, model and hardware TFLOP/s/GPU, MFU, HFU. "n/a" for a figure
// that is 0 (unknown: a profile without a model, a model without a sequence);
// in RenderPlanSummary before the band and lead lines.
std::string RenderPlanFigures(const Plan& plan);
// "training on 300.0B tokens: 22.24 days on 1024 GPUs, 546594 GPU-hours" (or why n/a).
std::string RenderTrainingTime(const Plan& plan, double train_tokens);
// Days and GPU-hours to train on `tokens` at the plan's tokens/s/GPU
// (days = tokens / (tokens/s/GPU x GPUs) / 86400); false when unknown.
bool TrainingTime(const Plan& plan, double tokens, double* days, double* gpu_hours);

// One size of `solve --gpus 1024,2048,...`: its best plan, or why none fits.
struct ScalingRow {
  int64_t gpus = 0;
  Plan plan;
  std::string error;  // non-empty: no plan (the search's message)
};
// One row per size: layout, schedule, recompute, ZeRO, tokens/s/GPU, TFLOP/s/GPU
// (model, hardware), MFU, HFU, iteration time, and days / GPU-hours when train_tokens > 0.
std::string RenderScalingTable(const std::vector<ScalingRow>& rows, double train_tokens);
// Timeline of the plan's schedule, one row per pipeline device, `width` columns.
Status RenderTimelineText(const Plan& plan, int width, std::string* out);
// Any timeline (predicted or measured): one row per label, events by device index.
std::string RenderEventsText(const std::string& title, const std::vector<std::string>& labels,
                             const std::vector<SimEvent>& events, double makespan_s, int width);
std::string RenderEventsSvg(const std::string& title, const std::vector<std::string>& labels,
                            const std::vector<SimEvent>& events, double makespan_s);
Status RenderTimelineSvg(const Plan& plan, std::string* out);

}  // namespace planner
