#include "spec/kernel_table.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "spec/embedded_tables.h"
#include "spec/yaml_reader.h"

namespace planner {

namespace {

struct Builtin {
  const char* name;
  std::string_view text;
};
// Searched in this order by BuiltinKernelTableFor: gb200 before b200 (a GB200 name holds "B200" too).
const Builtin kBuiltinKernels[] = {{"a100", spec_tables::kA100},
                                   {"h100", spec_tables::kH100},
                                   {"gb200", spec_tables::kGb200},
                                   {"b200", spec_tables::kB200}};

// Linear interpolation of y over x at `at` in log space of x, clamped at the ends.
double LogInterp(const std::vector<double>& x, const std::vector<double>& y, double at) {
  if (x.empty() || y.size() != x.size()) return 0;
  if (at <= x.front()) return y.front();
  if (at >= x.back()) return y.back();
  for (size_t i = 1; i < x.size(); ++i) {
    if (at <= x[i]) {
      const double f = std::log(at / x[i - 1]) / std::log(x[i] / x[i - 1]);
      return y[i - 1] + f * (y[i] - y[i - 1]);
    }
  }
  return y.back();
}

Status ParseGemm(const YamlReader& r, const YAML::Node& g, KernelTable* t) {
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(g, "gemm", {"tiles", "bf16", "fp16", "fp8", "fp32", "tf32"}));
  const YAML::Node& tiles = g["tiles"];
  PLANNER_RETURN_IF_ERROR(r.RequireSequence(tiles, "gemm.tiles"));
  for (const auto& tile : tiles) {
    if (!tile.IsSequence() || tile.size() != 2)
      return r.FieldError(tile, "gemm.tiles", "each tile is [rows, columns], e.g. [128, 256]");
    int64_t tm = 0, tn = 0;
    PLANNER_RETURN_IF_ERROR(r.AsInt(tile[0], "gemm.tiles", &tm, 1));
    PLANNER_RETURN_IF_ERROR(r.AsInt(tile[1], "gemm.tiles", &tn, 1));
    t->tiles.emplace_back(tm, tn);
  }
  if (t->tiles.empty()) return r.FieldError(tiles, "gemm.tiles", "needs at least one tile, e.g. [[128, 256]]");
  for (const char* prec : {"bf16", "fp16", "fp8", "fp32", "tf32"}) {
    const YAML::Node& p = g[prec];
    if (!p.IsDefined()) continue;
    const std::string field = fmt::format("gemm.{}", prec);
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(p, field, {"ceiling", "k_half"}));
    GemmEfficiency e;
    PLANNER_RETURN_IF_ERROR(r.GetDouble(p, "ceiling", field + ".ceiling", &e.ceiling, true, 0.0, true));
    if (e.ceiling > 1)
      return r.FieldError(p["ceiling"], field + ".ceiling", "is a fraction of peak; must be at most 1");
    PLANNER_RETURN_IF_ERROR(r.GetDouble(p, "k_half", field + ".k_half", &e.k_half, true, 0.0, false));
    t->gemm[prec] = e;
  }
  return Status::OK();
}

Status ParseRecipes(const YamlReader& r, const YAML::Node& n, KernelTable* t) {
  if (!n.IsDefined()) return Status::OK();
  PLANNER_RETURN_IF_ERROR(r.RequireMap(n, "fp8_recipes"));
  for (const auto& kv : n) {
    const std::string name = kv.first.as<std::string>(), field = "fp8_recipes." + name;
    PLANNER_RETURN_IF_ERROR(
        r.CheckKeys(kv.second, field, {"gemm", "amax_passes", "weight_bytes", "param_gather_bytes"}));
    Fp8Recipe rec;
    PLANNER_RETURN_IF_ERROR(r.GetDouble(kv.second, "gemm", field + ".gemm", &rec.gemm, true, 0.0, true));
    int64_t passes = 0;
    PLANNER_RETURN_IF_ERROR(r.GetInt(kv.second, "amax_passes", field + ".amax_passes", &passes, false, 0));
    rec.amax_passes = static_cast<int>(std::min<int64_t>(passes, 4));
    // One byte per element at least (the FP8 data), two orientations and their scales at most (4); a gather
    // moves the FP8 data (1) up to the bf16 values (2).
    PLANNER_RETURN_IF_ERROR(
        r.GetDouble(kv.second, "weight_bytes", field + ".weight_bytes", &rec.weight_bytes, false, 1.0, false));
    if (rec.weight_bytes > 4)
      return r.FieldError(kv.second["weight_bytes"], field + ".weight_bytes",
                          "is bytes per weight element of the FP8 copy (1 to 4: data, transpose, scales)");
    PLANNER_RETURN_IF_ERROR(r.GetDouble(kv.second, "param_gather_bytes", field + ".param_gather_bytes",
                                        &rec.param_gather_bytes, false, 1.0, false));
    if (rec.param_gather_bytes > 2)
      return r.FieldError(kv.second["param_gather_bytes"], field + ".param_gather_bytes",
                          "is bytes per element an FP8 parameter's all-gather moves (1: FP8 data, 2: bf16)");
    t->fp8_recipes[name] = rec;
  }
  return Status::OK();
}

