#include "spec/calibration.h"

#include <cmath>

#include <fmt/format.h>

#include "spec/yaml_reader.h"

namespace planner {

const char kCalibrationHeader[] = "# planner calibration: written by planner calibrate (docs/calibration.md)";
const char kMeasuredKernelsHeader[] =
    "# planner kernel table: measured by planner calibrate from PyTorch profiler traces (docs/calibration.md)";

namespace {

std::string Num(double v) { return fmt::format("{:.6g}", v); }

}  // namespace

std::string CalibrationToYaml(const Calibration& c) {
  std::string o = std::string(kCalibrationHeader) + "\n";
  o += "format_version: 1\nkind: calibration\n";
  o += fmt::format("engine: {}\ngpu: {}\nprecision: {}\ncosts: {}\nfitted: {}\n", YamlQuoted(c.engine),
                   YamlQuoted(c.gpu), YamlQuoted(c.precision), c.costs, c.fitted);
  o += fmt::format("scale: {{gemm: {}, attention: {}, memory: {}}}\n", Num(c.gemm), Num(c.attention), Num(c.memory));
  o += fmt::format("band: {{low: {}, high: {}}}\n", Num(c.band_low), Num(c.band_high));
  if (!c.kernels.empty()) o += fmt::format("kernels: {}\n", YamlQuoted(c.kernels));
  if (!c.comm.empty()) o += fmt::format("comm: {}\n", YamlQuoted(c.comm));
  if (!c.kernels.empty() || !c.comm.empty()) {
    o += "traces:\n";
    for (const std::string& t : c.traces) o += fmt::format("  - {}\n", YamlQuoted(t));
  }
  o += c.runs.empty() ? "runs: []\n" : "runs:\n";
  for (const CalibrationRun& r : c.runs) {
    o += fmt::format("  - source: {}\n    format: {}\n    plan: {}\n    layout: {}\n    iterations: {}\n",
                     YamlQuoted(r.source), r.format, YamlQuoted(r.plan), YamlQuoted(r.layout), r.iterations);
    o += fmt::format("    measured_s: {}\n    before_s: {}\n    after_s: {}\n", Num(r.measured_s), Num(r.before_s),
                     Num(r.after_s));
    o += fmt::format("    measured_memory_GiB: {}\n    predicted_memory_GiB: {}\n", Num(r.measured_memory_GiB),
                     Num(r.predicted_memory_GiB));
  }
  return o;
}

namespace {

Status ParseRuns(const YamlReader& r, const YAML::Node& runs, Calibration* c) {
  PLANNER_RETURN_IF_ERROR(r.RequireSequence(runs, "runs"));
  if (runs.size() == 0 && c->kernels.empty() && c->comm.empty())
    return r.FieldError(runs, "runs",
                        "is empty; a calibration rests on at least one run, a measured kernel table or measured "
                        "collectives");
  for (size_t i = 0; i < runs.size(); ++i) {
    const YAML::Node& n = runs[i];
    const std::string f = fmt::format("runs[{}]", i);
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(n, f,
                                        {"source", "format", "plan", "layout", "iterations", "measured_s", "before_s",
                                         "after_s", "measured_memory_GiB", "predicted_memory_GiB"}));
    CalibrationRun run;
    PLANNER_RETURN_IF_ERROR(r.GetString(n, "source", f + ".source", &run.source, true));
    PLANNER_RETURN_IF_ERROR(
        r.GetEnum(n, "format", f + ".format", {"megatron-lm", "torchtitan", "planner-run"}, &run.format, true));
    PLANNER_RETURN_IF_ERROR(r.GetString(n, "plan", f + ".plan", &run.plan, true));
    PLANNER_RETURN_IF_ERROR(r.GetString(n, "layout", f + ".layout", &run.layout, false));
    PLANNER_RETURN_IF_ERROR(r.GetInt(n, "iterations", f + ".iterations", &run.iterations, true, 1));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "measured_s", f + ".measured_s", &run.measured_s, true, 0.0, true));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "before_s", f + ".before_s", &run.before_s, true, 0.0, true));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "after_s", f + ".after_s", &run.after_s, true, 0.0, true));
    PLANNER_RETURN_IF_ERROR(
        r.GetDouble(n, "measured_memory_GiB", f + ".measured_memory_GiB", &run.measured_memory_GiB, false, 0.0, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "predicted_memory_GiB", f + ".predicted_memory_GiB",
                                        &run.predicted_memory_GiB, false, 0.0, false));
    c->runs.push_back(std::move(run));
  }
  return Status::OK();
}

