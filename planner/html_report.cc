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
  if (x.band) {
    const PlanBand& b = *x.band;
    row("band", Fig("predicted.band.iteration_seconds_low", b.IterationLow(x.iteration_s),
                    fmt::format("{:.4f}", b.IterationLow(x.iteration_s))) +
                    " .. " +
                    Fig("predicted.band.iteration_seconds_high", b.IterationHigh(x.iteration_s),
                        fmt::format("{:.4f}", b.IterationHigh(x.iteration_s))) +
                    XmlText(fmt::format(" s ({}: {} runs, errors {:+.1f}%..{:+.1f}%)", b.basis, b.runs,
                                        100 * b.error_low, 100 * b.error_high)));
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
  *o += Communication(p, sfx) + RunnersUp(p, sfx);
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

// Tokens/s/GPU (left axis, blue) and MFU (right axis, orange) against the GPUs, on a log2 x axis.
std::string ScalingPlot(const std::vector<Plan>& plans) {
  if (plans.size() < 2) return "";
  double lo = INFINITY, hi = 0, top = 0;
  for (const Plan& p : plans) {
    lo = std::min(lo, std::log2(static_cast<double>(p.gpus)));
    hi = std::max(hi, std::log2(static_cast<double>(p.gpus)));
    top = std::max(top, p.predicted.tokens_per_second_per_gpu);
  }
  if (!(top > 0) || hi == lo) return "";
  const double left = 80, width = 600, y0 = 10, height = 200;
  auto x = [&](const Plan& p) { return left + width * (std::log2(static_cast<double>(p.gpus)) - lo) / (hi - lo); };
  std::string tok, mfu, marks;
  for (const Plan& p : plans) {
    const double yt = y0 + height * (1 - p.predicted.tokens_per_second_per_gpu / (top * 1.1));
    const double ym = y0 + height * (1 - p.predicted.mfu);
    tok += fmt::format("{:.1f},{:.1f} ", x(p), yt);
    mfu += fmt::format("{:.1f},{:.1f} ", x(p), ym);
    marks += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"#4e79a7\"><title>{} GPUs: {:.1f} tokens/s/GPU</title>"
        "</circle><text x=\"{:.1f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}</text>",
        x(p), yt, p.gpus, p.predicted.tokens_per_second_per_gpu, x(p), y0 + height + 16, p.gpus);
  }
  return fmt::format(
      "<svg id=\"scaling-plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "font-family=\"sans-serif\" font-size=\"11\"><rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "fill=\"none\" stroke=\"#ccc\"/><polyline fill=\"none\" stroke=\"#4e79a7\" stroke-width=\"2\" points=\"{}\"/>"
      "<polyline fill=\"none\" stroke=\"#f28e2b\" stroke-width=\"2\" stroke-dasharray=\"4 3\" points=\"{}\"/>{}"
      "<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"end\">{:.0f}</text><text x=\"{:.0f}\" y=\"{:.0f}\" "
      "text-anchor=\"end\">0"
      "</text><text x=\"{:.0f}\" y=\"{:.0f}\">100% MFU</text><text x=\"{:.0f}\" y=\"{:.0f}\" "
      "text-anchor=\"middle\">GPUs"
      "</text></svg><div class=\"legend note\"><span style=\"background:#4e79a7\"></span>tokens/s/GPU (left axis)"
      "<span style=\"background:#f28e2b\"></span>MFU (right axis, 0 to 100%)</div>",
      left + width + 80, y0 + height + 40, left, y0, width, height, tok, mfu, marks, left - 4, y0 + 10, top * 1.1,
      left - 4, y0 + height, left + width + 4, y0 + 10, left + width / 2, y0 + height + 32);
}

}  // namespace

Status RenderPlansHtml(const std::vector<Plan>& plans, const std::string& title, std::string* out) {
  std::string o = Head(title);
  o += "<section id=\"scaling\"><h2>Scaling</h2><table><tr><th>GPUs</th><th class=\"l\">layout</th>"
       "<th>iteration (s)</th><th>tokens/s/GPU</th><th>MFU (%)</th></tr>";
  for (const Plan& p : plans)
    o += fmt::format("<tr><td>{}</td><td class=\"l\">{}</td><td>{:.4f}</td><td>{:.1f}</td><td>{:.1f}</td></tr>", p.gpus,
                     XmlText(p.ParallelString()), p.predicted.iteration_s, p.predicted.tokens_per_second_per_gpu,
                     100 * p.predicted.mfu);
  o += "</table>" + ScalingPlot(plans) + "</section>\n";
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

Status RenderRunHtml(const std::string& title, const std::string& report_md, const std::vector<double>& loss,
                     const std::vector<double>& iteration_s, const std::string& timeline_svg, std::string* out) {
  std::string o = Head(title);
  o += "<section id=\"report\"><h2>Measured against predicted (report.md)</h2><pre>" + XmlText(report_md) +
       "</pre></section>\n";
  o += Curve("loss", "Loss", "metrics.csv", loss);
  o += Curve("iteration-seconds", "Iteration time", "s, metrics.csv", iteration_s);
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

}  // namespace planner
