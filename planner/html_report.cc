#include "planner/html_report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/units.h"
#include "planner/render.h"

namespace planner {

const char kHtmlHeader[] = "<!DOCTYPE html>\n<!-- written by planner (docs/formats.md, \"HTML reports\") -->";

namespace {

// A figure of plan.yaml: its text, and the key and value a test reads back.
std::string Fig(const std::string& field, double value, const std::string& text) {
  return fmt::format("<span class=\"fig\" data-field=\"{}\" data-value=\"{:.10g}\">{}</span>", XmlText(field), value,
                     XmlText(text));
}

// The same inside SVG text (a tspan: HTML elements are not rendered there).
std::string FigSvg(const std::string& field, double value, const std::string& text) {
  return fmt::format("<tspan class=\"fig\" data-field=\"{}\" data-value=\"{:.10g}\">{}</tspan>", XmlText(field), value,
                     XmlText(text));
}

constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}"
    "h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ccc}"
    "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}"
    "th{background:#f3f3f3}td.l,th.l{text-align:left}"
    ".card{display:grid;grid-template-columns:max-content auto;gap:4px 16px;font-size:14px}"
    ".card dt{color:#666}.card dd{margin:0;font-weight:600}.note{font-size:12px;color:#444}"
    "pre{white-space:pre-wrap;font-size:12px}.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 "
    "12px;vertical-align:middle}";

const char* kMemoryColors[4] = {"#4e79a7", "#f28e2b", "#59a14f", "#bab0ac"};
const char* kMemoryNames[4] = {"weights", "gradients and optimizer state", "activations", "buffers and the rest"};

std::string Card(const Plan& p, const std::string& sfx) {
  const PlanPredicted& x = p.predicted;
  std::string o = "<section id=\"card" + sfx + "\"><h2>Configuration</h2><dl class=\"card\">";
  auto row = [&](const std::string& k, const std::string& v) { o += "<dt>" + XmlText(k) + "</dt><dd>" + v + "</dd>"; };
  row("model", XmlText(fmt::format("{} on {} x {} ({})", p.model_name, p.gpus, p.cluster_name,
                                   CostSourceKindName(p.cost_source))));
  row("layout", XmlText(p.Label("")));
  if (!p.engine.empty()) row("engine", XmlText(p.engine + (p.kernels.empty() ? "" : " x kernel table " + p.kernels)));
  if (p.dtype) row("precision", XmlText(DTypeName(*p.dtype)));
  if (p.grad_dtype) row("gradients", XmlText(DTypeName(*p.grad_dtype)));
  if (p.optimizer_state != OptimizerState::kFp32)
    row("optimizer state", XmlText(fmt::format("{} ({:g} B/param)", OptimizerStateName(p.optimizer_state),
                                               OptimizerStateBytes(p.optimizer_state))));
  if (p.fp8_param_gather) row("weights", XmlText("FP8 parameters (Megatron --fp8-param-gather)"));
  if (p.cp > 1) row("cp exchange", XmlText(CpCommTypeName(p.cp_comm_type)));
  if (p.ep > 1) row("moe dispatch", XmlText(MoeDispatcherName(p.moe_dispatcher)));
  if (!p.calibration.empty()) row("calibrated with", XmlText(p.calibration));
  row("iteration (s)", Fig("predicted.iteration_seconds", x.iteration_s, fmt::format("{:.4f}", x.iteration_s)));
  if (x.tokens_per_second_per_gpu > 0)
    row("tokens/s/GPU", Fig("predicted.tokens_per_second_per_gpu", x.tokens_per_second_per_gpu,
                            fmt::format("{:.1f}", x.tokens_per_second_per_gpu)));
  if (x.mfu > 0) row("MFU (%)", Fig("predicted.mfu", x.mfu, fmt::format("{:.1f}", 100 * x.mfu)));
  row("bubble (%)",
      Fig("predicted.bubble_fraction", x.bubble_fraction, fmt::format("{:.1f}", 100 * x.bubble_fraction)));
  row("peak memory (GiB)",
      Fig("predicted.peak_memory_GiB", x.peak_memory_bytes / kGiB, fmt::format("{:.2f}", x.peak_memory_bytes / kGiB)));
  if (x.peak_reserved_bytes > 0)
    row("reserved by the allocator (GiB)", Fig("predicted.peak_reserved_GiB", x.peak_reserved_bytes / kGiB,
                                               fmt::format("{:.2f}", x.peak_reserved_bytes / kGiB)));
  if (x.band) {
    const PlanBand& b = *x.band;
    row("band", Fig("predicted.band.iteration_seconds_low", b.IterationLow(x.iteration_s),
                    fmt::format("{:.4f}", b.IterationLow(x.iteration_s))) +
                    " .. " +
                    Fig("predicted.band.iteration_seconds_high", b.IterationHigh(x.iteration_s),
                        fmt::format("{:.4f}", b.IterationHigh(x.iteration_s))) +
                    XmlText(fmt::format(" s ({}: {} runs{}, errors {:+.1f}%..{:+.1f}%{})", b.basis, b.runs,
                                        b.checks > 0 ? fmt::format(" and {} checks", b.checks) : "", 100 * b.error_low,
                                        100 * b.error_high,
                                        b.runs + b.checks < 3 ? "; joined with every engine's spread" : "")));
  }
  return o + "</dl></section>\n";
}

// Memory per stage: weights, optimizer, activations and the rest as stacked horizontal bars (GiB), with
// the usable memory as a red line.
std::string MemoryBars(const Plan& p, const std::string& sfx) {
  const double usable = p.usable_memory_bytes / kGiB;
  double most = usable;
  for (const PlanStage& s : p.stages) most = std::max(most, s.peak_memory_bytes / kGiB);
  if (!(most > 0)) return "";
  const double left = 90, width = 760, bar = 18, gap = 8;
  const double height = 40 + static_cast<double>(p.stages.size()) * (bar + gap);
  auto x = [&](double gib) { return left + width * gib / (most * 1.05); };
  std::string o = fmt::format(
      "<section id=\"memory{}\"><h2>Memory per stage (GiB)</h2><svg xmlns=\"http://www.w3.org/2000/svg\" "
      "width=\"{:.0f}\" height=\"{:.0f}\" font-family=\"sans-serif\" font-size=\"11\">",
      sfx, left + width + 60, height);
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const PlanStage& s = p.stages[i];
    const double y = 10 + static_cast<double>(i) * (bar + gap);
    const double rest = std::max(0.0, s.peak_memory_bytes - s.weights_bytes - s.optimizer_bytes - s.activations_bytes);
    const double parts[4] = {s.weights_bytes / kGiB, s.optimizer_bytes / kGiB, s.activations_bytes / kGiB, rest / kGiB};
    o += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"end\">stage {} c{}</text>", left - 6, y + bar - 5,
                     i, s.chunk);
    double at = 0;
    for (int k = 0; k < 4; ++k) {
      if (parts[k] <= 0) continue;
      o += fmt::format(
          "<rect class=\"mem\" data-stage=\"{}\" data-part=\"{}\" x=\"{:.2f}\" y=\"{:.0f}\" width=\"{:.2f}\" "
          "height=\"{:.0f}\" fill=\"{}\"><title>{}: {:.2f} GiB</title></rect>",
          i, kMemoryNames[k], x(at), y, x(at + parts[k]) - x(at), bar, kMemoryColors[k], kMemoryNames[k], parts[k]);
      at += parts[k];
    }
    o += fmt::format("<text x=\"{:.2f}\" y=\"{:.0f}\">{}</text>", x(at) + 4, y + bar - 5,
                     FigSvg(fmt::format("stages[{}].peak_memory_GiB", i), s.peak_memory_bytes / kGiB,
                            fmt::format("{:.2f}", s.peak_memory_bytes / kGiB)));
  }
  if (usable > 0)
    o += fmt::format(
        "<line x1=\"{0:.2f}\" x2=\"{0:.2f}\" y1=\"4\" y2=\"{1:.0f}\" stroke=\"#d62728\" stroke-width=\"2\"/>"
        "<text x=\"{0:.2f}\" y=\"{2:.0f}\" fill=\"#d62728\" text-anchor=\"middle\">usable {3:.1f}</text>",
        x(usable), height - 18, height - 4, usable);
  o += "</svg><div class=\"legend note\">";
  for (int k = 0; k < 4; ++k)
    o += fmt::format("<span style=\"background:{}\"></span>{}", kMemoryColors[k], kMemoryNames[k]);
  return o + "</div></section>\n";
}

