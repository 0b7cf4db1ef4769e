#include "planner/render.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/units.h"
#include "dp_solver/schedule_sim.h"

namespace planner {

std::string RenderBandAndLead(const Plan& p) {
  const auto& x = p.predicted;
  std::string o;
  if (x.band) {
    const PlanBand& b = *x.band;
    o += fmt::format(
        "band: tokens/s/GPU {:.1f}..{:.1f} | MFU {:.1f}..{:.1f}% | iteration {:.3f}..{:.3f} s ({}: {} calibration "
        "run{}{}, errors {:+.1f}%..{:+.1f}%{})\n",
        b.RateLow(x.tokens_per_second_per_gpu), b.RateHigh(x.tokens_per_second_per_gpu), 100 * b.RateLow(x.mfu),
        100 * b.RateHigh(x.mfu), b.IterationLow(x.iteration_s), b.IterationHigh(x.iteration_s), b.basis, b.runs,
        b.runs == 1 ? "" : "s",
        b.checks > 0 ? fmt::format(" and {} published check run{}", b.checks, b.checks == 1 ? "" : "s") : "",
        100 * b.error_low, 100 * b.error_high,
        b.basis.size() > 4 && b.basis.compare(b.basis.size() - 4, 4, " MoE") == 0
            ? "; the MoE runs' spread joined with the dense runs' band"
        : b.runs + b.checks < 3 ? "; fewer than 3: joined with every engine's spread"
                                : "");
  }
  if (x.lead) {
    const PlanLead& l = *x.lead;
    const double lead = l.runner_up_s - x.iteration_s, bare = l.runner_up_no_overlap_s - l.chosen_no_overlap_s;
    o += fmt::format("lead over rank 2: {:.3f} s ({:.1f}%); with every overlap off {:.3f} s", lead,
                     100 * lead / x.iteration_s, bare);
    if (lead > 0 && bare < 0) o += " (rank 2 faster: the lead rests wholly on overlap assumptions)";
    else if (lead > 0)
      o += fmt::format(" ({:.0f}% of the lead rests on overlap assumptions)",
                       100 * std::max(0.0, l.OverlapShare(x.iteration_s)));
    if (x.band) {
      o += l.runners_up_within_band > 0 ? fmt::format(" | {} of {} runners-up within the band: no clear winner",
                                                      l.runners_up_within_band, p.runners_up.size())
                                        : " | every runner-up outside the band";
    }
    o += "\n";
  }
  return o;
}

std::string RenderPlanSummary(const Plan& p) {
  std::string o;
  o += fmt::format("model {} on {} x {} ({}), global batch {}\n", p.model_name, p.gpus, p.cluster_name,
                   CostSourceKindName(p.cost_source), p.global_batch);
  std::string state = p.grad_dtype ? std::string(" | gradients ") + DTypeName(*p.grad_dtype) : "";
  if (p.optimizer_state != OptimizerState::kFp32)
    state += fmt::format(" | optimizer state {} ({:g} B/param)", OptimizerStateName(p.optimizer_state),
                         OptimizerStateBytes(p.optimizer_state));
  if (p.fp8_param_gather) state += " | FP8 parameters";
  o += "configuration: " + p.Label(state) +
       (p.calibration.empty() ? std::string() : " | calibrated: " + Printable(p.calibration)) + "\n";
  const auto& x = p.predicted;
  // Small devices (CPU ranks) read better in GFLOP/s; no figure when the model's FLOPs are unknown (profile only).
  const std::string rate = x.tflops_per_gpu <= 0  ? std::string("FLOP/s n/a (no model file)")
                           : x.tflops_per_gpu < 1 ? fmt::format("{:.1f} GFLOP/s per device", x.tflops_per_gpu * 1e3)
                                                  : fmt::format("{:.1f} TFLOP/s per GPU", x.tflops_per_gpu);
  const std::string mfu = x.tflops_per_gpu <= 0 ? std::string("n/a")
                          : x.mfu > 0           ? fmt::format("{:.1f}%", 100 * x.mfu)
                                                : std::string("n/a (no peak for this precision: see the notes)");
  o += fmt::format(
      "predicted: iteration {} | {:.2f} samples/s | {} | MFU {} | bubble {:.1f}% | "
      "peak memory {} of {} usable\n",
      FormatSeconds(x.iteration_s), x.samples_per_second, rate, mfu, 100 * x.bubble_fraction,
      FormatBytes(x.peak_memory_bytes), FormatBytes(p.usable_memory_bytes));
  o += fmt::format("           pipeline {} + exposed DP all-reduce {} + optimizer {}\n", FormatSeconds(x.pipeline_s),
                   FormatSeconds(x.dp_allreduce_s), FormatSeconds(x.optimizer_s));
  return o + RenderPlanFigures(p) + RenderBandAndLead(p);
}

std::string RenderStageTable(const Plan& p) {
  std::string o =
      fmt::format("{:>5} {:>5} {:>9} {:>24} {:>4} {:>3} {:>10} {:>10} {:>10} {:>11} {:>10} {:>10} {:>7} {:>10}\n",
                  "stage", "chunk", "layers", "first..last", "repl", "tp", "fwd (ms)", "bwd-in (ms)", "bwd-w (ms)",
                  "ep-a2a (ms)", "p2p (ms)", "dp-ar (ms)", "inflt", "mem (GiB)");
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const auto& s = p.stages[i];
    std::string names =
        s.first_layer_name == s.last_layer_name ? s.first_layer_name : s.first_layer_name + ".." + s.last_layer_name;
    if (names.size() > 24) names = names.substr(0, 21) + "...";
    o += fmt::format(
        "{:>5} {:>5} {:>9} {:>24} {:>4} {:>3} {:>10.3f} {:>10.3f} {:>10.3f} {:>11.3f} {:>10.3f} {:>10.3f} {:>7} "
        "{:>10.2f}\n",
        i, s.chunk, fmt::format("{}-{}", s.first_layer, s.last_layer), names, s.replicas, s.tp, s.forward_s * 1e3,
        s.backward_input_s * 1e3, s.backward_weight_s * 1e3, s.ep_comm_s * 1e3, s.p2p_s * 1e3, s.dp_allreduce_s * 1e3,
        s.in_flight, s.peak_memory_bytes / kGiB);
  }
  return o;
}

