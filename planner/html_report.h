// One self-contained HTML page per plan (issue 31; docs/formats.md "HTML reports"): the configuration card
// (layout, engine, precision, predicted iteration, tokens/s/GPU, MFU with its band), memory per stage as
// stacked bars against the usable line, the predicted timeline (the SVG inspect --svg writes), hidden and
// exposed communication per kind, the runners-up and the notes. No script, no stylesheet, font or image
// from elsewhere: the page makes no request. Every figure the page shows from plan.yaml carries
// data-field (its plan.yaml key) and data-value (the number as plan.yaml writes it), so a test can read
// the DOM against the file.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "spec/calibration.h"
#include "spec/launch_plan.h"
#include "spec/plan.h"

namespace planner {

// The page of one plan; `title` heads it ("planner solve" / "planner inspect plan.yaml").
Status RenderPlanHtml(const Plan& plan, const std::string& title, std::string* out);
// A page of several plans (solve --gpus a list): a scaling table, then each plan's section.
// `train_tokens` > 0 (solve --train-tokens): days and GPU-hours per size in the table and a second plot.
// Plans costed on every engine (--engine all) plot tokens/s/GPU one line per engine.
Status RenderPlansHtml(const std::vector<Plan>& plans, const std::string& title, double train_tokens, std::string* out);
// A run directory's page: its report (measured against predicted, as report.md says it), the loss and
// iteration-time curves of metrics.csv (non-finite losses left out and counted), and the measured timeline
// of the last iteration (`timeline_svg`, RenderEventsSvg's).
// One rank of a run: its compute, communication and idle seconds in the measured last iteration, and
// the compute the launch plan predicts for its pipeline device (negative: no prediction).
struct RankFigures {
  int64_t rank = 0, stage = 0;
  double measured_compute_s = 0, measured_comm_s = 0, measured_idle_s = 0, predicted_compute_s = -1;
};
// `predicted_svg` (may be empty): the launch plan's predicted timeline (its stage times through the
// schedule), drawn above the measured one (each across the page's width; their titles give their lengths);
// `ranks`: measured against predicted per rank (a table and bars).
Status RenderRunHtml(const std::string& title, const std::string& report_md, const std::vector<double>& loss,
                     const std::vector<double>& iteration_s, const std::string& timeline_svg,
                     const std::string& predicted_svg, const std::vector<RankFigures>& ranks, std::string* out);
// A launch plan's page (inspect LAUNCH --html): the layout and predictions launch.yaml holds, its process
// groups, the rank map (node, device, stage, replica, tp / cp rank, program), each program's actions by kind
// and in order (a folded list), and the predicted timeline (`predicted_svg`); figures marked with
// launch.yaml's keys.
Status RenderLaunchHtml(const LaunchPlan& launch, const std::string& title, const std::string& predicted_svg,
                        std::string* out);
// A calibration's page: its scales and band, each run's measured against predicted before and after (a
// table and a bar chart of the errors), what changed most; figures marked with the calibration file's keys.
Status RenderCalibrationHtml(const Calibration& c, const std::string& title, std::string* out);
// The first line of every page (the output guard recognises it).
extern const char kHtmlHeader[];

}  // namespace planner