std::string Communication(const Plan& p, const std::string& sfx) {
  if (p.predicted.communication.empty()) return "";
  std::string o = "<section id=\"communication" + sfx +
                  "\"><h2>Communication per iteration (device exposing the most)</h2><table><tr>"
                  "<th class=\"l\">kind</th><th>total (s)</th><th>hidden (s)</th><th>exposed (s)</th></tr>";
  for (const PlanComm& c : p.predicted.communication) {
    o += fmt::format(
        "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", XmlText(c.kind),
        Fig("predicted.communication." + c.kind + ".total_seconds", c.total_s, fmt::format("{:.6f}", c.total_s)),
        fmt::format("{:.6f}", c.total_s - c.exposed_s),
        Fig("predicted.communication." + c.kind + ".exposed_seconds", c.exposed_s, fmt::format("{:.6f}", c.exposed_s)));
  }
  return o + "</table></section>\n";
}

// The data-parallel gradient sync per architecture (the chosen layout, busiest stage, not overlapped).
std::string DpArchitectures(const Plan& p, const std::string& sfx) {
  const auto& rows = p.predicted.dp_comm_seconds;
  if (rows.empty()) return "";
  double chosen = 0;
  for (const auto& [name, seconds] : rows)
    if (name == DpCommName(p.dp_comm)) chosen = seconds;
  std::string o = "<section id=\"dp-comm" + sfx +
                  "\"><h2>Data-parallel architectures compared (gradient sync per iteration, busiest stage, not "
                  "overlapped)</h2><table><tr><th class=\"l\">architecture</th><th>seconds</th><th>vs chosen</th></tr>";
  for (const auto& [name, seconds] : rows)
    o += fmt::format("<tr><td class=\"l\">{}{}</td><td>{}</td><td>{}</td></tr>", XmlText(name),
                     name == DpCommName(p.dp_comm) ? " (chosen)" : "",
                     Fig("predicted.dp_comm_seconds." + name, seconds, fmt::format("{:.6f}", seconds)),
                     chosen > 0 ? fmt::format("{:.2f}x", seconds / chosen) : std::string("n/a"));
  return o + "</table></section>\n";
}

