#include "spec/profile.h"

#include <cmath>
#include <cstdlib>
#include <map>

#include <fmt/format.h>

#include "common/digest.h"
#include "spec/yaml_reader.h"

namespace planner {

double BusBandwidthFactor(const std::string& c, int n) {
  const double nd = static_cast<double>(n);
  if (c == "all_reduce") return 2 * (nd - 1) / nd;
  if (c == "all_gather" || c == "reduce_scatter" || c == "all_to_all") return (nd - 1) / nd;
  return 1.0;  // broadcast, send_recv
}

void FitAlphaBeta(const std::vector<std::pair<double, double>>& pts, double* alpha, double* beta) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : pts) {
    if (!(y > 0)) continue;
    double w = 1 / (y * y);
    sw += w;
    sx += w * x;
    sy += w * y;
    sxx += w * x * x;
    sxy += w * x * y;
  }
  double det = sw * sxx - sx * sx;
  if (sw == 0 || std::fabs(det) < 1e-300) {
    *alpha = pts.empty() ? 0 : pts.front().second;
    *beta = 0;
    return;
  }
  *beta = (sw * sxy - sx * sy) / det;
  *alpha = (sy - *beta * sx) / sw;
  if (*alpha < 0) {  // latency below resolution: refit through the origin
    *alpha = 0;
    *beta = sxy / sxx;
  }
  if (*beta < 0) *beta = 0;
}

