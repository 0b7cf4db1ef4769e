#include "spec/engine_spec.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "spec/embedded_tables.h"
#include "spec/kinds.h"
#include "spec/yaml_reader.h"

namespace planner {

namespace {

struct Builtin {
  const char* name;
  std::string_view text;
};
const Builtin kBuiltinEngines[] = {{"megatron-core", spec_tables::kMegatronCore},
                                   {"torchtitan", spec_tables::kTorchtitan},
                                   {"torchtitan-compile", spec_tables::kTorchtitanCompile},
                                   {"deepspeed", spec_tables::kDeepspeed}};

Status Fraction(const YamlReader& r, const YAML::Node& map, const std::string& key, const std::string& field,
                double* out, double max_value) {
  PLANNER_RETURN_IF_ERROR(r.GetDouble(map, key, field, out, false, 0.0, false));
  if (*out > max_value)
    return r.FieldError(map[key], field, fmt::format("must be at most {}, got {}", max_value, *out));
  return Status::OK();
}

// `band: {bf16: {low, high, runs[, checks]}, ...}` (and `band_moe`, the same for MoE models): -1 < low <= 0 <= high,
// runs >= 0, checks >= 0 (bench/calibrate.py --write-bands writes them).
Status ParseBands(const YamlReader& r, const YAML::Node& b, const std::string& key, std::vector<EngineBand>* out) {
  if (!b.IsDefined()) return Status::OK();
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(b, key, {"bf16", "fp16", "fp8"}));
  for (const char* p : {"bf16", "fp16", "fp8"}) {
    const YAML::Node& n = b[p];
    if (!n.IsDefined()) continue;
    const std::string f = key + "." + p;
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(n, f, {"low", "high", "runs", "checks"}));
    EngineBand e;
    e.precision = p;
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "low", f + ".low", &e.low, true, -1e300, true));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "high", f + ".high", &e.high, true, 0.0, false));
    PLANNER_RETURN_IF_ERROR(r.GetInt(n, "runs", f + ".runs", &e.runs, true, 0));
    PLANNER_RETURN_IF_ERROR(r.GetInt(n, "checks", f + ".checks", &e.checks, false, 0));
    if (!(e.low > -1 && e.low <= 0))
      return r.FieldError(
          n["low"], f + ".low",
          fmt::format("is a signed error of predicted throughput, above -1 and at most 0, got {}", e.low));
    if (e.high > 10)
      return r.FieldError(n["high"], f + ".high", fmt::format("must be at most 10 (a 1000% error), got {}", e.high));
    out->push_back(e);
  }
  return Status::OK();
}

// The first of `stages` the file's `zero` does not run (empty `zero`: stages 0 to 3), as the error's words; "" when
// it runs them all.
std::string StageNotRun(const std::vector<int64_t>& stages, const std::vector<int64_t>& zero) {
  for (int64_t z : stages) {
    if (zero.empty() ? z > 3 : std::find(zero.begin(), zero.end(), z) == zero.end())
      return fmt::format("ZeRO-{} is not one of the stages the file's zero runs ({})", z,
                         zero.empty() ? std::string("0, 1, 2, 3") : fmt::format("{}", fmt::join(zero, ", ")));
  }
  return "";
}

