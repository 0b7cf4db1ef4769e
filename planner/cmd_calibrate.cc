// planner calibrate --plan PLAN [--plan PLAN2 ...] LOG... -o FILE: the efficiencies of the user's own runs
// (docs/calibration.md). Each log (Megatron-LM's training log, torchtitan's, planner run's metrics.csv or
// run directory) is read beside the plan that produced it, its iteration time measured (median after
// warm-up), the plan predicted again, and the scales of the engine's sustained rates per operation class
// fitted to all runs (per class where the runs separate the classes, one scale otherwise), checked
// against the physical bounds and written with the runs' residuals before and after.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "common/digest.h"
#include "common/file_writer.h"
#include "common/log.h"
#include "common/units.h"
#include "planner/commands.h"
#include "planner/output_guard.h"
#include "planner/predict_plan.h"
#include "spec/calibration.h"
#include "spec/kernel_table.h"
#include "spec/launch_plan.h"
#include "spec/plan.h"
#include "spec/profile.h"
#include "spec/profiler_trace.h"
#include "spec/run_logs.h"
#include "spec/yaml_reader.h"

namespace planner {

namespace {

namespace fs = std::filesystem;

struct CalibrateArgs {
  std::vector<std::string> plans, logs;
  std::string output;
  bool force = false;
};

// One measured run and its plan's predictor.
struct Measured {
  CalibrationRun run;
  std::unique_ptr<PlanPredictor> predictor;
  Plan plan;
};

// A planner run directory (runs/<id>) or its metrics.csv: the metrics file, and the plan digest its launch
// recorded ("" when the launch cannot be found).
Status PlannerRunFiles(const std::string& path, std::string* metrics, std::string* plan_digest) {
  std::error_code ec;
  fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  *metrics = fs::is_directory(path, ec) ? (dir / "metrics.csv").string() : path;
  const fs::path launch = dir.parent_path().parent_path() / "launch.yaml";
  plan_digest->clear();
  if (!fs::exists(launch, ec)) return Status::OK();
  LaunchPlan lp;
  PLANNER_RETURN_IF_ERROR(LoadLaunchPlan(launch.string(), &lp));
  *plan_digest = lp.plan_digest;
  return Status::OK();
}

// The layout and model settings a log states, against the plan: InvalidArgument naming both.
Status CheckLogAgainstPlan(const RunLog& log, const std::string& plan_path, const Plan& p) {
  const std::pair<const char*, int64_t> want[] = {
      {"tensor_model_parallel_size", p.tp},
      {"pipeline_model_parallel_size", p.pp},
      {"context_parallel_size", p.cp},
      {"data_parallel_size", p.dp},
      {"expert_model_parallel_size", p.ep},
      {"global_batch_size", p.global_batch},
      {"micro_batch_size", p.microbatch_size},
      {"seq_length", p.seq},
      {"world_size", p.gpus_used},
      {"virtual_pipeline_model_parallel_size", p.schedule == Schedule::kInterleaved ? p.interleave : 0}};
  for (const auto& [key, value] : want) {
    auto it = log.settings.find(key);
    if (it == log.settings.end() || value <= 0 || it->second == value) continue;
    return Status::InvalidArgument(fmt::format(
        "{}: the run's arguments say {} {}, plan {} has {}: a log of another layout or model than the plan; give each "
        "log with the plan of its run (--plan once per log, in order)",
        log.path, key, it->second, plan_path, value));
  }
  if (log.global_batch > 0 && log.global_batch != p.global_batch)
    return Status::InvalidArgument(fmt::format(
        "{}:{}: global batch size {}, plan {} has {}: a log of another run than the plan's; give each log with the "
        "plan of its run",
        log.path, log.line.front(), log.global_batch, plan_path, p.global_batch));
  return Status::OK();
}

Status ReadRun(const std::string& plan_path, const std::string& log_path, Measured* m) {
  std::string plan_text;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(plan_path, &plan_text, kMaxConfigFileBytes));
  PLANNER_RETURN_IF_ERROR(ParsePlan(plan_path, plan_text, &m->plan));
  std::string source = log_path, digest;
  std::error_code ec;
  const bool run_dir = fs::is_directory(log_path, ec) || fs::path(log_path).filename() == "metrics.csv";
  if (run_dir) PLANNER_RETURN_IF_ERROR(PlannerRunFiles(log_path, &source, &digest));
  std::string text;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(source, &text));
  RunLog log;
  PLANNER_RETURN_IF_ERROR(ParseRunLog(source, text, &log));
  if (!digest.empty() && digest != DigestHex(plan_text))
    return Status::InvalidArgument(fmt::format(
        "{}: a run of another plan (its launch.yaml records plan digest {}, {} is {}); give the plan codegen wrote "
        "that launch from",
        source, digest, plan_path, DigestHex(plan_text)));
  PLANNER_RETURN_IF_ERROR(CheckLogAgainstPlan(log, plan_path, m->plan));
  m->predictor = std::make_unique<PlanPredictor>();
  PLANNER_RETURN_IF_ERROR(m->predictor->Init(plan_path, m->plan));
  CalibrationRun& r = m->run;
  r.source = source;
  r.format = log.format;
  r.plan = plan_path;
  r.layout = m->plan.ParallelString();
  const double tokens =
      static_cast<double>(m->plan.global_batch) * static_cast<double>(std::max<int64_t>(1, m->plan.seq));
  PLANNER_RETURN_IF_ERROR(MeasuredIterationSeconds(log, tokens, m->plan.gpus_used, &r.measured_s, &r.iterations));
  r.measured_memory_GiB = log.peak_memory_GiB;
  return Status::OK();
}