Status ParseAttention(const YamlReader& r, const YAML::Node& a, KernelTable* t) {
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(a, "attention", {"seq", "curves"}));
  const YAML::Node& seq = a["seq"];
  PLANNER_RETURN_IF_ERROR(r.RequireSequence(seq, "attention.seq"));
  for (const auto& s : seq) {
    double v = 0;
    PLANNER_RETURN_IF_ERROR(r.AsDouble(s, "attention.seq", &v, 0.0, true));
    if (!t->attention_seq.empty() && v <= t->attention_seq.back())
      return r.FieldError(s, "attention.seq", "must increase, e.g. [512, 1024, 2048]");
    t->attention_seq.push_back(v);
  }
  const YAML::Node& curves = a["curves"];
  PLANNER_RETURN_IF_ERROR(r.RequireSequence(curves, "attention.curves"));
  for (const auto& c : curves) {
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(c, "attention.curves[]", {"kernel", "pass", "causal", "head_dim", "tflops"}));
    AttentionCurve curve;
    PLANNER_RETURN_IF_ERROR(
        r.GetEnum(c, "kernel", "attention.curves[].kernel", {"fa2", "fa3", "cudnn"}, &curve.kernel, true));
    PLANNER_RETURN_IF_ERROR(r.GetEnum(c, "pass", "attention.curves[].pass", {"fwd", "bwd", "both"}, &curve.pass, true));
    PLANNER_RETURN_IF_ERROR(r.GetBool(c, "causal", "attention.curves[].causal", &curve.causal, true));
    PLANNER_RETURN_IF_ERROR(r.GetInt(c, "head_dim", "attention.curves[].head_dim", &curve.head_dim, true, 1));
    const YAML::Node& tf = c["tflops"];
    PLANNER_RETURN_IF_ERROR(r.RequireSequence(tf, "attention.curves[].tflops"));
    for (const auto& v : tf) {
      double x = 0;
      PLANNER_RETURN_IF_ERROR(r.AsDouble(v, "attention.curves[].tflops", &x, 0.0, true));
      curve.tflops.push_back(x);
    }
    if (curve.tflops.size() != t->attention_seq.size())
      return r.FieldError(tf, "attention.curves[].tflops",
                          fmt::format("has {} values; give one per attention.seq point ({})", curve.tflops.size(),
                                      t->attention_seq.size()));
    t->curves.push_back(curve);
  }
  return Status::OK();
}

// `power_clock: {watts: [500, 600, 700], clock: [0.879, 0.959, 1.0]}`: increasing watts, clock fractions in
// (0, 1], the last 1 (the TDP's clock).
Status ParsePowerClock(const YamlReader& r, const YAML::Node& p, KernelTable* t) {
  if (!p.IsDefined()) return Status::OK();
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(p, "power_clock", {"watts", "clock"}));
  for (auto [key, out] : {std::pair{"watts", &t->power_watts}, {"clock", &t->power_clock}}) {
    const std::string f = std::string("power_clock.") + key;
    if (!p[key].IsDefined()) return r.FieldError(p, f, "missing required field");
    PLANNER_RETURN_IF_ERROR(r.RequireSequence(p[key], f));
    for (const auto& v : p[key]) {
      double x = 0;
      PLANNER_RETURN_IF_ERROR(r.AsDouble(v, f, &x, 0.0, true));
      out->push_back(x);
    }
  }
  const auto& w = t->power_watts;
  const auto& c = t->power_clock;
  if (w.empty() || w.size() != c.size())
    return r.FieldError(p, "power_clock", "watts and clock need the same number of points, at least one");
  for (size_t i = 0; i < w.size(); ++i) {
    if (i > 0 && !(w[i] > w[i - 1])) return r.FieldError(p["watts"], "power_clock.watts", "must increase");
    if (c[i] > 1) return r.FieldError(p["clock"], "power_clock.clock", "fractions of the TDP's clock: at most 1");
  }
  if (c.back() != 1)
    return r.FieldError(p["clock"], "power_clock.clock", "the last point is the TDP: its clock fraction is 1");
  return Status::OK();
}