std::string RenderDpCommTable(const Plan& p) {
  const auto& rows = p.predicted.dp_comm_seconds;
  if (rows.empty()) return "";
  double chosen = 0;
  for (const auto& [name, seconds] : rows) {
    if (name == DpCommName(p.dp_comm)) chosen = seconds;
  }
  std::string o = "DP gradient sync per architecture (chosen layout; busiest stage, not overlapped):\n";
  o += fmt::format("{:<24} {:>19} {:>10}\n", "architecture", "seconds/iteration", "vs chosen");
  for (const auto& [name, seconds] : rows) {
    std::string label = name == "ps" && p.ps_colocated ? "ps (colocated)" : name;
    if (name == DpCommName(p.dp_comm) && p.ps_colocated) label += " (chosen)";
    else if (name == DpCommName(p.dp_comm))
      label += p.dp_servers > 0 ? fmt::format(" (chosen, k={})", p.dp_servers) : " (chosen)";
    const std::string ratio = chosen > 0 ? fmt::format("{:.2f}x", seconds / chosen) : "n/a";
    o += fmt::format("{:<24} {:>19.6f} {:>10}\n", label, seconds, ratio);
  }
  return o;
}

std::string RenderCommunication(const Plan& p) {
  const auto& rows = p.predicted.communication;
  if (rows.empty()) return "";
  std::string o = "communication per iteration (device exposing the most; seconds):\n";
  o += fmt::format("{:<20} {:>12} {:>12} {:>12}\n", "kind", "total (s)", "hidden (s)", "exposed (s)");
  for (const PlanComm& c : rows) {
    o += fmt::format("{:<20} {:>12.6f} {:>12.6f} {:>12.6f}\n", c.kind, c.total_s,
                     std::max(0.0, c.total_s - c.exposed_s), c.exposed_s);
  }
  return o;
}