// optimizer_states: {NAME: [ZeRO stages], ...} (absent: fp32 only, at the file's `zero`), and its reason.
Status ParseOptimizerStates(const YamlReader& r, const YAML::Node& root, EngineSpec* e) {
  PLANNER_RETURN_IF_ERROR(
      r.GetString(root, "optimizer_states_reason", "optimizer_states_reason", &e->optimizer_states_reason, false));
  const YAML::Node& n = root["optimizer_states"];
  if (!n.IsDefined()) return Status::OK();
  PLANNER_RETURN_IF_ERROR(r.RequireMap(n, "optimizer_states"));
  for (const auto& kv : n) {
    const std::string name = kv.first.as<std::string>(), field = "optimizer_states." + name;
    OptimizerState s;
    if (!ParseOptimizerState(name, &s))
      return r.FieldError(kv.first, "optimizer_states",
                          fmt::format("unknown optimizer state '{}'; use {}", name, OptimizerStateNames()));
    std::vector<int64_t> stages;
    PLANNER_RETURN_IF_ERROR(r.GetIntList(n, name, field, &stages, true, 0));
    for (int64_t z : stages) {
      if (z > 3) return r.FieldError(kv.second, field, fmt::format("ZeRO stages are 0 to 3, got {}", z));
    }
    if (stages.empty()) return r.FieldError(kv.second, field, "name the ZeRO stages it keeps this state at");
    e->optimizer_states.emplace_back(s, stages);
  }
  std::sort(e->optimizer_states.begin(), e->optimizer_states.end());
  if (e->optimizer_states.empty() || e->optimizer_states.front().first != OptimizerState::kFp32)
    return r.FieldError(n, "optimizer_states", "name fp32 too (every engine keeps fp32 master weights and moments)");
  // Each state's stages are stages the engine runs; fp32's are all of them (the search runs `zero` for it).
  for (const auto& [state, stages] : e->optimizer_states) {
    const std::string field = std::string("optimizer_states.") + OptimizerStateName(state);
    if (const std::string why = StageNotRun(stages, e->zero); !why.empty())
      return r.FieldError(n[OptimizerStateName(state)], field, why);
    if (state == OptimizerState::kFp32 && !e->zero.empty() && stages != e->zero)
      return r.FieldError(n["fp32"], field, fmt::format("list the file's zero stages ({})", fmt::join(e->zero, ", ")));
  }
  return Status::OK();
}

// fp8_param_gather: [ZeRO stages] (absent: none), each >= 1 (Megatron-LM asserts --fp8-param-gather runs under the
// distributed optimizer or FSDP) and one the file's `zero` runs; and its reason.
Status ParseFp8ParamGather(const YamlReader& r, const YAML::Node& root, EngineSpec* e) {
  PLANNER_RETURN_IF_ERROR(
      r.GetString(root, "fp8_param_gather_reason", "fp8_param_gather_reason", &e->fp8_param_gather_reason, false));
  if (!root["fp8_param_gather"].IsDefined()) return Status::OK();
  PLANNER_RETURN_IF_ERROR(r.GetIntList(root, "fp8_param_gather", "fp8_param_gather", &e->fp8_param_gather, true, 1));
  if (e->fp8_param_gather.empty())
    return r.FieldError(root["fp8_param_gather"], "fp8_param_gather",
                        "name the ZeRO stages it keeps FP8 parameters at (1 to 3), or drop the key");
  if (const std::string why = StageNotRun(e->fp8_param_gather, e->zero); !why.empty())
    return r.FieldError(root["fp8_param_gather"], "fp8_param_gather", why);
  return Status::OK();
}

// `moe_host: {launch_us: U, launches: {bf16: [F, B], fp8_delayed: [F, B], fp8_current: [F, B]}}`: host microseconds
// per launch (0 < U <= 1000) and launches per local routed expert per layer-microbatch, forward and backward (0..1000).
Status ParseMoeHost(const YamlReader& r, const YAML::Node& n, EngineSpec* e) {
  if (!n.IsDefined()) return Status::OK();
  PLANNER_RETURN_IF_ERROR(r.RequireMap(n, "moe_host"));
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(n, "moe_host", {"launch_us", "launches"}));
  double us = 0;
  PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "launch_us", "moe_host.launch_us", &us, true, 0.0, true));
  if (us > 1000)
    return r.FieldError(n["launch_us"], "moe_host.launch_us",
                        fmt::format("is microseconds per launch; at most 1000, got {}", us));
  e->moe_host_launch_s = us * 1e-6;
  const YAML::Node& l = n["launches"];
  if (!l.IsDefined()) return r.FieldError(n, "moe_host.launches", "missing; add launches: {bf16: [forward, backward]}");
  PLANNER_RETURN_IF_ERROR(r.RequireMap(l, "moe_host.launches"));
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(l, "moe_host.launches", {"bf16", "fp8_delayed", "fp8_current"}));
  for (const char* p : {"bf16", "fp8_delayed", "fp8_current"}) {
    const YAML::Node& v = l[p];
    if (!v.IsDefined()) continue;
    const std::string field = std::string("moe_host.launches.") + p;
    if (!v.IsSequence() || v.size() != 2)
      return r.FieldError(v, field, "give [forward, backward]: launches per local expert per layer-microbatch");
    std::array<double, 2> fb{};
    for (size_t i = 0; i < 2; ++i) {
      PLANNER_RETURN_IF_ERROR(r.AsDouble(v[i], field, &fb[i], 0.0, false));
      if (fb[i] > 1000) return r.FieldError(v[i], field, fmt::format("at most 1000 launches, got {}", fb[i]));
    }
    e->moe_host_launches[p] = fb;
  }
  return Status::OK();
}