Status ParseUnguarded(const std::string& path, const std::string& text, KernelTable* out) {
  YAML::Node root;
  PLANNER_RETURN_IF_ERROR(ParseYamlText(path, text, &root));
  YamlReader r(path);
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(root, "",
                                      {"format_version", "name", "gpus", "sms", "memory_efficiency", "gemm",
                                       "fp8_recipes", "attention", "power_clock"}));
  KernelTable t;
  t.path = path;
  PLANNER_RETURN_IF_ERROR(r.CheckFormatVersion(root, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "name", "name", &t.name, true));
  if (root["gpus"].IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.RequireSequence(root["gpus"], "gpus"));
    for (const auto& g : root["gpus"]) t.gpus.push_back(g.as<std::string>());
  }
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "sms", "sms", &t.sms, true, 1));
  PLANNER_RETURN_IF_ERROR(
      r.GetDouble(root, "memory_efficiency", "memory_efficiency", &t.memory_efficiency, true, 0.0, true));
  if (t.memory_efficiency > 1)
    return r.FieldError(root["memory_efficiency"], "memory_efficiency", "is a fraction of HBM bandwidth; at most 1");
  if (!root["gemm"].IsDefined())
    return r.FieldError(root, "gemm", "missing required field; add 'gemm:' with tiles and bf16");
  PLANNER_RETURN_IF_ERROR(ParseGemm(r, root["gemm"], &t));
  PLANNER_RETURN_IF_ERROR(ParseRecipes(r, root["fp8_recipes"], &t));
  if (root["attention"].IsDefined()) PLANNER_RETURN_IF_ERROR(ParseAttention(r, root["attention"], &t));
  PLANNER_RETURN_IF_ERROR(ParsePowerClock(r, root["power_clock"], &t));
  *out = std::move(t);
  return Status::OK();
}

}  // namespace

const GemmEfficiency* KernelTable::Gemm(DType dtype) const {
  auto it = gemm.find(DTypeName(dtype));
  if (it == gemm.end() && dtype == DType::kBf16) it = gemm.find("fp16");
  if (it == gemm.end() && dtype == DType::kFp16) it = gemm.find("bf16");
  return it == gemm.end() ? nullptr : &it->second;
}

Fp8Recipe KernelTable::Recipe(const std::string& recipe) const {
  auto it = fp8_recipes.find(recipe);
  return it == fp8_recipes.end() ? Fp8Recipe{} : it->second;
}

double KernelTable::GemmFraction(const GemmEfficiency& g, double m, double n, double k) const {
  if (!(m > 0 && n > 0 && k > 0)) return g.ceiling;
  double fill = 0;
  const double sm = static_cast<double>(std::max<int64_t>(1, sms));
  for (const auto& [tm, tn] : tiles) {
    const double count = std::ceil(m / static_cast<double>(tm)) * std::ceil(n / static_cast<double>(tn));
    fill = std::max(fill, count / (std::ceil(count / sm) * sm));
  }
  if (tiles.empty()) fill = 1;
  return g.ceiling * k / (k + g.k_half) * fill;
}

double KernelTable::ClockUnderCap(double cap) const {
  if (!(cap > 0) || power_watts.empty() || cap >= power_watts.back()) return 1;
  if (cap <= power_watts.front()) return power_clock.front();
  for (size_t i = 1; i < power_watts.size(); ++i) {
    if (cap > power_watts[i]) continue;
    const double f = (cap - power_watts[i - 1]) / (power_watts[i] - power_watts[i - 1]);
    return power_clock[i - 1] + f * (power_clock[i] - power_clock[i - 1]);
  }
  return 1;
}

