#include "spec/cluster_spec.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/digest.h"
#include "common/units.h"
#include "spec/yaml_reader.h"

namespace planner {

int64_t ClusterSpec::TotalGpus() const { return GpusPerUnit(levels.size() - 1); }

int64_t ClusterSpec::GpusPerUnit(size_t level) const {
  int64_t n = 1;
  for (size_t i = 0; i <= level && i < levels.size(); ++i) n *= levels[i].size;
  return n;
}

int64_t ClusterSpec::GpusPerMachine() const { return levels.size() > 1 ? levels[0].size : 1; }

double ClusterSpec::NodeNetworkGBps() const {
  if (network_GBps > 0) return network_GBps;
  if (levels.empty()) return 0;
  if (levels.size() == 1) return levels[0].bandwidth_GBps;
  return levels[1].bandwidth_GBps * static_cast<double>(levels[0].size);
}

double ClusterSpec::NetworkLatencySeconds() const {
  if (levels.empty()) return 0;
  return levels[levels.size() > 1 ? 1 : 0].latency_us * 1e-6;
}

double ClusterSpec::PeakFlops(DType dtype) const {
  auto it = peak_tflops.find(DTypeName(dtype));
  if (it == peak_tflops.end() && dtype == DType::kBf16) it = peak_tflops.find("fp16");
  if (it == peak_tflops.end() && dtype == DType::kFp16) it = peak_tflops.find("bf16");
  if (it == peak_tflops.end()) return 0;
  return it->second * 1e12;
}

double ClusterSpec::UsableMemoryBytes() const { return usable_memory_GiB * kGiB; }

double ClusterSpec::Efficiency(DType dtype) const {
  auto it = efficiency_by_dtype.find(DTypeName(dtype));
  if (it == efficiency_by_dtype.end() && dtype == DType::kBf16) it = efficiency_by_dtype.find("fp16");
  if (it == efficiency_by_dtype.end() && dtype == DType::kFp16) it = efficiency_by_dtype.find("bf16");
  if (it == efficiency_by_dtype.end() && dtype == DType::kFp8) it = efficiency_by_dtype.find("bf16");
  if (it == efficiency_by_dtype.end() && dtype == DType::kFp8) it = efficiency_by_dtype.find("fp16");
  return it == efficiency_by_dtype.end() ? efficiency : it->second;
}

namespace {
// `efficiency:` a fraction of peak for every precision, or a map {bf16: x, fp8: y, ...} per
// precision (a precision the map lacks takes fp16 / bf16's entry, else the default 0.5).
Status ParseEfficiency(YamlReader& r, const YAML::Node& root, ClusterSpec* c) {
  const YAML::Node& e = root["efficiency"];
  if (e.IsDefined() && e.IsMap()) {
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(e, "efficiency", {"fp32", "tf32", "fp16", "bf16", "fp8"}));
    for (const auto& kv : e) {
      double v = 0;
      const std::string key = kv.first.Scalar();
      PLANNER_RETURN_IF_ERROR(r.AsDouble(kv.second, "efficiency." + key, &v, 0.0, true));
      if (v > 1) return r.FieldError(kv.second, "efficiency." + key, "is a fraction of peak; must be at most 1");
      c->efficiency_by_dtype[key] = v;
    }
    return Status::OK();
  }
  PLANNER_RETURN_IF_ERROR(r.GetDouble(root, "efficiency", "efficiency", &c->efficiency, false, 0.0, true));
  if (c->efficiency > 1)
    return r.FieldError(e, "efficiency",
                        "is a fraction of peak; must be at most 1; or give one per precision: {bf16: 0.6, fp8: 0.5}");
  return Status::OK();
}

// `cpu_machines: {count, bandwidth_GBps, sum_GBps}`: every field required.
Status ParseCpuMachines(YamlReader& r, const YAML::Node& root, ClusterSpec* c) {
  const YAML::Node& m = root["cpu_machines"];
  if (!m.IsDefined()) return Status::OK();
  PLANNER_RETURN_IF_ERROR(r.RequireMap(m, "cpu_machines"));
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(m, "cpu_machines", {"count", "bandwidth_GBps", "sum_GBps"}));
  CpuMachines& cm = c->cpu_machines;
  PLANNER_RETURN_IF_ERROR(r.GetInt(m, "count", "cpu_machines.count", &cm.count, true, 1));
  if (cm.count > (int64_t{1} << 20)) return r.FieldError(m["count"], "cpu_machines.count", "must be at most 1048576");
  PLANNER_RETURN_IF_ERROR(
      r.GetDouble(m, "bandwidth_GBps", "cpu_machines.bandwidth_GBps", &cm.bandwidth_GBps, true, 0.0, true));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(m, "sum_GBps", "cpu_machines.sum_GBps", &cm.sum_GBps, true, 0.0, true));
  return Status::OK();
}