std::string RenderRunnersUp(const Plan& p) {
  if (p.runners_up.empty()) return "";
  std::string o =
      fmt::format("{:>4} {:>10} {:>3} {:>3} {:>4} {:>3} {:>12} {:>12} {:>6} {:>13} {:>9} {:>5} {:>14} {:>11}  {}\n",
                  "rank", "tp-pp-dp", "cp", "sp", "ep", "etp", "replication", "microbatch", "m", "schedule",
                  "recompute", "ZeRO", "iteration (s)", "samples/s", "why it lost");
  for (size_t i = 0; i < p.runners_up.size(); ++i) {
    const auto& s = p.runners_up[i];
    std::string sched = ScheduleName(s.schedule) + (s.interleave > 1 ? fmt::format("/v{}", s.interleave) : "");
    std::string repl = s.config.size() > 12 ? s.config.substr(0, 11) + "~" : s.config;
    o += fmt::format(
        "{:>4} {:>10} {:>3} {:>3} {:>4} {:>3} {:>12} {:>12} {:>6} {:>13} {:>9} {:>5} {:>14.4f} {:>11.2f}  {}\n", i + 2,
        s.ParallelString(), s.cp, s.sequence_parallel ? "on" : "off", s.ep, s.etp, repl, s.microbatch_size,
        s.num_microbatches, sched, RecomputeLabel(s.recompute, s.recompute_num_layers, s.recompute_modules),
        ZeroStageNumber(s.zero_stage), s.iteration_s, s.samples_per_second, s.why_lost);
  }
  return o;
}