// solve --engine all: the chosen layout on every engine.
std::string Engines(const Plan& p, const std::string& sfx) {
  if (p.predicted.engines.empty()) return "";
  std::string o = "<section id=\"engines" + sfx +
                  "\"><h2>The chosen layout on every engine</h2><table><tr><th class=\"l\">engine</th>"
                  "<th>iteration (s)</th><th>tokens/s/GPU</th><th>MFU (%)</th><th>peak memory (GiB)</th></tr>";
  for (const PlanEngine& e : p.predicted.engines) {
    if (!e.error.empty()) {
      o += fmt::format("<tr><td class=\"l\">{}</td><td class=\"l\" colspan=\"4\">cannot run it: {}</td></tr>",
                       XmlText(e.engine), XmlText(e.error));
      continue;
    }
    const std::string f = "predicted.engines." + e.engine + ".";
    o += fmt::format("<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{:.1f}</td><td>{:.2f}</td></tr>",
                     XmlText(e.engine),
                     Fig(f + "iteration_seconds", e.iteration_s, fmt::format("{:.4f}", e.iteration_s)),
                     Fig(f + "tokens_per_second_per_gpu", e.tokens_per_second_per_gpu,
                         fmt::format("{:.1f}", e.tokens_per_second_per_gpu)),
                     100 * e.mfu, e.peak_memory_bytes / kGiB);
  }
  return o + "</table></section>\n";
}

std::string RunnersUp(const Plan& p, const std::string& sfx) {
  if (p.runners_up.empty()) return "";
  std::string o = "<section id=\"runners-up" + sfx +
                  "\"><h2>Runners-up</h2><table><tr><th>rank</th><th class=\"l\">layout</th>"
                  "<th>iteration (s)</th><th>samples/s</th><th class=\"l\">why it lost</th></tr>";
  for (size_t i = 0; i < p.runners_up.size(); ++i) {
    const PlanSummary& r = p.runners_up[i];
    o += fmt::format(
        "<tr><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{:.2f}</td><td class=\"l\">{}</td></tr>", i + 2,
        XmlText(r.Label("")),
        Fig(fmt::format("runners_up[{}].iteration_seconds", i), r.iteration_s, fmt::format("{:.4f}", r.iteration_s)),
        r.samples_per_second, XmlText(r.why_lost));
  }
  return o + "</table></section>\n";
}

Status PlanSection(const Plan& p, const std::string& sfx, std::string* o) {
  *o += Card(p, sfx) + MemoryBars(p, sfx);
  std::string svg;
  if (RenderTimelineSvg(p, &svg).ok())
    *o += "<section id=\"timeline" + sfx + "\"><h2>Predicted timeline (one iteration, per device)</h2>" + svg +
          "</section>\n";
  *o += Communication(p, sfx) + DpArchitectures(p, sfx) + Engines(p, sfx) + RunnersUp(p, sfx);
  if (!p.notes.empty()) {
    *o += "<section id=\"notes" + sfx + "\"><h2>Notes</h2><ul class=\"note\">";
    for (const std::string& n : p.notes) *o += "<li>" + XmlText(n) + "</li>";
    *o += "</ul></section>\n";
  }
  return Status::OK();
}

std::string Head(const std::string& title) {
  return std::string(kHtmlHeader) + "\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + XmlText(title) +
         "</title><style>" + kStyle + "</style></head><body><h1>" + XmlText(title) + "</h1>\n";
}

}  // namespace

Status RenderPlanHtml(const Plan& plan, const std::string& title, std::string* out) {
  std::string o = Head(title);
  PLANNER_RETURN_IF_ERROR(PlanSection(plan, "", &o));
  *out = o + "</body></html>\n";
  return Status::OK();
}