// topology[0]'s node keys: intra_node (nvlink | pcie), pcie_GBps (required with pcie, only there),
// gpus_per_pcie_switch (pcie; divides the node), network_GBps. Other levels may not carry them.
Status ParseNodeKeys(YamlReader& r, const YAML::Node& level, size_t i, ClusterSpec* c) {
  const std::string f = fmt::format("topology[{}]", i);
  if (i > 0) {
    for (const char* key : {"intra_node", "pcie_GBps", "gpus_per_pcie_switch", "network_GBps"}) {
      if (level[key].IsDefined())
        return r.FieldError(level[key], f + "." + key,
                            "describes a node; give it on topology[0] (the node level) only");
    }
    return Status::OK();
  }
  std::string kind = "nvlink";
  PLANNER_RETURN_IF_ERROR(r.GetEnum(level, "intra_node", f + ".intra_node", {"nvlink", "pcie"}, &kind, false));
  if (kind.empty()) kind = "nvlink";
  c->intra_node = kind == "pcie" ? IntraNode::kPcie : IntraNode::kNvlink;
  PLANNER_RETURN_IF_ERROR(r.GetDouble(level, "network_GBps", f + ".network_GBps", &c->network_GBps, false, 0.0, true));
  if (c->intra_node == IntraNode::kNvlink) {
    for (const char* key : {"pcie_GBps", "gpus_per_pcie_switch"}) {
      if (level[key].IsDefined())
        return r.FieldError(level[key], f + "." + key,
                            "applies to PCIe-only nodes; add 'intra_node: pcie' or remove it");
    }
    return Status::OK();
  }
  if (!level["pcie_GBps"].IsDefined())
    return r.FieldError(
        level, f + ".pcie_GBps",
        "missing: a PCIe-only node needs its GPU<->CPU copy bandwidth per PCIe switch; add 'pcie_GBps: <GB/s>'");
  PLANNER_RETURN_IF_ERROR(r.GetDouble(level, "pcie_GBps", f + ".pcie_GBps", &c->pcie_GBps, true, 0.0, true));
  const int64_t size = c->levels.empty() ? 1 : c->levels[0].size;
  c->gpus_per_pcie_switch = std::max<int64_t>(1, size / 2);
  PLANNER_RETURN_IF_ERROR(
      r.GetInt(level, "gpus_per_pcie_switch", f + ".gpus_per_pcie_switch", &c->gpus_per_pcie_switch, false, 1));
  if (size % c->gpus_per_pcie_switch != 0) {
    return r.FieldError(level["gpus_per_pcie_switch"], f + ".gpus_per_pcie_switch",
                        fmt::format("{} does not divide the node's {} GPUs; give a divisor of {}",
                                    c->gpus_per_pcie_switch, size, size));
  }
  return Status::OK();
}