// The runs' log residuals at scales exp(theta) (classes in `cls`; one entry: every class together).
Status Residuals(const std::vector<Measured>& runs, const std::vector<int>& cls, const std::vector<double>& theta,
                 std::vector<double>* r) {
  CostScales k;
  double* field[3] = {&k.gemm, &k.attention, &k.memory};
  if (cls.size() == 1 && cls[0] < 0) {
    for (double* f : field) *f = std::exp(theta[0]);
  } else {
    for (size_t j = 0; j < cls.size(); ++j) *field[cls[j]] = std::exp(theta[j]);
  }
  r->clear();
  for (const Measured& m : runs) {
    PlanPredicted p;
    PLANNER_RETURN_IF_ERROR(m.predictor->Predict(k, &p));
    r->push_back(std::log(p.iteration_s / m.run.measured_s));
  }
  return Status::OK();
}

// Gauss-Newton on the log residuals over the classes `cls` (finite differences); *theta in and out.
Status Fit(const std::vector<Measured>& runs, const std::vector<int>& cls, std::vector<double>* theta) {
  const size_t n = runs.size(), q = cls.size();
  std::vector<double> r, rh;
  for (int iter = 0; iter < 40; ++iter) {
    PLANNER_RETURN_IF_ERROR(Residuals(runs, cls, *theta, &r));
    std::vector<std::vector<double>> J(n, std::vector<double>(q));
    for (size_t j = 0; j < q; ++j) {
      std::vector<double> t = *theta;
      t[j] += 1e-3;
      PLANNER_RETURN_IF_ERROR(Residuals(runs, cls, t, &rh));
      for (size_t i = 0; i < n; ++i) J[i][j] = (rh[i] - r[i]) / 1e-3;
    }
    // (J^T J + lambda I) delta = -J^T r, q <= 3: Gaussian elimination.
    std::vector<std::vector<double>> A(q, std::vector<double>(q + 1, 0));
    for (size_t a = 0; a < q; ++a) {
      for (size_t b = 0; b < q; ++b)
        for (size_t i = 0; i < n; ++i) A[a][b] += J[i][a] * J[i][b];
      A[a][a] += 1e-9;
      for (size_t i = 0; i < n; ++i) A[a][q] -= J[i][a] * r[i];
    }
    for (size_t c = 0; c < q; ++c) {
      size_t piv = c;
      for (size_t k = c + 1; k < q; ++k)
        if (std::fabs(A[k][c]) > std::fabs(A[piv][c])) piv = k;
      std::swap(A[c], A[piv]);
      if (std::fabs(A[c][c]) < 1e-12) return Status::OK();  // flat: nothing more to learn
      for (size_t k = 0; k < q; ++k) {
        if (k == c) continue;
        const double f = A[k][c] / A[c][c];
        for (size_t l = c; l <= q; ++l) A[k][l] -= f * A[c][l];
      }
    }
    double step = 0;
    for (size_t c = 0; c < q; ++c) {
      const double d = std::clamp(A[c][q] / A[c][c], -1.0, 1.0);
      (*theta)[c] += d;
      (*theta)[c] = std::clamp((*theta)[c], -4.0, 4.0);
      step = std::max(step, std::fabs(d));
    }
    if (step < 1e-7) break;
  }
  return Status::OK();
}