namespace {

// One line of a plot against the GPU count: its values per plan (NaN: none at that size).
struct Series {
  std::string name, color;
  bool dashed = false, right = false;  // right: on the right axis
  std::vector<double> values;
};

// Lines against the GPUs on a log2 x axis; the left axis from 0 to the left series' top, the right one from
// 0 to the right series' top (`right_unit` names it; "" when none).
std::string GpuPlot(const std::string& id, const std::vector<Plan>& plans, const std::vector<Series>& series,
                    const std::string& left_unit, const std::string& right_unit) {
  double lo = INFINITY, hi = 0, top_l = 0, top_r = 0;
  for (const Plan& p : plans) {
    lo = std::min(lo, std::log2(static_cast<double>(p.gpus)));
    hi = std::max(hi, std::log2(static_cast<double>(p.gpus)));
  }
  for (const Series& s : series)
    for (double v : s.values)
      if (std::isfinite(v)) (s.right ? top_r : top_l) = std::max(s.right ? top_r : top_l, v);
  if (!(top_l > 0) || hi == lo) return "";
  const double left = 90, width = 600, y0 = 10, height = 200;
  auto x = [&](const Plan& p) { return left + width * (std::log2(static_cast<double>(p.gpus)) - lo) / (hi - lo); };
  std::string o = fmt::format(
      "<svg id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "font-family=\"sans-serif\" "
      "font-size=\"11\"><rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"{:.0f}\" height=\"{:.0f}\" fill=\"none\" "
      "stroke=\"#ccc\"/>",
      id, left + width + 110, y0 + height + 40, left, y0, width, height);
  std::string legend = "<div class=\"legend note\">";
  for (const Series& s : series) {
    const double top = (s.right ? top_r : top_l) * 1.1;
    std::string points, marks;
    for (size_t i = 0; i < plans.size() && i < s.values.size(); ++i) {
      if (!std::isfinite(s.values[i]) || !(top > 0)) continue;
      const double y = y0 + height * (1 - s.values[i] / top);
      points += fmt::format("{:.1f},{:.1f} ", x(plans[i]), y);
      marks += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>{}, {} GPUs: {:.4g}</title>"
          "</circle>",
          x(plans[i]), y, s.color, XmlText(s.name), plans[i].gpus, s.values[i]);
    }
    o += fmt::format(
        "<polyline class=\"series\" data-series=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{} "
        "points=\"{}\"/>{}",
        XmlText(s.name), s.color, s.dashed ? " stroke-dasharray=\"4 3\"" : "", points, marks);
    legend += fmt::format("<span style=\"background:{}\"></span>{} ({} axis)", s.color, XmlText(s.name),
                          s.right ? "right" : "left");
  }
  for (const Plan& p : plans)
    o +=
        fmt::format("<text x=\"{:.1f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}</text>", x(p), y0 + height + 16, p.gpus);
  o += fmt::format(
      "<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"end\">{:.4g}</text><text x=\"{:.0f}\" y=\"{:.0f}\" "
      "text-anchor=\"end\">0</text><text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">GPUs (log2)</text>"
      "<text x=\"4\" y=\"{:.0f}\">{}</text>",
      left - 4, y0 + 10, top_l * 1.1, left - 4, y0 + height, left + width / 2, y0 + height + 32, y0 + height / 2,
      XmlText(left_unit));
  if (top_r > 0)
    o += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\">{:.4g}</text><text x=\"{:.0f}\" y=\"{:.0f}\">{}</text>",
                     left + width + 4, y0 + 10, top_r * 1.1, left + width + 4, y0 + height / 2, XmlText(right_unit));
  return o + "</svg>" + legend + "</div>";
}

const char* kEngineColors[] = {"#4e79a7", "#59a14f", "#b07aa1", "#9c755f", "#76b7b2", "#edc948"};

// Tokens/s/GPU against the GPUs, one line per engine compared (solve --engine all) or the plan's own, and
// the plan's MFU; with a training length, days (left) and GPU-hours (right) in a second plot.
std::string ScalingPlots(const std::vector<Plan>& plans, double train_tokens) {
  if (plans.size() < 2) return "";
  std::vector<Series> rate;
  const std::vector<PlanEngine>& engines = plans.front().predicted.engines;
  if (engines.empty()) {
    rate.push_back({"tokens/s/GPU", kEngineColors[0], false, false, {}});
    for (const Plan& p : plans) rate.back().values.push_back(p.predicted.tokens_per_second_per_gpu);
  }
  for (size_t k = 0; k < engines.size(); ++k) {
    rate.push_back({"tokens/s/GPU on " + engines[k].engine, kEngineColors[k % 6], false, false, {}});
    for (const Plan& p : plans) {
      double v = NAN;
      for (const PlanEngine& e : p.predicted.engines)
        if (e.engine == engines[k].engine && e.error.empty()) v = e.tokens_per_second_per_gpu;
      rate.back().values.push_back(v);
    }
  }
  rate.push_back({"MFU (" + (engines.empty() ? std::string("the plan's") : engines.front().engine) + ")",
                  "#f28e2b",
                  true,
                  true,
                  {}});
  for (const Plan& p : plans) rate.back().values.push_back(100 * p.predicted.mfu);
  std::string o = GpuPlot("scaling-plot", plans, rate, "tokens/s/GPU", "MFU (%)");
  double days = 0, hours = 0;
  if (train_tokens > 0 && TrainingTime(plans.front(), train_tokens, &days, &hours)) {
    std::vector<Series> time = {{"days", "#4e79a7", false, false, {}}, {"GPU-hours", "#e15759", true, true, {}}};
    for (const Plan& p : plans) {
      const bool ok = TrainingTime(p, train_tokens, &days, &hours);
      time[0].values.push_back(ok ? days : NAN);
      time[1].values.push_back(ok ? hours : NAN);
    }
    o += GpuPlot("training-plot", plans, time, "days", "GPU-hours");
  }
  return o;
}

}  // namespace