int Profile::FindLayer(const std::string& name) const {
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

bool Profile::TimingAt(size_t i, int64_t microbatch, int64_t tp, ProfileTiming* out) const {
  const ProfileTiming* best = nullptr;
  for (const auto& t : layers[i].timings) {
    if (t.tp != tp) continue;
    if (best == nullptr || std::llabs(t.microbatch - microbatch) < std::llabs(best->microbatch - microbatch)) best = &t;
  }
  if (best == nullptr) return false;
  *out = *best;
  if (best->microbatch != microbatch) {
    // Linear in the microbatch size: an estimate, reported as such by the solver.
    double f = static_cast<double>(microbatch) / static_cast<double>(best->microbatch);
    out->microbatch = microbatch;
    out->forward_s *= f;
    out->backward_s *= f;
    if (out->backward_input_s >= 0) out->backward_input_s *= f;
    if (out->backward_weight_s >= 0) out->backward_weight_s *= f;
    out->forward_spread_s *= f;
    out->backward_spread_s *= f;
  }
  return true;
}

namespace {
std::string Num(double v) { return fmt::format("{:.17g}", v); }
std::string Quote(const std::string& s) {
  YAML::Emitter e;
  e << YAML::DoubleQuoted << s;
  return e.c_str();
}
}  // namespace

std::string ProfileToYaml(const Profile& p) {
  std::string o;
  o += "format_version: 1\n";
  o += "model: " + Quote(p.model) + "\n";
  o += std::string("dtype: ") + DTypeName(p.dtype) + "\n";
  o += "device: " + Quote(p.device) + "\n";
  o += "backend: " + Quote(p.backend) + "\n";
  o += "tool: " + Quote(p.tool) + "\n";
  o += "command: " + Quote(p.command) + "\n";
  o += "date: " + Quote(p.date) + "\n";
  o += fmt::format("threads: {}\n", p.threads);
  o += fmt::format("reference_microbatch: {}\n", p.reference_microbatch);
  if (!p.comm.empty()) {
    o += "comm:\n";
    for (const auto& c : p.comm) {
      o += fmt::format(
          "  - {{collective: {}, level: {}, group_size: {}, backend: {}, cache: {}, {}alpha_s: {}, busbw_GBps: {},\n   "
          "  points: [",
          c.collective, Quote(c.level), c.group_size, c.backend, c.cold ? "cold" : "warm",
          c.gap_s > 0 ? fmt::format("gap_s: {}, ", c.gap_s) : std::string(), Num(c.alpha_s), Num(c.busbw_GBps));
      for (size_t i = 0; i < c.points.size(); ++i)
        o += fmt::format("{}[{}, {}]", i ? ", " : "", Num(c.points[i].first), Num(c.points[i].second));
      o += "]}\n";
    }
  }
  if (p.layers.empty()) return o;
  o += "layers:\n";
  for (const auto& l : p.layers) {
    o += "  - name: " + Quote(l.name) + "\n";
    if (!l.desc.empty()) o += "    desc: " + Quote(l.desc) + "\n";
    o += "    inputs: [";
    for (size_t i = 0; i < l.inputs.size(); ++i) o += (i ? ", " : "") + Quote(l.inputs[i]);
    o += "]\n";
    if (!l.type.empty()) o += "    type: " + Quote(l.type) + "\n";
    if (l.tp_allreduces > 0)
      o += fmt::format("    tp_allreduces: {}\n    tp_allreduce_bytes: {}\n", l.tp_allreduces,
                       Num(l.tp_allreduce_bytes));
    o += "    params_bytes: " + Num(l.params_bytes) + "\n";
    o += "    output_bytes: " + Num(l.output_bytes) + "\n";
    o += "    stash_bytes: " + Num(l.stash_bytes) + "\n";
    o += "    timings:\n";
    for (const auto& t : l.timings) {
      o += fmt::format("      - {{microbatch: {}, tp: {}, forward_s: {}, backward_s: {}", t.microbatch, t.tp,
                       Num(t.forward_s), Num(t.backward_s));
      if (t.backward_input_s >= 0) o += ", backward_input_s: " + Num(t.backward_input_s);
      if (t.backward_weight_s >= 0) o += ", backward_weight_s: " + Num(t.backward_weight_s);
      o += ", forward_spread_s: " + Num(t.forward_spread_s) + ", backward_spread_s: " + Num(t.backward_spread_s);
      if (t.repetitions > 0) {
        o += ", forward_min_s: " + Num(t.forward_min_s) + ", backward_input_min_s: " + Num(t.backward_input_min_s) +
             ", backward_weight_min_s: " + Num(t.backward_weight_min_s) +
             fmt::format(", repetitions: {}", t.repetitions) + ", peak_memory_bytes: " + Num(t.peak_memory_bytes) +
             ", achieved_gflops: " + Num(t.achieved_gflops);
      }
      o += "}\n";
    }
  }
  return o;
}

namespace {
// The reader proper; yaml-cpp exceptions it lets through become errors in ParseProfile.
Status ParseProfileUnguarded(const std::string& path, const std::string& text, Profile* out) {
  YAML::Node root;
  PLANNER_RETURN_IF_ERROR(ParseYamlText(path, text, &root));
  YamlReader r(path);
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(root, "",
                                      {"format_version", "model", "dtype", "device", "backend", "tool", "command",
                                       "date", "threads", "reference_microbatch", "layers", "comm"}));
  Profile p;
  p.path = path;
  p.digest = DigestHex(text);
  PLANNER_RETURN_IF_ERROR(r.CheckFormatVersion(root, true));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "model", "model", &p.model, true));
  std::string dtype;
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "dtype", "dtype", {"fp32", "fp16", "bf16", "fp8"}, &dtype, false));
  ParseDType(dtype, &p.dtype);  // absent: fp32
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "device", "device", &p.device, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "backend", "backend", &p.backend, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "tool", "tool", &p.tool, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "command", "command", &p.command, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "date", "date", &p.date, false));
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "threads", "threads", &p.threads, false, 0));
  PLANNER_RETURN_IF_ERROR(
      r.GetInt(root, "reference_microbatch", "reference_microbatch", &p.reference_microbatch, true, 1));
  const YAML::Node& comm = root["comm"];
  if (comm.IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.RequireSequence(comm, "comm"));
    for (size_t i = 0; i < comm.size(); ++i) {
      const YAML::Node& n = comm[i];
      std::string f = fmt::format("comm[{}]", i);
      PLANNER_RETURN_IF_ERROR(r.CheckKeys(
          n, f, {"collective", "level", "group_size", "backend", "cache", "gap_s", "alpha_s", "busbw_GBps", "points"}));
      CommCurve c;
      PLANNER_RETURN_IF_ERROR(r.GetEnum(
          n, "collective", f + ".collective",
          {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv", "all_to_all"}, &c.collective, true));
      PLANNER_RETURN_IF_ERROR(r.GetString(n, "level", f + ".level", &c.level, true));
      PLANNER_RETURN_IF_ERROR(r.GetInt(n, "group_size", f + ".group_size", &c.group_size, true, 2));
      PLANNER_RETURN_IF_ERROR(r.GetString(n, "backend", f + ".backend", &c.backend, false));
      std::string cache = "warm";
      PLANNER_RETURN_IF_ERROR(r.GetEnum(n, "cache", f + ".cache", {"warm", "cold"}, &cache, false));
      c.cold = cache == "cold";
      PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "gap_s", f + ".gap_s", &c.gap_s, false, 0.0, false));
      if (c.gap_s > 0 && !c.cold)
        return r.FieldError(n["gap_s"], f + ".gap_s", "applies to cold curves only; set cache: cold or remove gap_s");
      PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "alpha_s", f + ".alpha_s", &c.alpha_s, true, 0.0, false));
      PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "busbw_GBps", f + ".busbw_GBps", &c.busbw_GBps, true, 0.0, false));
      const YAML::Node& pts = n["points"];
      if (pts.IsDefined()) {
        PLANNER_RETURN_IF_ERROR(r.RequireSequence(pts, f + ".points"));
        for (size_t k = 0; k < pts.size(); ++k) {
          const YAML::Node& pt = pts[k];
          if (!pt.IsSequence() || pt.size() != 2 || !pt[0].IsScalar() || !pt[1].IsScalar()) {
            return r.FieldError(pt, fmt::format("{}.points[{}]", f, k), "must be [bytes, seconds]");
          }
          double bytes = 0, seconds = 0;
          const std::string fp = fmt::format("{}.points[{}]", f, k);
          if (!r.AsDouble(pt[0], fp, &bytes, 0.0, false).ok() || !r.AsDouble(pt[1], fp, &seconds, 0.0, false).ok()) {
            return r.FieldError(pt, fp, "must be two finite numbers [bytes, seconds], at least 0");
          }
          c.points.emplace_back(bytes, seconds);
        }
      }
      p.comm.push_back(std::move(c));
    }
  }
  const YAML::Node& layers = root["layers"];
  if (!layers.IsDefined() && !p.comm.empty()) {
    *out = std::move(p);
    return Status::OK();
  }
  if (!layers.IsDefined())
    return r.FieldError(root, "layers", "missing required field; a profile lists its layers (or comm curves)");
  PLANNER_RETURN_IF_ERROR(r.RequireSequence(layers, "layers"));
  if (layers.size() == 0) return r.FieldError(layers, "layers", "the list is empty");
  std::map<std::string, size_t> seen;
  std::vector<std::pair<YAML::Node, std::string>> input_nodes;
  for (size_t i = 0; i < layers.size(); ++i) {
    const YAML::Node& n = layers[i];
    std::string f = fmt::format("layers[{}]", i);
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(n, f,
                                        {"name", "desc", "type", "tp_allreduces", "tp_allreduce_bytes", "inputs",
                                         "params_bytes", "output_bytes", "stash_bytes", "timings"}));
    ProfileLayer l;
    PLANNER_RETURN_IF_ERROR(r.GetString(n, "name", f + ".name", &l.name, true));
    if (seen.count(l.name)) return r.FieldError(n["name"], f + ".name", "duplicate layer name '" + l.name + "'");
    PLANNER_RETURN_IF_ERROR(r.GetString(n, "desc", f + ".desc", &l.desc, false));
    PLANNER_RETURN_IF_ERROR(r.GetString(n, "type", f + ".type", &l.type, false));
    PLANNER_RETURN_IF_ERROR(r.GetInt(n, "tp_allreduces", f + ".tp_allreduces", &l.tp_allreduces, false, 0));
    PLANNER_RETURN_IF_ERROR(
        r.GetDouble(n, "tp_allreduce_bytes", f + ".tp_allreduce_bytes", &l.tp_allreduce_bytes, false, 0.0, false));
    if (n["inputs"].IsDefined()) {
      PLANNER_RETURN_IF_ERROR(r.RequireSequence(n["inputs"], f + ".inputs"));
      for (size_t k = 0; k < n["inputs"].size(); ++k) {
        const YAML::Node& in = n["inputs"][k];
        std::string fi = fmt::format("{}.inputs[{}]", f, k);
        if (!in.IsScalar()) return r.FieldError(in, fi, "must be a layer name");
        l.inputs.push_back(in.Scalar());
        input_nodes.emplace_back(in, fi);
      }
    } else if (i > 0) {
      l.inputs.push_back(p.layers.back().name);
    }
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "params_bytes", f + ".params_bytes", &l.params_bytes, false, 0.0, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "output_bytes", f + ".output_bytes", &l.output_bytes, true, 0.0, false));
    l.stash_bytes = l.output_bytes;
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "stash_bytes", f + ".stash_bytes", &l.stash_bytes, false, 0.0, false));
    const YAML::Node& ts = n["timings"];
    if (!ts.IsDefined()) return r.FieldError(n, f + ".timings", "missing required field; list at least one timing");
    PLANNER_RETURN_IF_ERROR(r.RequireSequence(ts, f + ".timings"));
    if (ts.size() == 0) return r.FieldError(ts, f + ".timings", "list at least one timing");
    for (size_t k = 0; k < ts.size(); ++k) {
      std::string ft = fmt::format("{}.timings[{}]", f, k);
      const YAML::Node& t = ts[k];
      PLANNER_RETURN_IF_ERROR(
          r.CheckKeys(t, ft,
                      {"microbatch", "tp", "forward_s", "backward_s", "backward_input_s", "backward_weight_s",
                       "forward_spread_s", "backward_spread_s", "forward_min_s", "backward_input_min_s",
                       "backward_weight_min_s", "repetitions", "peak_memory_bytes", "achieved_gflops"}));
      ProfileTiming pt;
      PLANNER_RETURN_IF_ERROR(r.GetInt(t, "microbatch", ft + ".microbatch", &pt.microbatch, true, 1));
      PLANNER_RETURN_IF_ERROR(r.GetInt(t, "tp", ft + ".tp", &pt.tp, false, 1));
      PLANNER_RETURN_IF_ERROR(r.GetDouble(t, "forward_s", ft + ".forward_s", &pt.forward_s, true, 0.0, false));
      PLANNER_RETURN_IF_ERROR(r.GetDouble(t, "backward_s", ft + ".backward_s", &pt.backward_s, true, 0.0, false));
      PLANNER_RETURN_IF_ERROR(
          r.GetDouble(t, "backward_input_s", ft + ".backward_input_s", &pt.backward_input_s, false, 0.0, false));
      PLANNER_RETURN_IF_ERROR(
          r.GetDouble(t, "backward_weight_s", ft + ".backward_weight_s", &pt.backward_weight_s, false, 0.0, false));
      PLANNER_RETURN_IF_ERROR(
          r.GetDouble(t, "forward_spread_s", ft + ".forward_spread_s", &pt.forward_spread_s, false, 0.0, false));
      PLANNER_RETURN_IF_ERROR(
          r.GetDouble(t, "backward_spread_s", ft + ".backward_spread_s", &pt.backward_spread_s, false, 0.0, false));
      PLANNER_RETURN_IF_ERROR(
          r.GetDouble(t, "forward_min_s", ft + ".forward_min_s", &pt.forward_min_s, false, 0.0, false));
      PLANNER_RETURN_IF_ERROR(r.GetDouble(t, "backward_input_min_s", ft + ".backward_input_min_s",
                                          &pt.backward_input_min_s, false, 0.0, false));
      PLANNER_RETURN_IF_ERROR(r.GetDouble(t, "backward_weight_min_s", ft + ".backward_weight_min_s",
                                          &pt.backward_weight_min_s, false, 0.0, false));
      PLANNER_RETURN_IF_ERROR(r.GetInt(t, "repetitions", ft + ".repetitions", &pt.repetitions, false, 0));
      PLANNER_RETURN_IF_ERROR(
          r.GetDouble(t, "peak_memory_bytes", ft + ".peak_memory_bytes", &pt.peak_memory_bytes, false, 0.0, false));
      PLANNER_RETURN_IF_ERROR(
          r.GetDouble(t, "achieved_gflops", ft + ".achieved_gflops", &pt.achieved_gflops, false, 0.0, false));
      l.timings.push_back(pt);
    }
    seen[l.name] = i;
    p.layers.push_back(std::move(l));
  }
  // Every input names a layer; the graph has no cycle.
  for (const auto& [node, field] : input_nodes) {
    if (!seen.count(node.Scalar())) {
      return r.FieldError(node, field, "'" + node.Scalar() + "' is not a layer of this profile; check the name");
    }
  }
  if (const auto cycle = FindInputCycle(p.layers, seen)) {
    const auto [u, v] = *cycle;
    return r.FieldError(layers[v], fmt::format("layers[{}].inputs", v),
                        "the layer graph has a cycle through '" + p.layers[u].name + "'; inputs must form a DAG");
  }
  *out = std::move(p);
  return Status::OK();
}
}  // namespace