const char* const kClassNames[3] = {"gemm", "attention", "memory"};

// Which classes the runs exercise and whether they separate them: the sensitivity of each run's log time
// to each class's log scale; per class when at least as many runs as exercised classes and the normalised
// sensitivities are far from collinear (the smallest pivot of their Gram matrix above 0.05).
Status SeparableClasses(const std::vector<Measured>& runs, std::vector<int>* cls) {
  cls->clear();
  const size_t n = runs.size();
  std::vector<double> r0, rh;
  PLANNER_RETURN_IF_ERROR(Residuals(runs, {0, 1, 2}, {0, 0, 0}, &r0));
  std::vector<std::vector<double>> cols;
  for (int c = 0; c < 3; ++c) {
    std::vector<double> t = {0, 0, 0};
    t[static_cast<size_t>(c)] = 0.01;
    PLANNER_RETURN_IF_ERROR(Residuals(runs, {0, 1, 2}, t, &rh));
    std::vector<double> col(n);
    double norm = 0, most = 0;
    for (size_t i = 0; i < n; ++i) {
      col[i] = (rh[i] - r0[i]) / 0.01;
      norm += col[i] * col[i];
      most = std::max(most, std::fabs(col[i]));
    }
    if (most < 0.03) continue;  // under 3% of any run's time
    for (double& v : col) v /= std::sqrt(norm);
    cls->push_back(c);
    cols.push_back(col);
  }
  if (cls->size() < 2 || n < cls->size()) {
    cls->clear();  // one class, or fewer runs than classes: one scale
    return Status::OK();
  }
  const size_t q = cols.size();
  std::vector<std::vector<double>> G(q, std::vector<double>(q, 0));
  for (size_t a = 0; a < q; ++a)
    for (size_t b = 0; b < q; ++b)
      for (size_t i = 0; i < n; ++i) G[a][b] += cols[a][i] * cols[b][i];
  double smallest = 1;
  for (size_t c = 0; c < q; ++c) {  // Cholesky pivots of the normalised Gram matrix
    const double d = G[c][c];
    smallest = std::min(smallest, d);
    if (d < 1e-12) break;
    for (size_t k = c + 1; k < q; ++k) {
      const double f = G[k][c] / d;
      for (size_t l = c; l < q; ++l) G[k][l] -= f * G[c][l];
    }
  }
  if (smallest < 0.05) cls->clear();
  return Status::OK();
}

// The scaled shares within the physical bounds (spec/calibration.h): InvalidArgument naming the class.
Status CheckBounds(const Calibration& c, const CostScales& base, const std::string& flat_note) {
  const double scale[3] = {c.gemm, c.attention, c.memory}, share[3] = {base.gemm, base.attention, base.memory};
  for (int k = 0; k < 3; ++k) {
    if (scale[k] == 1) continue;
    const double now = share[k] * scale[k];
    if (!std::isfinite(scale[k]))
      return Status::InvalidArgument(fmt::format(
          "calibrate: the fit of {}'s scale did not converge (not a number): the runs contradict one another; check "
          "each log against its plan",
          kClassNames[k]));
    if (!(scale[k] >= kMinCalibrationScale))
      return Status::InvalidArgument(fmt::format(
          "calibrate: the runs put {}'s sustained share at {:.3f}, {:.2f}x {}'s {:.3f}: below the floor of {}x "
          "(docs/calibration.md, \"Bounds\"); the runs measured something else than the plans' training (a data "
          "loader, stragglers, another layout or model): check each log against its plan",
          kClassNames[k], now, scale[k], flat_note, share[k], kMinCalibrationScale));
    if (!(now <= kMaxCalibratedShare + kCalibratedShareRounding))
      return Status::InvalidArgument(fmt::format(
          "calibrate: the runs put {}'s sustained share at {:.3f} ({:.2f}x {}'s {:.3f}): above 1, faster than the "
          "kernels' own benchmarks (docs/calibration.md, \"Bounds\"); the logs are of a smaller model or layout than "
          "their plans, or the kernel table is out of date: check each log against its plan",
          kClassNames[k], now, scale[k], flat_note, share[k]));
  }
  return Status::OK();
}