Status RenderPlansHtml(const std::vector<Plan>& plans, const std::string& title, double train_tokens,
                       std::string* out) {
  std::string o = Head(title);
  double days = 0, hours = 0;
  const bool train = !plans.empty() && train_tokens > 0 && TrainingTime(plans.front(), train_tokens, &days, &hours);
  o += "<section id=\"scaling\"><h2>Scaling</h2><table><tr><th>GPUs</th><th class=\"l\">layout</th>"
       "<th>iteration (s)</th><th>tokens/s/GPU</th><th>MFU (%)</th>";
  if (train) o += fmt::format("<th>days ({} tokens)</th><th>GPU-hours</th>", FormatCount(train_tokens));
  o += "</tr>";
  for (const Plan& p : plans) {
    o += fmt::format("<tr><td>{}</td><td class=\"l\">{}</td><td>{:.4f}</td><td>{:.1f}</td><td>{:.1f}</td>", p.gpus,
                     XmlText(p.ParallelString()), p.predicted.iteration_s, p.predicted.tokens_per_second_per_gpu,
                     100 * p.predicted.mfu);
    if (train)
      o += TrainingTime(p, train_tokens, &days, &hours) ? fmt::format("<td>{:.2f}</td><td>{:.0f}</td>", days, hours)
                                                        : std::string("<td>-</td><td>-</td>");
    o += "</tr>";
  }
  o += "</table>" + ScalingPlots(plans, train_tokens) + "</section>\n";
  for (const Plan& p : plans) {
    o += fmt::format("<h1 id=\"gpus-{}\">{} GPUs</h1>\n", p.gpus, p.gpus);
    PLANNER_RETURN_IF_ERROR(PlanSection(p, fmt::format("-gpus-{}", p.gpus), &o));
  }
  *out = o + "</body></html>\n";
  return Status::OK();
}

namespace {

// One curve as an SVG line plot: x the iteration (1-based), y the value; non-finite points left out.
std::string Curve(const std::string& id, const std::string& what, const std::string& unit,
                  const std::vector<double>& v) {
  double lo = INFINITY, hi = -INFINITY;
  size_t finite = 0;
  for (double x : v) {
    if (!std::isfinite(x)) continue;
    lo = std::min(lo, x), hi = std::max(hi, x);
    ++finite;
  }
  if (finite == 0) return "";
  if (hi == lo) hi = lo + 1;
  const double left = 70, width = 700, top = 10, height = 180;
  std::string points;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) continue;
    const double x = left + width * (v.size() > 1 ? static_cast<double>(i) / static_cast<double>(v.size() - 1) : 0.5);
    const double y = top + height * (1 - (v[i] - lo) / (hi - lo));
    points += fmt::format("{:.1f},{:.1f} ", x, y);
  }
  return fmt::format(
      "<section id=\"{0}\"><h2>{1} per iteration ({2})</h2><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{3:.0f}\" "
      "height=\"{4:.0f}\" font-family=\"sans-serif\" font-size=\"11\"><rect x=\"{5:.0f}\" y=\"{6:.0f}\" "
      "width=\"{7:.0f}\" "
      "height=\"{8:.0f}\" fill=\"none\" stroke=\"#ccc\"/><polyline class=\"curve\" data-points=\"{9}\" fill=\"none\" "
      "stroke=\"#4e79a7\" stroke-width=\"1.5\" points=\"{10}\"/><text x=\"{11:.0f}\" y=\"{12:.0f}\" "
      "text-anchor=\"end\">{13:.4g}</text><text x=\"{11:.0f}\" y=\"{14:.0f}\" text-anchor=\"end\">{15:.4g}</text>"
      "<text x=\"{5:.0f}\" y=\"{16:.0f}\">1</text><text x=\"{17:.0f}\" y=\"{16:.0f}\" text-anchor=\"end\">{18} "
      "iterations</text></svg>{19}</section>\n",
      id, what, unit, left + width + 20, top + height + 30, left, top, width, height, finite, points, left - 4,
      top + 10, hi, top + height, lo, top + height + 16, left + width, v.size(),
      finite < v.size()
          ? fmt::format("<p class=\"note\">{} non-finite value(s) left out (a diverged run)</p>", v.size() - finite)
          : std::string());
}

}  // namespace

