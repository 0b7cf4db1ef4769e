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
#include "spec/plan.h"

namespace planner {

// The page of one plan; `title` heads it ("planner solve" / "planner inspect plan.yaml").
Status RenderPlanHtml(const Plan& plan, const std::string& title, std::string* out);
// A page of several plans (solve --gpus a list): a scaling table, then each plan's section.
Status RenderPlansHtml(const std::vector<Plan>& plans, const std::string& title, std::string* out);
// The first line of every page (the output guard recognises it).
extern const char kHtmlHeader[];

}  // namespace planner