// The signed error of predicted throughput against measured: measured seconds / predicted - 1.
double Err(double measured_s, double predicted_s) { return measured_s / predicted_s - 1; }

Status Calibrate(const std::vector<Measured>& runs, Calibration* c) {
  const PlanPredictor& first = *runs.front().predictor;
  c->engine = first.engine();
  c->gpu = first.gpu();
  c->precision = runs.front().plan.dtype ? DTypeName(*runs.front().plan.dtype) : "fp32";
  c->costs = first.kernel_level() ? "kernel-level" : "flat";
  for (const Measured& m : runs) {
    const std::string precision = m.plan.dtype ? DTypeName(*m.plan.dtype) : "fp32";
    if (m.predictor->engine() != c->engine || m.predictor->gpu() != c->gpu || precision != c->precision ||
        m.predictor->kernel_level() != first.kernel_level())
      return Status::InvalidArgument(fmt::format(
          "{}: engine {} on {} in {}, the first run's is {} on {} in {}: a calibration is for one engine, GPU and "
          "precision; calibrate each apart",
          m.run.plan, m.predictor->engine(), m.predictor->gpu(), precision, c->engine, c->gpu, c->precision));
  }
  std::vector<int> cls;
  if (first.kernel_level()) PLANNER_RETURN_IF_ERROR(SeparableClasses(runs, &cls));
  std::vector<double> theta(cls.empty() ? 1 : cls.size(), 0.0);
  const std::vector<int> fit_cls = cls.empty() ? std::vector<int>{-1} : cls;
  PLANNER_RETURN_IF_ERROR(Fit(runs, fit_cls, &theta));
  c->fitted = cls.empty() ? "one-scale" : "per-class";
  double* field[3] = {&c->gemm, &c->attention, &c->memory};
  if (cls.empty()) {
    for (double* f : field) *f = std::exp(theta[0]);
  } else {
    for (size_t j = 0; j < cls.size(); ++j) *field[cls[j]] = std::exp(theta[j]);
  }
  if (!first.kernel_level()) c->attention = c->gemm;  // the flat model costs attention as GEMMs
  PLANNER_RETURN_IF_ERROR(
      CheckBounds(*c, first.base(), first.kernel_level() ? "engine " + c->engine : "cluster's efficiency"));
  const CostScales after{c->gemm, c->attention, c->memory};
  c->band_low = c->band_high = 0;
  for (const Measured& m : runs) {
    CalibrationRun r = m.run;
    PlanPredicted before, now;
    PLANNER_RETURN_IF_ERROR(m.predictor->Predict(CostScales{}, &before));
    PLANNER_RETURN_IF_ERROR(m.predictor->Predict(after, &now));
    r.before_s = before.iteration_s;
    r.after_s = now.iteration_s;
    // The peak the log reports: Megatron's and planner run's max allocated, torchtitan's max reserved.
    r.predicted_memory_GiB =
        (r.format == "torchtitan" && now.peak_reserved_bytes > 0 ? now.peak_reserved_bytes : now.peak_memory_bytes) /
        kGiB;
    const double e = Err(r.measured_s, r.after_s);
    c->band_low = std::min(c->band_low, e);
    c->band_high = std::max(c->band_high, e);
    c->runs.push_back(r);
  }
  return Status::OK();
}