std::optional<std::pair<size_t, size_t>> FindInputCycle(const std::vector<ProfileLayer>& layers,
                                                        const std::map<std::string, size_t>& index) {
  std::vector<int> state(layers.size(), 0);  // 0 new, 1 on the path, 2 done
  for (size_t start = 0; start < layers.size(); ++start) {
    if (state[start]) continue;
    std::vector<std::pair<size_t, size_t>> stack = {{start, 0}};  // a layer and its next input
    state[start] = 1;
    while (!stack.empty()) {
      auto& [v, k] = stack.back();
      if (k == layers[v].inputs.size()) {
        state[v] = 2;
        stack.pop_back();
        continue;
      }
      const size_t u = index.at(layers[v].inputs[k++]);
      if (state[u] == 1) return std::make_pair(u, v);
      if (state[u] == 0) {
        state[u] = 1;
        stack.push_back({u, 0});
      }
    }
  }
  return std::nullopt;
}

Status ParseProfile(const std::string& path, const std::string& text, Profile* out) {
  return CatchYamlErrors(path, [&] { return ParseProfileUnguarded(path, text, out); });
}

const CommCurve* Profile::FindComm(const std::string& collective, const std::string& level, Conditions want) const {
  const bool cold_first = want != Conditions::kWarm;
  const CommCurve* best = nullptr;
  for (const auto& c : comm) {
    if (c.collective != collective || c.level != level) continue;
    if (best == nullptr || (c.cold != best->cold && c.cold == cold_first)) {
      best = &c;
      continue;
    }
    if (c.cold != best->cold) continue;
    if (c.gap_s != best->gap_s) {
      if (want == Conditions::kAfterCompute ? c.gap_s > best->gap_s : c.gap_s < best->gap_s) best = &c;
      continue;
    }
    if (c.group_size > best->group_size) best = &c;
  }
  return best;
}

Status LoadProfile(const std::string& path, Profile* out) {
  std::string text;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(path, &text));
  return ParseProfile(path, text, out);
}

}  // namespace planner
