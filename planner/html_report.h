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
#include "spec/plan.h"

namespace planner {

// The page of one plan; `title` heads it ("planner solve" / "planner inspect plan.yaml").
Status RenderPlanHtml(const Plan& plan, const std::string& title, std::string* out);
// A page of several plans (solve --gpus a list): a scaling table, then each plan's section.
Status RenderPlansHtml(const std::vector<Plan>& plans, const std::string& title, std::string* out);
// A run directory's page: its report (measured against predicted, as report.md says it), the loss and
// iteration-time curves of metrics.csv (non-finite losses left out and counted), and the measured timeline
// of the last iteration (`timeline_svg`, RenderEventsSvg's).
Status RenderRunHtml(const std::string& title, const std::string& report_md, const std::vector<double>& loss,
                     const std::vector<double>& iteration_s, const std::string& timeline_svg, std::string* out);
// A calibration's page: its scales and band, each run's measured against predicted before and after (a
// table and a bar chart of the errors), what changed most; figures marked with the calibration file's keys.
Status RenderCalibrationHtml(const Calibration& c, const std::string& title, std::string* out);
// The first line of every page (the output guard recognises it).
extern const char kHtmlHeader[];

}  // namespace planner