// A PyTorch profiler trace, read into *traces when `path` is one (*is_trace); a gzip-compressed one is refused.
Status ReadTraceIfOne(const std::string& path, std::vector<ProfilerTrace>* traces, bool* is_trace) {
  *is_trace = false;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return Status::OK();
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0)
    return Status::InvalidArgument(fmt::format(
        "{}: a gzip-compressed trace (torchtitan 0.3, Megatron-LM main write .json.gz); gunzip it and give the .json",
        path));
  std::string text;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(path, &text));
  if (!LooksLikeProfilerTrace(text)) return Status::OK();
  ProfilerTrace t;
  PLANNER_RETURN_IF_ERROR(ReadProfilerTrace(path, text, &t));
  traces->push_back(std::move(t));
  *is_trace = true;
  return Status::OK();
}

// A file beside -o cal.yaml: cal<suffix> (the measured kernel table cal.kernels.yaml, collectives cal.comm.yaml).
std::string BesideOutput(const std::string& output, const std::string& suffix) {
  fs::path p(output);
  const std::string stem =
      p.extension() == ".yaml" || p.extension() == ".yml" ? p.stem().string() : p.filename().string();
  return (p.parent_path() / (stem + suffix)).string();
}

// What the traces measured: the kernel table on top of the published table of the plan's GPU (*kernels,
// when a trace has GEMMs or attention) and the collectives as comm curves (*comm, when a trace has NCCL
// kernels); the calibration's identity (engine, GPU, precision) from that plan when no log sets it.
Status MeasureTraces(const std::string& plan_path, const std::vector<ProfilerTrace>& traces,
                     std::optional<KernelTable>* kernels, Profile* comm, Calibration* c) {
  Plan plan;
  PLANNER_RETURN_IF_ERROR(LoadPlan(plan_path, &plan));
  PlanPredictor pred;
  PLANNER_RETURN_IF_ERROR(pred.Init(plan_path, plan));
  const bool compute = std::any_of(traces.begin(), traces.end(),
                                   [](const ProfilerTrace& t) { return !t.gemms.empty() || !t.attention.empty(); });
  if (compute && pred.kernels() == nullptr)
    return Status::InvalidArgument(fmt::format(
        "{}: planned with the cluster's flat efficiency (no kernel table for its GPU {}); a trace measures a kernel "
        "table: solve with --kernels h100 (or a100) for a GPU of that family",
        plan_path, pred.gpu()));
  for (const ProfilerTrace& t : traces) {
    const bool same = t.device.empty() || pred.kernels() == nullptr ||
                      std::any_of(pred.kernels()->gpus.begin(), pred.kernels()->gpus.end(),
                                  [&](const std::string& g) { return t.device.find(g) != std::string::npos; });
    if (!same)
      return Status::InvalidArgument(fmt::format(
          "{}: a trace of a {}, plan {} is for {} (kernel table {}): give the plan of the run the trace is of", t.path,
          t.device, plan_path, pred.gpu(), pred.kernels()->name));
    c->traces.push_back(t.path);
  }
  std::vector<std::string> notes;
  if (compute) {
    // TE 2.10 on records no fp8 flag: those layers ran in the plan's precision (Megatron's fp8_autocast covers
    // every TE linear of an FP8 run).
    std::vector<ProfilerTrace> own = traces;
    const std::string precision = plan.dtype ? DTypeName(*plan.dtype) : "fp32";
    int64_t from_plan = 0;
    for (ProfilerTrace& t : own) from_plan += UsePlanPrecision(precision, &t);
    if (from_plan > 0)
      notes.push_back(
          fmt::format("{} Transformer Engine GEMM(s) without a recorded fp8 flag (TE 2.10 on) taken as "
                      "the plan's precision, {}",
                      from_plan, precision));
    kernels->emplace();
    PLANNER_RETURN_IF_ERROR(MeasuredKernelTable(own, *pred.kernels(), pred.peaks(), &**kernels, &notes));
  }
  comm->comm = TraceCommCurves(traces, pred.gpus_per_node(), &notes);
  comm->model = plan.model_name;
  comm->device = traces.front().device;
  comm->backend = "nccl";
  comm->tool = fmt::format("planner calibrate: NCCL kernels of {} PyTorch profiler trace(s)", traces.size());
  for (const std::string& n : notes) LogNote("measured " + n);
  c->engine = pred.engine();
  c->gpu = pred.gpu();
  c->precision = plan.dtype ? DTypeName(*plan.dtype) : "fp32";
  c->costs = pred.kernel_level() || compute ? "kernel-level" : "flat";
  c->fitted = "none";
  return Status::OK();
}

}  // namespace