namespace {

// Measured against predicted per rank: the last iteration's compute, communication and idle, and the
// compute the launch plan predicts, as a table and as paired bars (measured above, predicted below).
std::string PerRank(const std::vector<RankFigures>& ranks) {
  if (ranks.empty()) return "";
  std::string o =
      "<section id=\"per-rank\"><h2>Measured against predicted per rank (the last iteration)</h2><table><tr>"
      "<th>rank</th><th>stage</th><th>compute (ms)</th><th>predicted compute (ms)</th><th>measured / predicted</th>"
      "<th>communication (ms)</th><th>idle (ms)</th></tr>";
  double most = 0;
  for (const RankFigures& r : ranks) {
    most = std::max({most, r.measured_compute_s + r.measured_idle_s, r.predicted_compute_s});
    o += fmt::format(
        "<tr class=\"rank\"><td>{}</td><td>{}</td><td>{:.3f}</td><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.3f}</td>"
        "</tr>",
        r.rank, r.stage, 1e3 * r.measured_compute_s,
        r.predicted_compute_s >= 0 ? fmt::format("{:.3f}", 1e3 * r.predicted_compute_s) : std::string("-"),
        r.predicted_compute_s > 0 ? fmt::format("{:.2f}x", r.measured_compute_s / r.predicted_compute_s)
                                  : std::string("-"),
        1e3 * r.measured_comm_s, 1e3 * r.measured_idle_s);
  }
  o += "</table>";
  if (!(most > 0)) return o + "</section>\n";
  const double left = 70, width = 640, bar = 9;
  const double height = 10 + static_cast<double>(ranks.size()) * (2 * bar + 8);
  o += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" font-family=\"sans-serif\" "
      "font-size=\"11\">",
      left + width + 90, height + 16);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankFigures& r = ranks[i];
    const double y = 6 + static_cast<double>(i) * (2 * bar + 8), k = width / most;
    o += fmt::format("<text x=\"4\" y=\"{:.0f}\">rank {}</text>", y + 1.6 * bar, r.rank);
    o += fmt::format(
        "<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"{:.1f}\" height=\"{:.0f}\" fill=\"#4e79a7\"><title>measured compute "
        "{:.3f} ms</title></rect><rect x=\"{:.1f}\" y=\"{:.0f}\" width=\"{:.1f}\" height=\"{:.0f}\" fill=\"#dddddd\">"
        "<title>idle {:.3f} ms</title></rect>",
        left, y, k * r.measured_compute_s, bar, 1e3 * r.measured_compute_s, left + k * r.measured_compute_s, y,
        k * r.measured_idle_s, bar, 1e3 * r.measured_idle_s);
    if (r.predicted_compute_s >= 0)
      o += fmt::format(
          "<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"{:.1f}\" height=\"{:.0f}\" fill=\"#f28e2b\"><title>predicted "
          "compute {:.3f} ms</title></rect>",
          left, y + bar, k * r.predicted_compute_s, bar, 1e3 * r.predicted_compute_s);
  }
  o += fmt::format(
      "<text x=\"{:.0f}\" y=\"{:.0f}\">0</text><text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"end\">"
      "{:.3f} ms</text></svg>",
      left, height + 12, left + width, height + 12, 1e3 * most);
  return o +
         "<div class=\"legend note\"><span style=\"background:#4e79a7\"></span>measured compute<span "
         "style=\"background:#dddddd\"></span>measured idle<span style=\"background:#f28e2b\"></span>predicted "
         "compute (launch.yaml)</div></section>\n";
}

}  // namespace

Status RenderRunHtml(const std::string& title, const std::string& report_md, const std::vector<double>& loss,
                     const std::vector<double>& iteration_s, const std::string& timeline_svg,
                     const std::string& predicted_svg, const std::vector<RankFigures>& ranks, std::string* out) {
  std::string o = Head(title);
  o += "<section id=\"report\"><h2>Measured against predicted (report.md)</h2><pre>" + XmlText(report_md) +
       "</pre></section>\n";
  o += Curve("loss", "Loss", "metrics.csv", loss);
  o += Curve("iteration-seconds", "Iteration time", "s, metrics.csv", iteration_s);
  o += PerRank(ranks);
  if (!predicted_svg.empty())
    o += "<section id=\"predicted-timeline\"><h2>Predicted timeline (launch.yaml's stage times through the schedule, "
         "per pipeline device)</h2>" +
         predicted_svg + "</section>\n";
  if (!timeline_svg.empty())
    o += "<section id=\"timeline\"><h2>Measured timeline (the last iteration, per rank)</h2>" + timeline_svg +
         "</section>\n";
  *out = o + "</body></html>\n";
  return Status::OK();
}