std::string FormatCount(double count) {
  if (!(count > 0)) return "n/a";
  static const std::pair<double, const char*> kUnits[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
  for (const auto& [scale, suffix] : kUnits) {
    if (count >= scale)
      return fmt::format(fmt::runtime(count < 10 * scale ? "{:.2f}{}" : "{:.1f}{}"), count / scale, suffix);
  }
  return fmt::format("{:.0f}", count);
}

namespace {

// "n/a" for a figure that is 0 (unknown), else the value formatted.
std::string OrNa(double v, const char* spec) { return v > 0 ? fmt::format(fmt::runtime(spec), v) : std::string("n/a"); }

// Days and GPU-hours: whole units from 100, two decimals from 1, three significant digits below.
std::string FormatAmount(double v) {
  return v >= 100 ? fmt::format("{:.0f}", v) : v >= 1 ? fmt::format("{:.2f}", v) : fmt::format("{:.3g}", v);
}

}  // namespace

bool TrainingTime(const Plan& p, double tokens, double* days, double* gpu_hours) {
  const double tps = p.predicted.tokens_per_second_per_gpu;
  const double gpus = static_cast<double>(p.gpus_used > 0 ? p.gpus_used : p.gpus);
  if (!(tokens > 0) || !(tps > 0) || !(gpus > 0)) return false;
  *days = tokens / (tps * gpus) / 86400;
  *gpu_hours = tokens / tps / 3600;
  return true;
}

std::string RenderPlanFigures(const Plan& p) {
  const auto& x = p.predicted;
  return fmt::format(
      "figures: {} parameters | model FLOPs per iteration {} | tokens/s/GPU {} | TFLOP/s/GPU model {}, hardware {} | "
      "MFU {} | HFU {}\n",
      FormatCount(p.model_parameters), OrNa(x.model_flops_per_iteration, "{:.4g} FLOP"),
      OrNa(x.tokens_per_second_per_gpu, "{:.1f}"), OrNa(x.model_tflops_per_gpu, "{:.1f}"),
      OrNa(x.tflops_per_gpu, "{:.1f}"), OrNa(100 * x.mfu, "{:.1f}%"), OrNa(100 * x.hfu, "{:.1f}%"));
}

std::string RenderTrainingTime(const Plan& p, double train_tokens) {
  double days = 0, gpu_hours = 0;
  return TrainingTime(p, train_tokens, &days, &gpu_hours)
             ? fmt::format("training on {} tokens: {} days on {} GPUs, {} GPU-hours\n", FormatCount(train_tokens),
                           FormatAmount(days), p.gpus_used > 0 ? p.gpus_used : p.gpus, FormatAmount(gpu_hours))
             : fmt::format("training on {} tokens: days n/a (no tokens/s/GPU: the model has no sequence length)\n",
                           FormatCount(train_tokens));
}

std::string RenderScalingTable(const std::vector<ScalingRow>& rows, double train_tokens) {
  const bool train = train_tokens > 0;
  // The expert-parallel sizes come last so the columns before them keep their places.
  std::string o = fmt::format(
      "{:>6} {:>3} {:>3} {:>3} {:>5} {:>3} {:>3} {:>4} {:>13} {:>9} {:>4} {:>12} {:>17} {:>14} {:>7} {:>7} {:>13}",
      "GPUs", "tp", "cp", "pp", "dp", "vp", "sp", "mbs", "schedule", "recompute", "ZeRO", "tokens/s/GPU",
      "model TFLOP/s/GPU", "hw TFLOP/s/GPU", "MFU (%)", "HFU (%)", "iteration (s)");
  o += (train ? fmt::format(" {:>9} {:>11}", "days", "GPU-hours") : "") + fmt::format(" {:>4} {:>3}\n", "ep", "etp");
  for (const auto& r : rows) {
    if (!r.error.empty()) {
      o += fmt::format("{:>6} no plan: {}\n", r.gpus, r.error);
      continue;
    }
    const Plan& p = r.plan;
    const auto& x = p.predicted;
    o += fmt::format(
        "{:>6} {:>3} {:>3} {:>3} {:>5} {:>3} {:>3} {:>4} {:>13} {:>9} {:>4} {:>12} {:>17} {:>14} {:>7} {:>7} {:>13.4f}",
        r.gpus, p.tp, p.cp, p.pp, p.dp, p.interleave, p.sequence_parallel ? "on" : "off", p.microbatch_size,
        ScheduleName(p.schedule), RecomputeLabel(p.recompute, p.recompute_num_layers, p.recompute_modules),
        ZeroStageNumber(p.zero_stage), OrNa(x.tokens_per_second_per_gpu, "{:.1f}"),
        OrNa(x.model_tflops_per_gpu, "{:.1f}"), OrNa(x.tflops_per_gpu, "{:.1f}"), OrNa(100 * x.mfu, "{:.1f}"),
        OrNa(100 * x.hfu, "{:.1f}"), x.iteration_s);
    double days = 0, gpu_hours = 0;
    if (train && TrainingTime(p, train_tokens, &days, &gpu_hours))
      o += fmt::format(" {:>9} {:>11}", FormatAmount(days), FormatAmount(gpu_hours));
    else if (train) o += fmt::format(" {:>9} {:>11}", "n/a", "n/a");
    o += fmt::format(" {:>4} {:>3}\n", p.ep, p.etp);
  }
  if (train)
    o += fmt::format("days and GPU-hours to train on {} tokens: days = tokens / (tokens/s/GPU x GPUs) / 86400\n",
                     FormatCount(train_tokens));
  return o;
}

namespace {

// Re-simulates the plan's schedule from its stage times. Uniform plans get
// one row per pipeline device (standing for its data-parallel replicas);
// PipeDream plans get one row per replica of every stage (round robin).
Status Replay(const Plan& p, SimResult* res, std::vector<std::string>* labels) {
  const Schedule s = p.schedule;
  std::vector<SimStage> st;
  for (const auto& x : p.stages) {
    SimStage y;
    y.forward_s = x.forward_s;
    y.backward_input_s = x.backward_input_s;
    y.backward_weight_s = x.backward_weight_s;
    if (p.p2p_overlap) y.send_s = x.p2p_s;
    else y.exposed_send_s = x.p2p_s;
    st.push_back(y);
  }
  const int64_t m = std::max<int64_t>(1, p.num_microbatches);
  labels->clear();
  if (s == Schedule::kPipeDream) {
    std::vector<int64_t> replicas, in_flight;
    for (const auto& x : p.stages) {
      int64_t r = std::max<int64_t>(1, x.replicas);
      replicas.push_back(r);
      in_flight.push_back(std::max<int64_t>(1, x.in_flight));
      for (int64_t k = 0; k < r; ++k) labels->push_back(fmt::format("s{} r{}", replicas.size() - 1, k));
    }
    return SimulateReplicated(st, replicas, in_flight, m, true, res);
  }
  int64_t dev = static_cast<int64_t>(p.stages.size()) / std::max<int64_t>(1, p.interleave);
  for (int64_t d = 0; d < dev; ++d) labels->push_back(fmt::format("device {}", d));
  return SimulateSchedule(s, st, dev, m, true, res);
}

}  // namespace

std::string RenderEventsText(const std::string& title, const std::vector<std::string>& labels,
                             const std::vector<SimEvent>& events, double makespan_s, int width) {
  width = std::max(20, width);
  const size_t dev = labels.size(), w = static_cast<size_t>(width);
  // Time of each kind per (row, column); a column shows its majority kind,
  // or idle when the device is busy less than half of it (no aliasing).
  const std::string kinds = "FBWC";
  std::vector<double> cover(dev * w * kinds.size(), 0.0);
  const double col_s = makespan_s > 0 ? makespan_s / width : 1;
  for (const auto& e : events) {
    size_t k = kinds.find(e.kind);
    if (k == std::string::npos || e.device < 0 || static_cast<size_t>(e.device) >= dev) continue;
    size_t a = static_cast<size_t>(std::max(0.0, e.start_s / col_s));
    for (size_t x = a; x < w && static_cast<double>(x) * col_s < e.end_s; ++x) {
      double lo = std::max(e.start_s, static_cast<double>(x) * col_s),
             hi = std::min(e.end_s, static_cast<double>(x + 1) * col_s);
      if (hi > lo) cover[(static_cast<size_t>(e.device) * w + x) * kinds.size() + k] += hi - lo;
    }
  }
  std::string o = fmt::format("{} ({} per column; F forward, B backward, W weight-gradient, C communication, . idle)\n",
                              title, FormatSeconds(col_s));
  for (size_t d = 0; d < dev; ++d) {
    std::string row(w, '.');
    for (size_t x = 0; x < w; ++x) {
      const double* c = &cover[(d * w + x) * kinds.size()];
      double total = 0, most = 0;
      for (size_t k = 0; k < kinds.size(); ++k) {
        total += c[k];
        if (c[k] > most) {
          most = c[k];
          row[x] = kinds[k];
        }
      }
      if (total < 0.5 * col_s) row[x] = '.';
    }
    o += fmt::format("{:>10} |{}|\n", labels[d], row);
  }
  return o;
}

std::string XmlText(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '&') o += "&amp;";
    else if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::string RenderEventsSvg(const std::string& title, const std::vector<std::string>& labels,
                            const std::vector<SimEvent>& events, double makespan_s) {
  const int64_t dev = static_cast<int64_t>(labels.size());
  const double width = 1200, row_h = 28, left = 90, top = 40;
  double scale = makespan_s > 0 ? (width - left - 20) / makespan_s : 0;
  double height = top + static_cast<double>(dev) * row_h + 60;
  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"monospace\" "
      "font-size=\"12\">\n",
      width, height);
  o += fmt::format("<text x=\"10\" y=\"20\">{}</text>\n", XmlText(title));
  for (int64_t d = 0; d < dev; ++d) {
    double y = top + static_cast<double>(d) * row_h;
    o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"#eeeeee\"/>\n", left, y,
                     makespan_s * scale, row_h - 4);
    o += fmt::format("<text x=\"10\" y=\"{}\">{}</text>\n", y + 16, XmlText(labels[static_cast<size_t>(d)]));
  }
  for (const auto& e : events) {
    if (e.device < 0 || e.device >= dev) continue;
    const char* color =
        e.kind == 'F' ? "#4e79a7" : (e.kind == 'W' ? "#59a14f" : (e.kind == 'C' ? "#e15759" : "#f28e2b"));
    double x = left + e.start_s * scale, w = std::max(0.5, (e.end_s - e.start_s) * scale);
    double y = top + static_cast<double>(e.device) * row_h;
    o += fmt::format(
        "<rect x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\" stroke=\"white\" "
        "stroke-width=\"0.5\"><title>{} stage {} microbatch {}: {:.3f}-{:.3f} ms</title></rect>\n",
        x, y, w, row_h - 4, color, e.kind, e.stage, e.microbatch, e.start_s * 1e3, e.end_s * 1e3);
  }
  double ly = top + static_cast<double>(dev) * row_h + 25;
  o += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"14\" fill=\"#4e79a7\"/><text x=\"{}\" y=\"{}\">forward</text>\n",
      left, ly, left + 20, ly + 12);
  o += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"14\" fill=\"#f28e2b\"/><text x=\"{}\" y=\"{}\">backward</text>\n",
      left + 110, ly, left + 130, ly + 12);
  o += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"14\" fill=\"#59a14f\"/><text x=\"{}\" y=\"{}\">weight "
      "gradient</text>\n",
      left + 230, ly, left + 250, ly + 12);
  o += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"14\" fill=\"#e15759\"/><text x=\"{}\" "
      "y=\"{}\">communication</text>\n",
      left + 380, ly, left + 400, ly + 12);
  o += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"14\" fill=\"#eeeeee\"/><text x=\"{}\" y=\"{}\">idle</text>\n",
      left + 520, ly, left + 540, ly + 12);
  o += "</svg>\n";
  return o;
}