bool KernelTable::HasKernel(const std::string& kernel) const {
  return std::any_of(curves.begin(), curves.end(), [&](const AttentionCurve& c) { return c.kernel == kernel; });
}

double KernelTable::AttentionTflops(const std::string& kernel, const std::string& pass, bool causal, double head_dim,
                                    double seq) const {
  // The matching curves nearest below and above head_dim (no allocation: the search calls this per layer
  // and cost table), interpolated linearly in log2(head_dim) and clamped outside them.
  auto at_dim = [&](const std::string& p, bool c) {
    const AttentionCurve *lo = nullptr, *hi = nullptr;
    for (const auto& curve : curves) {
      if (curve.kernel != kernel || curve.causal != c || (curve.pass != p && curve.pass != "both")) continue;
      const double dim = static_cast<double>(curve.head_dim);
      if (dim <= head_dim && (lo == nullptr || curve.head_dim > lo->head_dim)) lo = &curve;
      if (dim >= head_dim && (hi == nullptr || curve.head_dim < hi->head_dim)) hi = &curve;
    }
    if (lo == nullptr && hi == nullptr) return 0.0;
    if (lo == nullptr || hi == nullptr || lo->head_dim == hi->head_dim)
      return LogInterp(attention_seq, (lo != nullptr ? lo : hi)->tflops, seq);
    const double y0 = LogInterp(attention_seq, lo->tflops, seq), y1 = LogInterp(attention_seq, hi->tflops, seq);
    const double f = std::log2(head_dim / static_cast<double>(lo->head_dim)) /
                     std::log2(static_cast<double>(hi->head_dim) / static_cast<double>(lo->head_dim));
    return y0 + f * (y1 - y0);
  };
  const double direct = at_dim(pass, causal);
  if (direct > 0 || pass != "bwd" || !causal) return direct;
  const double nc_bwd = at_dim("bwd", false), c_fwd = at_dim("fwd", true), nc_fwd = at_dim("fwd", false);
  return nc_fwd > 0 ? nc_bwd * c_fwd / nc_fwd : 0;
}

double KernelTable::RingStepTflops(const std::string& kernel, const std::string& pass, double head_dim, double seq_rank,
                                   double cp) const {
  const double diag = AttentionTflops(kernel, pass, true, head_dim, seq_rank);
  const double open = AttentionTflops(kernel, pass, false, head_dim, seq_rank / 2);
  if (!(diag > 0) || !(open > 0)) return 0;
  return 1.0 / ((1.0 / cp) / diag + (1.0 - 1.0 / cp) / open);
}

std::vector<std::string> BuiltinKernelTables() {
  std::vector<std::string> out;
  for (const auto& b : kBuiltinKernels) out.emplace_back(b.name);
  return out;
}

Status ParseKernelTable(const std::string& path, const std::string& text, KernelTable* out) {
  return CatchYamlErrors(path, [&] { return ParseUnguarded(path, text, out); });
}

Status LoadKernelTable(const std::string& name_or_path, KernelTable* out) {
  for (const auto& b : kBuiltinKernels) {
    if (name_or_path == b.name) return ParseKernelTable(std::string("builtin:") + b.name, std::string(b.text), out);
  }
  std::string text;
  Status st = ReadTextFile(name_or_path, &text, kMaxConfigFileBytes);
  if (st.code() == StatusCode::kNotFound && name_or_path.find('/') == std::string::npos &&
      name_or_path.find(".yaml") == std::string::npos) {
    return Status::NotFound(
        fmt::format("kernel table '{}' is neither a built-in table ({}) nor a file; name one of "
                    "them or a kernel table file",
                    name_or_path, fmt::join(BuiltinKernelTables(), ", ")));
  }
  PLANNER_RETURN_IF_ERROR(st);
  return ParseKernelTable(name_or_path, text, out);
}

bool BuiltinKernelTableFor(const std::string& gpu_name, KernelTable* out) {
  for (const auto& b : kBuiltinKernels) {
    KernelTable t;
    if (!ParseKernelTable(std::string("builtin:") + b.name, std::string(b.text), &t).ok()) continue;
    for (const auto& g : t.gpus) {
      if (gpu_name.find(g) != std::string::npos) {
        *out = std::move(t);
        return true;
      }
    }
  }
  return false;
}

}  // namespace planner