Status RenderCalibrationHtml(const Calibration& c, const std::string& title, std::string* out) {
  std::string o = Head(title);
  o += "<section id=\"card\"><h2>Calibration</h2><dl class=\"card\">";
  auto row = [&](const std::string& k, const std::string& v) { o += "<dt>" + XmlText(k) + "</dt><dd>" + v + "</dd>"; };
  row("engine on GPU", XmlText(fmt::format("{} on {} ({}, {} costs)", c.engine, c.gpu, c.precision, c.costs)));
  row("fitted", XmlText(c.fitted == "per-class"   ? "per operation class"
                        : c.fitted == "one-scale" ? "one scale"
                                                  : "none"));
  row("GEMM scale", Fig("scale.gemm", c.gemm, fmt::format("x{:.4f}", c.gemm)));
  row("attention scale", Fig("scale.attention", c.attention, fmt::format("x{:.4f}", c.attention)));
  row("memory-bound scale", Fig("scale.memory", c.memory, fmt::format("x{:.4f}", c.memory)));
  row("band after (%)", Fig("band.low", c.band_low, fmt::format("{:+.1f}", 100 * c.band_low)) + " .. " +
                            Fig("band.high", c.band_high, fmt::format("{:+.1f}", 100 * c.band_high)));
  if (!c.kernels.empty()) row("measured kernel table", XmlText(c.KernelsPath()));
  if (!c.comm.empty()) row("measured collectives", XmlText(c.CommPath()));
  o += "</dl></section>\n";
  if (!c.runs.empty()) {
    o += "<section id=\"runs\"><h2>Runs: measured against predicted</h2><table><tr><th>run</th><th "
         "class=\"l\">format</th>"
         "<th class=\"l\">layout</th><th>iterations</th><th>measured (s)</th><th>before (s)</th><th>error (%)</th>"
         "<th>after (s)</th><th>error (%)</th><th class=\"l\">source</th></tr>";
    for (size_t i = 0; i < c.runs.size(); ++i) {
      const CalibrationRun& r = c.runs[i];
      const std::string f = fmt::format("runs[{}].", i);
      o += fmt::format(
          "<tr><td>{}</td><td class=\"l\">{}</td><td "
          "class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:+.1f}</td>"
          "<td>{}</td><td>{:+.1f}</td><td class=\"l\">{}</td></tr>",
          i + 1, XmlText(r.format), XmlText(r.layout), r.iterations,
          Fig(f + "measured_s", r.measured_s, fmt::format("{:.4f}", r.measured_s)),
          Fig(f + "before_s", r.before_s, fmt::format("{:.4f}", r.before_s)), 100 * (r.measured_s / r.before_s - 1),
          Fig(f + "after_s", r.after_s, fmt::format("{:.4f}", r.after_s)), 100 * (r.measured_s / r.after_s - 1),
          XmlText(r.source));
    }
    o += "</table>";
    // The errors as bars: before (grey) and after (blue), signed, per run.
    double most = 0.01;
    for (const CalibrationRun& r : c.runs)
      most = std::max({most, std::fabs(r.measured_s / r.before_s - 1), std::fabs(r.measured_s / r.after_s - 1)});
    const double mid = 380, half = 300, bar = 10;
    o += fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"760\" height=\"{:.0f}\" font-family=\"sans-serif\" "
        "font-size=\"11\"><line x1=\"{:.0f}\" x2=\"{:.0f}\" y1=\"0\" y2=\"{:.0f}\" stroke=\"#999\"/>",
        c.runs.size() * (2 * bar + 8) + 20, mid, mid, c.runs.size() * (2 * bar + 8) + 4);
    for (size_t i = 0; i < c.runs.size(); ++i) {
      const CalibrationRun& r = c.runs[i];
      const double y = 4 + static_cast<double>(i) * (2 * bar + 8);
      for (int k = 0; k < 2; ++k) {
        const double e = r.measured_s / (k == 0 ? r.before_s : r.after_s) - 1, w = half * std::fabs(e) / most;
        o += fmt::format(
            "<rect class=\"err\" x=\"{:.1f}\" y=\"{:.0f}\" width=\"{:.1f}\" height=\"{:.0f}\" fill=\"{}\">"
            "<title>run {} {}: {:+.1f}%</title></rect>",
            e < 0 ? mid - w : mid, y + k * bar, w, bar, k == 0 ? "#bab0ac" : "#4e79a7", i + 1,
            k == 0 ? "before" : "after", 100 * e);
      }
      o += fmt::format("<text x=\"4\" y=\"{:.0f}\">run {}</text>", y + 1.5 * bar, i + 1);
    }
    o +=
        "</svg><div class=\"legend note\"><span style=\"background:#bab0ac\"></span>error before"
        "<span style=\"background:#4e79a7\"></span>error after (measured tokens/s against predicted)</div></section>\n";
  }
  *out = o + "</body></html>\n";
  return Status::OK();
}

namespace {

// The process groups of a launch plan: kind, how many, their size, the first one.
std::string LaunchGroups(const LaunchPlan& L) {
  std::string o =
      "<section id=\"groups\"><h2>Process groups</h2><table><tr><th class=\"l\">kind</th><th>groups</th>"
      "<th>ranks each</th><th class=\"l\">first group (ranks)</th></tr>";
  const std::pair<const char*, const std::vector<std::vector<int64_t>>*> kinds[] = {
      {"tensor parallel", &L.tp_groups},  {"pipeline", &L.pp_groups},        {"data parallel (x cp)", &L.dp_groups},
      {"context parallel", &L.cp_groups}, {"expert parallel", &L.ep_groups}, {"expert data parallel", &L.edp_groups}};
  for (const auto& [name, groups] : kinds) {
    if (groups->empty()) continue;
    std::string first;
    for (size_t i = 0; i < groups->front().size() && i < 32; ++i)
      first += fmt::format("{}{}", i ? ", " : "", groups->front()[i]);
    if (groups->front().size() > 32) first += ", ...";
    o += fmt::format("<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td></tr>", name,
                     groups->size(), groups->front().size(), first);
  }
  return o + "</table></section>\n";
}

// Each program's actions counted by kind, and in order in a folded list (no script: <details>).
std::string LaunchPrograms(const LaunchPlan& L) {
  static const char* kKinds[] = {"F",         "B",         "W",           "recv act", "send act",
                                 "recv grad", "send grad", "grad reduce", "optimizer"};
  std::string o =
      "<section id=\"programs\"><h2>Programs (one per pipeline position and replica)</h2><table><tr><th>program</th>"
      "<th>position</th><th>replica</th><th>ranks</th><th>actions</th>";
  for (const char* k : kKinds) o += fmt::format("<th>{}</th>", k);
  o += "</tr>";
  for (size_t i = 0; i < L.programs.size(); ++i) {
    const RankProgram& g = L.programs[i];
    int64_t count[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0}, ranks = 0;
    for (const Action& a : g.actions) ++count[static_cast<int>(a.kind)];
    for (const LaunchRank& r : L.ranks) ranks += r.program == static_cast<int64_t>(i);
    o += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>", i + 1, g.position,
                     g.replica < 0 ? std::string("any") : std::to_string(g.replica), ranks,
                     Fig(fmt::format("programs[{}].actions", i), static_cast<double>(g.actions.size()),
                         std::to_string(g.actions.size())));
    for (int64_t c : count) o += fmt::format("<td>{}</td>", c);
    o += "</tr>";
  }
  o += "</table>";
  for (size_t i = 0; i < L.programs.size(); ++i) {
    const RankProgram& g = L.programs[i];
    o += fmt::format("<details class=\"note\"><summary>program {}: position {}, {} actions</summary><pre>", i + 1,
                     g.position, g.actions.size());
    for (size_t k = 0; k < g.actions.size(); ++k) {
      o += fmt::format("{:6}  {}\n", k + 1, XmlText(ActionToString(g.actions[k])));
      if (k + 1 == 2000 && g.actions.size() > 2000) {
        o += fmt::format("... {} more: planner inspect LAUNCH --rank N prints them all\n", g.actions.size() - 2000);
        break;
      }
    }
    o += "</pre></details>";
  }
  return o + "</section>\n";
}