Status ParseUnguarded(const std::string& path, const std::string& text, EngineSpec* out) {
  YAML::Node root;
  PLANNER_RETURN_IF_ERROR(ParseYamlText(path, text, &root));
  YamlReader r(path);
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(root, "",
                                      {"format_version",
                                       "name",
                                       "attention",
                                       "attention_fallback",
                                       "fp8_recipe",
                                       "sustained",
                                       "elementwise_traffic",
                                       "fp8_cast_fused",
                                       "overlap",
                                       "cp_ring",
                                       "memory",
                                       "zero",
                                       "zero_reason",
                                       "optimizer_states",
                                       "optimizer_states_reason",
                                       "fp8_param_gather",
                                       "fp8_param_gather_reason",
                                       "hsdp",
                                       "fsdp_with_pp",
                                       "schedules",
                                       "recompute_modules",
                                       "band",
                                       "band_moe",
                                       "cp_comm_types",
                                       "cp_comm_reason",
                                       "moe_dispatchers",
                                       "moe_flex_hops",
                                       "wgrad_accumulation",
                                       "sac_saves",
                                       "grad_accumulation_bytes",
                                       "moe_host"}));
  EngineSpec e;
  e.path = path;
  PLANNER_RETURN_IF_ERROR(r.CheckFormatVersion(root, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "name", "name", &e.name, true));
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "attention", "attention", {"fa2", "fa3", "cudnn"}, &e.attention, true));
  if (root["attention_fallback"].IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.RequireSequence(root["attention_fallback"], "attention_fallback"));
    for (const auto& k : root["attention_fallback"]) {
      const std::string name = k.as<std::string>();
      if (name != "fa2" && name != "fa3" && name != "cudnn")
        return r.FieldError(k, "attention_fallback", fmt::format("unknown kernel '{}'; use fa2, fa3 or cudnn", name));
      e.attention_fallback.push_back(name);
    }
  }
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "fp8_recipe", "fp8_recipe", Fp8RecipeNames(), &e.fp8_recipe, false));
  const YAML::Node& s = root["sustained"];
  if (s.IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(s, "sustained", {"gemm", "gemm_fp8", "attention", "memory"}));
    PLANNER_RETURN_IF_ERROR(Fraction(r, s, "gemm", "sustained.gemm", &e.sustained_gemm, 1));
    if (s["gemm_fp8"].IsDefined()) {
      PLANNER_RETURN_IF_ERROR(Fraction(r, s, "gemm_fp8", "sustained.gemm_fp8", &e.sustained_gemm_fp8, 1));
      if (!(e.sustained_gemm_fp8 > 0)) return r.FieldError(s["gemm_fp8"], "sustained.gemm_fp8", "must be above 0");
    }
    PLANNER_RETURN_IF_ERROR(Fraction(r, s, "attention", "sustained.attention", &e.sustained_attention, 1));
    PLANNER_RETURN_IF_ERROR(Fraction(r, s, "memory", "sustained.memory", &e.sustained_memory, 1));
    if (!(e.sustained_gemm > 0 && e.sustained_attention > 0 && e.sustained_memory > 0))
      return r.FieldError(s, "sustained", "every share must be above 0");
  }
  PLANNER_RETURN_IF_ERROR(
      r.GetDouble(root, "elementwise_traffic", "elementwise_traffic", &e.elementwise_traffic, false, 0.0, true));
  if (e.elementwise_traffic > 100)
    return r.FieldError(root["elementwise_traffic"], "elementwise_traffic", "must be at most 100");
  PLANNER_RETURN_IF_ERROR(Fraction(r, root, "fp8_cast_fused", "fp8_cast_fused", &e.fp8_cast_fused, 1));
  const YAML::Node& o = root["overlap"];
  if (o.IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(o, "overlap",
                                        {"grad_reduce", "grad_reduce_with_pp", "param_gather", "param_prefetch",
                                         "tp_comm_overlap_hidden", "moe_a2a_hidden", "compute_slowdown"}));
    PLANNER_RETURN_IF_ERROR(r.GetBool(o, "grad_reduce", "overlap.grad_reduce", &e.grad_reduce_overlap, false));
    PLANNER_RETURN_IF_ERROR(
        r.GetBool(o, "grad_reduce_with_pp", "overlap.grad_reduce_with_pp", &e.grad_reduce_overlap_pp, false));
    PLANNER_RETURN_IF_ERROR(r.GetBool(o, "param_gather", "overlap.param_gather", &e.param_gather_overlap, false));
    PLANNER_RETURN_IF_ERROR(r.GetBool(o, "param_prefetch", "overlap.param_prefetch", &e.param_prefetch_overlap, false));
    PLANNER_RETURN_IF_ERROR(
        Fraction(r, o, "tp_comm_overlap_hidden", "overlap.tp_comm_overlap_hidden", &e.tp_comm_overlap_hidden, 1));
    PLANNER_RETURN_IF_ERROR(Fraction(r, o, "moe_a2a_hidden", "overlap.moe_a2a_hidden", &e.moe_a2a_hidden, 1));
    PLANNER_RETURN_IF_ERROR(Fraction(r, o, "compute_slowdown", "overlap.compute_slowdown", &e.compute_slowdown, 1));
  }
  const YAML::Node& ring = root["cp_ring"];
  if (ring.IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(ring, "cp_ring", {"fwd", "bwd", "with_exchange"}));
    PLANNER_RETURN_IF_ERROR(r.GetBool(ring, "with_exchange", "cp_ring.with_exchange", &e.cp_ring_with_exchange, false));
    PLANNER_RETURN_IF_ERROR(Fraction(r, ring, "fwd", "cp_ring.fwd", &e.cp_ring_fwd, 1));
    PLANNER_RETURN_IF_ERROR(Fraction(r, ring, "bwd", "cp_ring.bwd", &e.cp_ring_bwd, 1));
    if (!(e.cp_ring_fwd > 0 && e.cp_ring_bwd > 0))
      return r.FieldError(ring, "cp_ring", "both shares must be above 0 (1: the steps run as fast as one kernel)");
  }
  PLANNER_RETURN_IF_ERROR(r.GetIntList(root, "zero", "zero", &e.zero, false, 0));
  for (int64_t z : e.zero) {
    if (z > 3) return r.FieldError(root["zero"], "zero", fmt::format("ZeRO stages are 0 to 3, got {}", z));
  }
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "zero_reason", "zero_reason", &e.zero_reason, false));
  PLANNER_RETURN_IF_ERROR(r.GetBool(root, "fsdp_with_pp", "fsdp_with_pp", &e.fsdp_with_pp, false));
  PLANNER_RETURN_IF_ERROR(r.GetIntList(root, "hsdp", "hsdp", &e.hsdp, false, 1));
  for (int64_t z : e.hsdp) {
    if (z > 3) return r.FieldError(root["hsdp"], "hsdp", fmt::format("ZeRO stages are 1 to 3, got {}", z));
  }
  if (root["schedules"].IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.RequireSequence(root["schedules"], "schedules"));
    for (const auto& n : root["schedules"]) {
      const std::string name = n.as<std::string>();
      if (name != "gpipe" && name != "1f1b" && name != "interleaved" && name != "zb-h1" && name != "dualpipev" &&
          name != "pipedream")
        return r.FieldError(n, "schedules",
                            fmt::format("unknown schedule '{}'; use gpipe, 1f1b, interleaved, zb-h1, dualpipev or "
                                        "pipedream",
                                        name));
      e.schedules.push_back(name);
    }
  }
  if (root["cp_comm_types"].IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.RequireSequence(root["cp_comm_types"], "cp_comm_types"));
    e.cp_comm_types.clear();
    for (const auto& n : root["cp_comm_types"]) {
      CpCommType type;
      if (!ParseCpCommType(n.as<std::string>(), &type))
        return r.FieldError(n, "cp_comm_types",
                            fmt::format("unknown type '{}'; use p2p or allgather", n.as<std::string>()));
      e.cp_comm_types.push_back(CpCommTypeName(type));
    }
    if (e.cp_comm_types.empty()) return r.FieldError(root["cp_comm_types"], "cp_comm_types", "name at least one (p2p)");
  }
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "cp_comm_reason", "cp_comm_reason", &e.cp_comm_reason, false));
  if (root["moe_dispatchers"].IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.RequireSequence(root["moe_dispatchers"], "moe_dispatchers"));
    e.moe_dispatchers.clear();
    for (const auto& n : root["moe_dispatchers"]) {
      const std::string name = n.as<std::string>();
      MoeDispatcher d;
      if (!ParseMoeDispatcher(name, &d))
        return r.FieldError(n, "moe_dispatchers", fmt::format("unknown dispatcher '{}'; use alltoall or flex", name));
      e.moe_dispatchers.push_back(MoeDispatcherName(d));
    }
    if (e.moe_dispatchers.empty())
      return r.FieldError(root["moe_dispatchers"], "moe_dispatchers", "name at least one (alltoall)");
  }
  std::string hops = "serial";
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "moe_flex_hops", "moe_flex_hops", {"serial", "overlapped"}, &hops, false));
  e.moe_flex_serial = hops == "serial";
  std::string wgrad = "separate";
  PLANNER_RETURN_IF_ERROR(
      r.GetEnum(root, "wgrad_accumulation", "wgrad_accumulation", {"fused", "separate"}, &wgrad, false));
  e.wgrad_accumulation_fused = wgrad == "fused";
  std::string sac_saves = "all";
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "sac_saves", "sac_saves", {"all", "read"}, &sac_saves, false));
  e.sac_saves_unread = sac_saves == "all";
  if (const YAML::Node& ga = root["grad_accumulation_bytes"]; ga.IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(ga, "grad_accumulation_bytes", {"fp32", "bf16", "fp16"}));
    for (const char* p : {"fp32", "bf16", "fp16"}) {
      if (!ga[p].IsDefined()) continue;
      double bytes = 0;
      PLANNER_RETURN_IF_ERROR(Fraction(r, ga, p, std::string("grad_accumulation_bytes.") + p, &bytes, 32));
      e.grad_accumulation_bytes[p] = bytes;
    }
  }
  PLANNER_RETURN_IF_ERROR(ParseMoeHost(r, root["moe_host"], &e));
  const YAML::Node& m = root["memory"];
  if (m.IsDefined()) {
    PLANNER_RETURN_IF_ERROR(
        r.CheckKeys(m, "memory", {"fp8_weight_bytes", "allocator_fragmentation", "loss_logit_bytes"}));
    if (const YAML::Node& l = m["loss_logit_bytes"]; l.IsDefined()) {
      if (!l.IsMap())
        return r.FieldError(l, "memory.loss_logit_bytes",
                            "is a map {tp1: B, tp: B}: bytes per logit element at the loss's peak, without and with "
                            "tensor parallelism");
      PLANNER_RETURN_IF_ERROR(r.CheckKeys(l, "memory.loss_logit_bytes", {"tp1", "tp"}));
      if (!l["tp1"].IsDefined() || !l["tp"].IsDefined())
        return r.FieldError(l, "memory.loss_logit_bytes",
                            "give both tp1 (without tensor parallelism) and tp (with it): {tp1: B, tp: B}");
      PLANNER_RETURN_IF_ERROR(Fraction(r, l, "tp1", "memory.loss_logit_bytes.tp1", &e.loss_logit_bytes[0], 64));
      PLANNER_RETURN_IF_ERROR(Fraction(r, l, "tp", "memory.loss_logit_bytes.tp", &e.loss_logit_bytes[1], 64));
    }
    const YAML::Node& w = m["fp8_weight_bytes"];
    double number = 0;
    if (w.IsDefined() && w.IsScalar() && w.Scalar() == "recipe")
      e.fp8_weight_from_recipe = true;  // the kernel table's Fp8Recipe::weight_bytes
    else if (w.IsDefined() && w.IsScalar() && !YAML::convert<double>::decode(w, number))
      return r.FieldError(
          w, "memory.fp8_weight_bytes",
          fmt::format("is bytes per parameter (0 to 4) or recipe (the kernel table's), got '{}'", w.Scalar()));
    else PLANNER_RETURN_IF_ERROR(Fraction(r, m, "fp8_weight_bytes", "memory.fp8_weight_bytes", &e.fp8_weight_bytes, 4));
    PLANNER_RETURN_IF_ERROR(
        Fraction(r, m, "allocator_fragmentation", "memory.allocator_fragmentation", &e.allocator_fragmentation, 0.9));
  }
  if (root["recompute_modules"].IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.RequireSequence(root["recompute_modules"], "recompute_modules"));
    for (const auto& n : root["recompute_modules"]) {
      RecomputeModule mod;
      if (!ParseRecomputeModule(n.as<std::string>(), &mod))
        return r.FieldError(
            n, "recompute_modules",
            fmt::format("unknown module '{}'; use {}", n.as<std::string>(), fmt::join(RecomputeModuleNames(), ", ")));
      e.recompute_modules |= RecomputeBit(mod);
    }
  }
  PLANNER_RETURN_IF_ERROR(ParseOptimizerStates(r, root, &e));
  PLANNER_RETURN_IF_ERROR(ParseFp8ParamGather(r, root, &e));
  PLANNER_RETURN_IF_ERROR(ParseBands(r, root["band"], "band", &e.bands));
  PLANNER_RETURN_IF_ERROR(ParseBands(r, root["band_moe"], "band_moe", &e.moe_bands));
  *out = std::move(e);
  return Status::OK();
}

}  // namespace