// The reader proper; yaml-cpp exceptions it lets through become errors in ParseClusterSpec.
Status ParseClusterSpecUnguarded(const std::string& path, const std::string& text, ClusterSpec* out) {
  YAML::Node root;
  PLANNER_RETURN_IF_ERROR(ParseYamlText(path, text, &root));
  YamlReader r(path);
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(
      root, "",
      {"format_version", "name", "gpu", "efficiency", "hbm_efficiency", "host_op_scale", "topology", "cpu_machines"}));
  ClusterSpec c;
  c.path = path;
  c.digest = DigestHex(text);
  PLANNER_RETURN_IF_ERROR(r.CheckFormatVersion(root, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "name", "name", &c.name, true));
  PLANNER_RETURN_IF_ERROR(ParseEfficiency(r, root, &c));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(root, "hbm_efficiency", "hbm_efficiency", &c.hbm_efficiency, false, 0.0, true));
  if (c.hbm_efficiency > 1)
    return r.FieldError(root["hbm_efficiency"], "hbm_efficiency", "is a fraction of peak; must be at most 1");
  PLANNER_RETURN_IF_ERROR(r.GetDouble(root, "host_op_scale", "host_op_scale", &c.host_op_scale, false, 0.0, true));
  if (c.host_op_scale > 100)
    return r.FieldError(root["host_op_scale"], "host_op_scale",
                        "is a host's time per op over an x86 DGX host's (Grace: 2.75); must be at most 100");

  if (!root["gpu"].IsDefined())
    return r.FieldError(root, "gpu", "missing required field; add 'gpu:' with name, peak_tflops, memory_GiB");
  const YAML::Node& g = root["gpu"];
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(
      g, "gpu", {"name", "peak_tflops", "memory_GiB", "usable_memory_GiB", "hbm_bandwidth_GBps", "power_cap_W"}));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(g, "power_cap_W", "gpu.power_cap_W", &c.power_cap_W, false, 0.0, true));
  PLANNER_RETURN_IF_ERROR(r.GetString(g, "name", "gpu.name", &c.gpu_name, true));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(g, "memory_GiB", "gpu.memory_GiB", &c.memory_GiB, true, 0.0, true));
  c.usable_memory_GiB = c.memory_GiB;
  PLANNER_RETURN_IF_ERROR(
      r.GetDouble(g, "usable_memory_GiB", "gpu.usable_memory_GiB", &c.usable_memory_GiB, false, 0.0, true));
  if (c.usable_memory_GiB > c.memory_GiB) {
    return r.FieldError(g["usable_memory_GiB"], "gpu.usable_memory_GiB",
                        fmt::format("{} exceeds memory_GiB ({})", c.usable_memory_GiB, c.memory_GiB));
  }
  PLANNER_RETURN_IF_ERROR(
      r.GetDouble(g, "hbm_bandwidth_GBps", "gpu.hbm_bandwidth_GBps", &c.hbm_bandwidth_GBps, true, 0.0, true));
  const YAML::Node& peaks = g["peak_tflops"];
  if (!peaks.IsDefined())
    return r.FieldError(g, "gpu.peak_tflops", "missing required field; add 'peak_tflops: {fp16: <TFLOP/s>}'");
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(peaks, "gpu.peak_tflops", {"fp32", "tf32", "fp16", "bf16", "fp8"}));
  for (const auto& kv : peaks) {
    double v = 0;
    std::string key = kv.first.Scalar();
    PLANNER_RETURN_IF_ERROR(r.AsDouble(kv.second, "gpu.peak_tflops." + key, &v, 0.0, true));
    c.peak_tflops[key] = v;
  }

  const YAML::Node& topo = root["topology"];
  if (!topo.IsDefined())
    return r.FieldError(root, "topology",
                        "missing required field; add 'topology:' with one entry per level, innermost first");
  PLANNER_RETURN_IF_ERROR(r.RequireSequence(topo, "topology"));
  if (topo.size() == 0) return r.FieldError(topo, "topology", "needs at least one level (the node)");
  for (size_t i = 0; i < topo.size(); ++i) {
    std::string f = fmt::format("topology[{}]", i);
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(topo[i], f,
                                        {"name", "size", "bandwidth_GBps", "p2p_bandwidth_GBps", "latency_us",
                                         "intra_node", "pcie_GBps", "gpus_per_pcie_switch", "network_GBps"}));
    TopologyLevel level;
    PLANNER_RETURN_IF_ERROR(r.GetString(topo[i], "name", f + ".name", &level.name, true));
    for (const auto& other : c.levels) {
      if (other.name == level.name)
        return r.FieldError(topo[i]["name"], f + ".name",
                            "level '" + level.name + "' is named twice; give every level its own name");
    }
    PLANNER_RETURN_IF_ERROR(r.GetInt(topo[i], "size", f + ".size", &level.size, true, 1));
    if (level.size > (int64_t{1} << 20)) return r.FieldError(topo[i]["size"], f + ".size", "must be at most 1048576");
    PLANNER_RETURN_IF_ERROR(
        r.GetDouble(topo[i], "bandwidth_GBps", f + ".bandwidth_GBps", &level.bandwidth_GBps, true, 0.0, true));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(topo[i], "p2p_bandwidth_GBps", f + ".p2p_bandwidth_GBps",
                                        &level.p2p_bandwidth_GBps, false, 0.0, true));
    if (level.p2p_bandwidth_GBps == 0) level.p2p_bandwidth_GBps = level.bandwidth_GBps;
    PLANNER_RETURN_IF_ERROR(
        r.GetDouble(topo[i], "latency_us", f + ".latency_us", &level.latency_us, false, 0.0, false));
    c.levels.push_back(level);
    PLANNER_RETURN_IF_ERROR(ParseNodeKeys(r, topo[i], i, &c));
    // Checked level by level: the product so far is at most 2^24 and a size at most 2^20, so it cannot overflow.
    if (c.GpusPerUnit(c.levels.size() - 1) > (int64_t{1} << 24)) {
      return r.FieldError(topo[i]["size"], f + ".size",
                          "the levels multiply to more than 16M GPUs (16777216); check the sizes");
    }
  }
  PLANNER_RETURN_IF_ERROR(ParseCpuMachines(r, root, &c));
  *out = std::move(c);
  return Status::OK();
}
}  // namespace

Status ParseClusterSpec(const std::string& path, const std::string& text, ClusterSpec* out) {
  return CatchYamlErrors(path, [&] { return ParseClusterSpecUnguarded(path, text, out); });
}

Status LoadClusterSpec(const std::string& path, ClusterSpec* out) {
  std::string text;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(path, &text, kMaxConfigFileBytes));
  return ParseClusterSpec(path, text, out);
}

}  // namespace planner