Status ParseRoot(const YamlReader& r, const YAML::Node& root, Calibration* c) {
  PLANNER_RETURN_IF_ERROR(r.RequireMap(root, ""));
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(root, "",
                                      {"format_version", "kind", "engine", "gpu", "precision", "costs", "fitted",
                                       "scale", "band", "kernels", "comm", "traces", "runs"}));
  PLANNER_RETURN_IF_ERROR(r.CheckFormatVersion(root, true));
  std::string kind;
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "kind", "kind", {"calibration"}, &kind, true));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "engine", "engine", &c->engine, true));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "gpu", "gpu", &c->gpu, true));
  PLANNER_RETURN_IF_ERROR(
      r.GetEnum(root, "precision", "precision", {"bf16", "fp16", "fp8", "fp32"}, &c->precision, true));
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "costs", "costs", {"kernel-level", "flat"}, &c->costs, true));
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "fitted", "fitted", {"per-class", "one-scale", "none"}, &c->fitted, true));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "kernels", "kernels", &c->kernels, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "comm", "comm", &c->comm, false));
  for (auto [key, name] : {std::pair{"kernels", &c->kernels}, {"comm", &c->comm}}) {
    if (name->find('/') != std::string::npos || *name == "." || *name == "..")
      return r.FieldError(root[key], key, "must be a file name beside the calibration file");
  }
  if (root["traces"].IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.RequireSequence(root["traces"], "traces"));
    for (const auto& t : root["traces"]) c->traces.push_back(t.as<std::string>());
  }
  const YAML::Node& s = root["scale"];
  PLANNER_RETURN_IF_ERROR(r.RequireMap(s, "scale"));
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(s, "scale", {"gemm", "attention", "memory"}));
  for (auto [key, out] : {std::pair{"gemm", &c->gemm}, {"attention", &c->attention}, {"memory", &c->memory}}) {
    const std::string f = std::string("scale.") + key;
    PLANNER_RETURN_IF_ERROR(r.GetDouble(s, key, f, out, true, 0.0, true));
    if (*out < kMinCalibrationScale || *out > 1 / kMinCalibrationScale)
      return r.FieldError(s[key], f,
                          fmt::format("{} is outside [{}, {}]: not a calibration of this engine's rates; calibrate "
                                      "again from runs of the plans given",
                                      *out, kMinCalibrationScale, 1 / kMinCalibrationScale));
  }
  const YAML::Node& b = root["band"];
  PLANNER_RETURN_IF_ERROR(r.RequireMap(b, "band"));
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(b, "band", {"low", "high"}));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(b, "low", "band.low", &c->band_low, true, -1.0, true));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(b, "high", "band.high", &c->band_high, true, c->band_low, false));
  return ParseRuns(r, root["runs"], c);
}

}  // namespace

Status ParseCalibration(const std::string& path, const std::string& text, Calibration* out) {
  YAML::Node root;
  PLANNER_RETURN_IF_ERROR(ParseYamlText(path, text, &root));
  YamlReader r(path);
  Calibration c;
  c.path = path;
  PLANNER_RETURN_IF_ERROR(CatchYamlErrors(path, [&] { return ParseRoot(r, root, &c); }));
  *out = std::move(c);
  return Status::OK();
}

namespace {

std::string Beside(const std::string& path, const std::string& name) {
  if (name.empty()) return "";
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? name : path.substr(0, slash + 1) + name;
}

}  // namespace

std::string Calibration::KernelsPath() const { return Beside(path, kernels); }
std::string Calibration::CommPath() const { return Beside(path, comm); }

Status LoadCalibration(const std::string& path, Calibration* out) {
  std::string text;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(path, &text, kMaxConfigFileBytes));
  return ParseCalibration(path, text, out);
}

}  // namespace planner