// The rank map: where each rank runs and what it holds (the first 1024 ranks).
std::string LaunchRanks(const LaunchPlan& L) {
  std::string o =
      "<section id=\"ranks\"><h2>Ranks</h2><table><tr><th>rank</th><th>node</th><th>device</th><th>stage</th>"
      "<th>replica</th><th>tp rank</th><th>cp rank</th><th>program</th></tr>";
  for (size_t i = 0; i < L.ranks.size() && i < 1024; ++i) {
    const LaunchRank& r = L.ranks[i];
    o +=
        fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    r.rank, r.node, r.local_device, r.stage, r.replica, r.tp_rank, r.cp_rank, r.program + 1);
  }
  o += "</table>";
  if (L.ranks.size() > 1024)
    o += fmt::format("<p class=\"note\">{} more ranks: launch.yaml lists them all</p>", L.ranks.size() - 1024);
  return o + "</section>\n";
}

}  // namespace

Status RenderLaunchHtml(const LaunchPlan& L, const std::string& title, const std::string& predicted_svg,
                        std::string* out) {
  std::string o = Head(title);
  o += "<section id=\"card\"><h2>Launch plan</h2><dl class=\"card\">";
  auto row = [&](const std::string& k, const std::string& v) { o += "<dt>" + XmlText(k) + "</dt><dd>" + v + "</dd>"; };
  row("model", XmlText(fmt::format("{} (digest {})", L.model_file, L.model_digest.substr(0, 12))));
  row("plan digest", XmlText(L.plan_digest.substr(0, 12)));
  row("device", XmlText(fmt::format("{}, {} per node", DeviceName(L.device), L.gpus_per_node)));
  row("ranks", Fig("ranks", static_cast<double>(L.ranks.size()), std::to_string(L.ranks.size())) +
                   XmlText(L.servers.empty() ? "" : fmt::format(" + {} summation servers", L.servers.size())));
  row("layout", Fig("tp", static_cast<double>(L.tp), "tp " + std::to_string(L.tp)) + " " +
                    Fig("pp", static_cast<double>(L.pp), "pp " + std::to_string(L.pp)) + " " +
                    Fig("dp", static_cast<double>(L.dp), "dp " + std::to_string(L.dp)) +
                    XmlText(fmt::format(" cp {} ep {} | schedule {} (v={})", L.cp, L.ep, ScheduleName(L.schedule),
                                        L.interleave)));
  row("batch",
      Fig("microbatch_size", static_cast<double>(L.microbatch_size), std::to_string(L.microbatch_size)) + " x " +
          Fig("num_microbatches", static_cast<double>(L.num_microbatches), std::to_string(L.num_microbatches)) +
          XmlText(" microbatches per replica, global ") +
          Fig("global_batch", static_cast<double>(L.global_batch), std::to_string(L.global_batch)));
  row("predicted iteration (s)",
      Fig("predicted.iteration_seconds", L.predicted_iteration_s, fmt::format("{:.4f}", L.predicted_iteration_s)));
  row("predicted bubble (%)", Fig("predicted.bubble_fraction", L.predicted_bubble_fraction,
                                  fmt::format("{:.1f}", 100 * L.predicted_bubble_fraction)));
  row("run", XmlText(fmt::format("{} iterations", L.run.iterations)));
  o += "</dl></section>\n";
  if (!predicted_svg.empty())
    o += "<section id=\"timeline\"><h2>Predicted timeline (the stage times through the schedule, per pipeline "
         "device)</h2>" +
         predicted_svg + "</section>\n";
  o += LaunchGroups(L) + LaunchPrograms(L) + LaunchRanks(L);
  *out = o + "</body></html>\n";
  return Status::OK();
}

}  // namespace planner