std::string RenderCalibration(const Calibration& c) {
  std::string o = fmt::format(
      "calibration of engine {} on {} ({}), {} costs, {}\n", c.engine, c.gpu, c.precision, c.costs,
      c.fitted == "per-class"   ? fmt::format("fitted per operation class from {} run(s)", c.runs.size())
      : c.fitted == "one-scale" ? fmt::format("fitted as one scale over every class from {} run(s)", c.runs.size())
                                : std::string("no run fitted (traces only)"));
  if (!c.kernels.empty())
    o += fmt::format(
        "kernel table measured from {} trace(s): {} (replaces the published table in solve --calibration)\n",
        c.traces.size(), c.KernelsPath());
  if (!c.comm.empty())
    o += fmt::format(
        "collectives measured from {} trace(s): {} (replace the cluster file's figures for the levels they cover in "
        "solve --calibration)\n",
        c.traces.size(), c.CommPath());
  if (c.runs.empty()) return o;
  o += fmt::format("scales of the sustained rates: gemm x{:.4f} | attention x{:.4f} | memory-bound x{:.4f}\n", c.gemm,
                   c.attention, c.memory);
  o += fmt::format("band after (signed error of predicted tokens/s): {:+.1f}% .. {:+.1f}%\n", 100 * c.band_low,
                   100 * c.band_high);
  o += fmt::format("{:<4} {:<12} {:<28} {:>6} {:>13} {:>13} {:>9} {:>13} {:>9} {:>11} {:>11}\n", "run", "format",
                   "layout", "iters", "measured (s)", "before (s)", "error", "after (s)", "error", "mem (GiB)",
                   "pred (GiB)");
  double worst_before = 0, worst_after = 0;
  for (size_t i = 0; i < c.runs.size(); ++i) {
    const CalibrationRun& r = c.runs[i];
    const double eb = Err(r.measured_s, r.before_s), ea = Err(r.measured_s, r.after_s);
    worst_before = std::max(worst_before, std::fabs(eb));
    worst_after = std::max(worst_after, std::fabs(ea));
    o += fmt::format("{:<4} {:<12} {:<28} {:>6} {:>13.4f} {:>13.4f} {:>8.1f}% {:>13.4f} {:>8.1f}% {:>11} {:>11.2f}\n",
                     i + 1, r.format, Printable(r.layout).substr(0, 28), r.iterations, r.measured_s, r.before_s,
                     100 * eb, r.after_s, 100 * ea,
                     r.measured_memory_GiB > 0 ? fmt::format("{:.2f}", r.measured_memory_GiB) : std::string("-"),
                     r.predicted_memory_GiB);
  }
  for (size_t i = 0; i < c.runs.size(); ++i) o += fmt::format("  run {}: {}\n", i + 1, Printable(c.runs[i].source));
  const double scale[3] = {c.gemm, c.attention, c.memory};
  int most = 0;
  for (int k = 1; k < 3; ++k)
    if (std::fabs(std::log(scale[k])) > std::fabs(std::log(scale[most]))) most = k;
  o += fmt::format("changed most: {} (x{:.4f}); the worst run's error {:.1f}% before, {:.1f}% after\n",
                   kClassNames[most], scale[most], 100 * worst_before, 100 * worst_after);
  return o;
}