const EngineBand* EngineSpec::BandFor(const std::string& precision, bool moe) const {
  if (moe) {
    for (const auto& b : moe_bands) {
      if (b.precision == precision) return &b;
    }
  }
  for (const auto& b : bands) {
    if (b.precision == precision) return &b;
  }
  return nullptr;
}

const std::vector<int64_t>* EngineSpec::OptimizerStateZero(OptimizerState s) const {
  if (optimizer_states.empty()) return s == OptimizerState::kFp32 ? &zero : nullptr;
  for (const auto& [state, stages] : optimizer_states) {
    if (state == s) return &stages;
  }
  return nullptr;
}

std::array<double, 2> EngineSpec::MoeHostSecondsPerExpert(DType dtype) const {
  if (dtype != DType::kFp8 && dtype != DType::kBf16 && dtype != DType::kFp16) return {0, 0};
  // MXFP8 finds each block's scale inside its one cast kernel (no amax / scale launches): delayed scaling's count.
  const bool fused_cast = fp8_recipe == "delayed" || fp8_recipe == "mxfp8";
  const char* key = dtype == DType::kFp8 ? (fused_cast ? "fp8_delayed" : "fp8_current") : "bf16";
  auto it = moe_host_launches.find(key);
  if (!(moe_host_launch_s > 0) || it == moe_host_launches.end()) return {0, 0};
  return {it->second[0] * moe_host_launch_s, it->second[1] * moe_host_launch_s};
}