Status RenderTimelineText(const Plan& p, int width, std::string* out) {
  SimResult res;
  std::vector<std::string> labels;
  PLANNER_RETURN_IF_ERROR(Replay(p, &res, &labels));
  std::string o = RenderEventsText(fmt::format("predicted timeline ({} microbatches)", p.num_microbatches), labels,
                                   res.events, res.makespan_s, width);
  o += fmt::format("makespan {}, bubble {:.1f}%{}\n", FormatSeconds(res.makespan_s), 100 * res.bubble_fraction,
                   p.schedule == Schedule::kPipeDream
                       ? " (one iteration from an empty pipeline; in steady state there is no flush)"
                       : "");
  *out = std::move(o);
  return Status::OK();
}

Status RenderTimelineSvg(const Plan& p, std::string* out) {
  SimResult res;
  std::vector<std::string> labels;
  PLANNER_RETURN_IF_ERROR(Replay(p, &res, &labels));
  *out = RenderEventsSvg(
      fmt::format("{} tp-pp-dp {} | replication {} | {} | {} microbatches | makespan {} | bubble {:.1f}%", p.model_name,
                  p.ParallelString(), p.config, ScheduleName(p.schedule), p.num_microbatches,
                  FormatSeconds(res.makespan_s), 100 * res.bubble_fraction),
      labels, res.events, res.makespan_s);
  return Status::OK();
}

}  // namespace planner