Runner RegisterCalibrate(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "calibrate",
      "fit the engine's efficiencies to your own runs (Megatron-LM or torchtitan logs, planner run records) beside "
      "the plans that produced them; docs/calibration.md");
  auto a = std::make_shared<CalibrateArgs>();
  cmd->add_option("--plan", a->plans, "plan.yaml of the run (once for every log, or once per log in the logs' order)")
      ->required()
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("logs", a->logs,
                  "Megatron-LM training log, torchtitan log, or planner run directory (runs/ID) / metrics.csv")
      ->required();
  cmd->add_option("-o,--output", a->output, "the calibration file to write (for solve --calibration)")->required();
  cmd->add_flag("--force", a->force, "replace -o even when it is not a calibration the planner wrote");
  return [a]() -> Status {
    if (a->plans.size() != 1 && a->plans.size() != a->logs.size())
      return Status::InvalidArgument(fmt::format(
          "--plan given {} times for {} logs: give it once (every log is of that plan) or once per log, in order",
          a->plans.size(), a->logs.size()));
    PLANNER_RETURN_IF_ERROR(CheckReplaceable("-o", a->output, OutputKind::kCalibration, a->force));
    std::vector<Measured> runs;
    std::vector<ProfilerTrace> traces;
    std::string trace_plan;
    for (size_t i = 0; i < a->logs.size(); ++i) {
      const std::string& plan = a->plans.size() == 1 ? a->plans[0] : a->plans[i];
      bool is_trace = false;
      PLANNER_RETURN_IF_ERROR(ReadTraceIfOne(a->logs[i], &traces, &is_trace));
      if (is_trace) {
        if (trace_plan.empty()) trace_plan = plan;
        continue;
      }
      runs.emplace_back();
      PLANNER_RETURN_IF_ERROR(ReadRun(plan, a->logs[i], &runs.back()));
    }
    Calibration c;
    // Written last, with the calibration, once every check passed.
    std::string kernels_path, kernels_text, comm_path, comm_text;
    if (!traces.empty()) {
      std::optional<KernelTable> measured;
      Profile comm;
      PLANNER_RETURN_IF_ERROR(MeasureTraces(trace_plan, traces, &measured, &comm, &c));
      if (!measured && comm.comm.empty() && runs.empty())
        return Status::InvalidArgument(fmt::format(
            "{}: its only operators of interest are collectives whose process group's ranks it does not give, so "
            "nothing is measured; profile with torch 2.2 or later (Process Group Ranks in record_param_comms)",
            traces.front().path));
      if (measured) {
        kernels_path = BesideOutput(a->output, ".kernels.yaml");
        PLANNER_RETURN_IF_ERROR(CheckReplaceable("-o", kernels_path, OutputKind::kKernelTable, a->force));
        for (Measured& m : runs) m.predictor->UseKernels(*measured);
        kernels_text = KernelTableToYaml(*measured, std::string(kMeasuredKernelsHeader) + "\n");
        c.kernels = fs::path(kernels_path).filename().string();
      }
      if (!comm.comm.empty()) {
        comm_path = BesideOutput(a->output, ".comm.yaml");
        PLANNER_RETURN_IF_ERROR(CheckReplaceable("-o", comm_path, OutputKind::kProfile, a->force));
        for (Measured& m : runs) m.predictor->UseComm(comm, comm_path);
        comm_text = ProfileToYaml(comm);
        c.comm = fs::path(comm_path).filename().string();
      }
    }
    if (!runs.empty()) {
      const Calibration traced = c;
      PLANNER_RETURN_IF_ERROR(Calibrate(runs, &c));
      if (!traces.empty() && (traced.engine != c.engine || traced.gpu != c.gpu || traced.precision != c.precision))
        return Status::InvalidArgument(fmt::format(
            "{}: the traces' plan is engine {} on {} in {}, the logs' engine {} on {} in {}: a calibration is for one "
            "engine, GPU and precision; calibrate each apart",
            trace_plan, traced.engine, traced.gpu, traced.precision, c.engine, c.gpu, c.precision));
    }
    for (const auto& [path, text] : {std::pair{kernels_path, kernels_text}, {comm_path, comm_text}}) {
      if (path.empty()) continue;
      PLANNER_RETURN_IF_ERROR(WriteFileAtomic(path, text));
      LogNote("wrote " + path);
    }
    PLANNER_RETURN_IF_ERROR(WriteFileAtomic(a->output, CalibrationToYaml(c)));
    std::fputs(RenderCalibration(c).c_str(), stdout);
    std::fflush(stdout);
    LogNote(fmt::format("wrote {} (plan with it: planner solve ... --calibration {})", a->output, a->output));
    return Status::OK();
  };
}

}  // namespace planner