uint32_t EngineSpec::RunsRecomputeModules() const {
  return recompute_modules != 0 ? recompute_modules : ~RecomputeBit(RecomputeModule::kOpSac);
}

std::vector<std::string> BuiltinEngines() {
  std::vector<std::string> out;
  for (const auto& b : kBuiltinEngines) out.emplace_back(b.name);
  return out;
}

const char* DefaultEngineName() { return "megatron-core"; }

Status ParseEngineSpec(const std::string& path, const std::string& text, EngineSpec* out) {
  return CatchYamlErrors(path, [&] { return ParseUnguarded(path, text, out); });
}

Status LoadEngineSpec(const std::string& name_or_path, EngineSpec* out) {
  for (const auto& b : kBuiltinEngines) {
    if (name_or_path == b.name) return ParseEngineSpec(std::string("builtin:") + b.name, std::string(b.text), out);
  }
  if (name_or_path.find('/') == std::string::npos && name_or_path.find(".yaml") == std::string::npos) {
    return Status::InvalidArgument(fmt::format("--engine: unknown engine '{}'; use one of {}, all, or an engine file",
                                               name_or_path, fmt::join(BuiltinEngines(), ", ")));
  }
  std::string text;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(name_or_path, &text, kMaxConfigFileBytes));
  return ParseEngineSpec(name_or_path, text, out);
}

}  // namespace planner
