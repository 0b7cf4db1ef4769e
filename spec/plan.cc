#include "spec/plan.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "spec/input_limits.h"
#include "spec/layer.h"
#include "spec/yaml_reader.h"

namespace planner {

namespace {

// A small ordered tree that both emitters walk; numbers keep their type so
// JSON gets numbers and YAML gets plain scalars.
struct Tree {
  enum Kind { kMap, kList, kString, kNumber, kInt, kBool } kind = kMap;
  std::string s;
  double d = 0;
  int64_t i = 0;
  std::vector<std::string> keys;  // map entries: keys[i] -> values[i] (a vector of pairs
  std::vector<Tree> values;       // would need Tree complete, which clang's libstdc++ checks)
  std::vector<Tree> list;

  static Tree Str(std::string v) {
    Tree t;
    t.kind = kString;
    t.s = std::move(v);
    return t;
  }
  static Tree Num(double v) {
    Tree t;
    t.kind = kNumber;
    t.d = v;
    return t;
  }
  static Tree Int(int64_t v) {
    Tree t;
    t.kind = kInt;
    t.i = v;
    return t;
  }
  static Tree Bool(bool v) {
    Tree t;
    t.kind = kBool;
    t.i = v ? 1 : 0;
    return t;
  }
  static Tree List() {
    Tree t;
    t.kind = kList;
    return t;
  }
  Tree& Add(std::string key, Tree v) {
    keys.push_back(std::move(key));
    values.push_back(std::move(v));
    return values.back();
  }
};

std::string NumText(double v) {
  if (!std::isfinite(v)) return "0";
  return fmt::format("{:.10g}", v);
}

void EmitYaml(const Tree& t, YAML::Emitter& e) {
  switch (t.kind) {
    case Tree::kMap:
      e << YAML::BeginMap;
      for (size_t k = 0; k < t.keys.size(); ++k) {
        e << YAML::Key << t.keys[k] << YAML::Value;
        EmitYaml(t.values[k], e);
      }
      e << YAML::EndMap;
      break;
    case Tree::kList:
      e << YAML::BeginSeq;
      for (const auto& v : t.list) EmitYaml(v, e);
      e << YAML::EndSeq;
      break;
    case Tree::kString: e << YAML::DoubleQuoted << t.s; break;
    case Tree::kNumber: e << NumText(t.d); break;
    case Tree::kInt: e << t.i; break;
    case Tree::kBool: e << (t.i != 0); break;
  }
}

std::string JsonEscape(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c == '\n') o += "\\n";
    else if (c < 0x20) o += fmt::format("\\u{:04x}", c);
    else o += static_cast<char>(c);
  }
  return o + "\"";
}

void EmitJson(const Tree& t, std::string& o, int indent) {
  std::string pad(static_cast<size_t>(indent) * 2, ' ');
  std::string pad2(static_cast<size_t>(indent + 1) * 2, ' ');
  switch (t.kind) {
    case Tree::kMap:
      o += "{\n";
      for (size_t k = 0; k < t.keys.size(); ++k) {
        o += pad2 + JsonEscape(t.keys[k]) + ": ";
        EmitJson(t.values[k], o, indent + 1);
        o += k + 1 < t.keys.size() ? ",\n" : "\n";
      }
      o += pad + "}";
      break;
    case Tree::kList:
      if (t.list.empty()) {
        o += "[]";
        break;
      }
      o += "[\n";
      for (size_t k = 0; k < t.list.size(); ++k) {
        o += pad2;
        EmitJson(t.list[k], o, indent + 1);
        o += k + 1 < t.list.size() ? ",\n" : "\n";
      }
      o += pad + "]";
      break;
    case Tree::kString: o += JsonEscape(t.s); break;
    case Tree::kNumber: o += NumText(t.d); break;
    case Tree::kInt: o += std::to_string(t.i); break;
    case Tree::kBool: o += t.i ? "true" : "false"; break;
  }
}

// Selective recompute's modules as a list of names.
Tree ModulesTree(uint32_t modules) {
  Tree list = Tree::List();
  for (const auto& name : RecomputeModuleList(modules)) list.list.push_back(Tree::Str(name));
  return list;
}

// Where a document adds its own keys among the layout's: after config, after sequence_parallel,
// after interleave (plan.yaml: parallel and gpus_used; the parameter counts; account_embedding_loss).
enum class LayoutSlot { kAfterConfig, kAfterSequenceParallel, kAfterInterleave };

// The one writer of a layout's fields (plan.yaml's and each runner-up's), in their order; `extra`
// adds the document's own keys at each slot.
void AddLayout(
    const ParallelLayout& l, Tree* t, const std::function<void(LayoutSlot)>& extra = [](LayoutSlot) {}) {
  t->Add("config", Tree::Str(l.config));
  extra(LayoutSlot::kAfterConfig);
  for (auto [key, v] :
       {std::pair{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"cp", l.cp}, {"ep", l.ep}, {"etp", l.etp}}) {
    t->Add(key, Tree::Int(v));
  }
  t->Add("sequence_parallel", Tree::Bool(l.sequence_parallel));
  extra(LayoutSlot::kAfterSequenceParallel);
  t->Add("microbatch_size", Tree::Int(l.microbatch_size));
  t->Add("num_microbatches", Tree::Int(l.num_microbatches));
  t->Add("schedule", Tree::Str(ScheduleName(l.schedule)));
  t->Add("interleave", Tree::Int(l.interleave));
  extra(LayoutSlot::kAfterInterleave);
  t->Add("recompute", Tree::Str(RecomputeName(l.recompute)));
  if (l.recompute_num_layers > 0) t->Add("recompute_num_layers", Tree::Int(l.recompute_num_layers));
  if (l.recompute == Recompute::kSelective) t->Add("recompute_modules", ModulesTree(l.recompute_modules));
  t->Add("zero_stage", Tree::Int(ZeroStageNumber(l.zero_stage)));
  if (l.dp_replicate > 1) t->Add("dp_replicate", Tree::Int(l.dp_replicate));
}

// predicted.band (and predicted.engines.NAME.band): the band's basis and errors, with the ranges they give the
// figures (written for the reader; a reading recomputes them).
Tree BandTree(const PlanBand& b, double iteration_s, double tokens_per_second_per_gpu, double mfu) {
  Tree bt;
  bt.Add("basis", Tree::Str(b.basis));
  bt.Add("runs", Tree::Int(b.runs));
  if (b.checks > 0) bt.Add("checks", Tree::Int(b.checks));
  bt.Add("error_low", Tree::Num(b.error_low));
  bt.Add("error_high", Tree::Num(b.error_high));
  bt.Add("iteration_seconds_low", Tree::Num(b.IterationLow(iteration_s)));
  bt.Add("iteration_seconds_high", Tree::Num(b.IterationHigh(iteration_s)));
  bt.Add("tokens_per_second_per_gpu_low", Tree::Num(b.RateLow(tokens_per_second_per_gpu)));
  bt.Add("tokens_per_second_per_gpu_high", Tree::Num(b.RateHigh(tokens_per_second_per_gpu)));
  bt.Add("mfu_low", Tree::Num(b.RateLow(mfu)));
  bt.Add("mfu_high", Tree::Num(b.RateHigh(mfu)));
  return bt;
}

Tree SummaryTree(const PlanSummary& s) {
  Tree t;
  AddLayout(s, &t);
  t.Add("iteration_seconds", Tree::Num(s.iteration_s));
  t.Add("samples_per_second", Tree::Num(s.samples_per_second));
  t.Add("peak_memory_GiB", Tree::Num(s.peak_memory_bytes / (1024.0 * 1024 * 1024)));
  t.Add("why_lost", Tree::Str(s.why_lost));
  return t;
}

Tree PlanTree(const Plan& p) {
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  Tree t;
  t.Add("format_version", Tree::Int(1));
  t.Add("mode", Tree::Str(PlanModeName(p.mode)));
  Tree& in = t.Add("inputs", Tree());
  in.Add("model", Tree::Str(p.model_name));
  in.Add("model_path", Tree::Str(p.model_path));
  in.Add("model_digest", Tree::Str(p.model_digest));
  in.Add("cluster", Tree::Str(p.cluster_name));
  in.Add("cluster_path", Tree::Str(p.cluster_path));
  in.Add("cluster_digest", Tree::Str(p.cluster_digest));
  in.Add("profile_path", Tree::Str(p.profile_path));
  in.Add("profile_digest", Tree::Str(p.profile_digest));
  in.Add("cost_source", Tree::Str(CostSourceKindName(p.cost_source)));
  if (!p.engine.empty()) in.Add("engine", Tree::Str(p.engine));
  if (!p.engine_file.empty()) in.Add("engine_file", Tree::Str(p.engine_file));
  if (!p.kernels.empty()) in.Add("kernels", Tree::Str(p.kernels));
  if (!p.calibration.empty()) in.Add("calibration", Tree::Str(p.calibration));
  if (p.cp_comm_type != CpCommType::kP2P) in.Add("cp_comm_type", Tree::Str(CpCommTypeName(p.cp_comm_type)));
  if (p.moe_dispatcher != MoeDispatcher::kAllToAll)
    in.Add("moe_dispatcher", Tree::Str(MoeDispatcherName(p.moe_dispatcher)));
  if (p.moe_overlap) in.Add("moe_overlap", Tree::Bool(true));
  if (p.moe_imbalance != 1) in.Add("moe_imbalance", Tree::Num(p.moe_imbalance));
  if (p.tp_comm_overlap) in.Add("tp_comm_overlap", Tree::Bool(true));
  if (!p.fp8_recipe.empty()) in.Add("fp8_recipe", Tree::Str(p.fp8_recipe));
  if (!p.attention_kernel.empty()) in.Add("attention_kernel", Tree::Str(p.attention_kernel));
  in.Add("dtype", Tree::Str(p.dtype ? DTypeName(*p.dtype) : ""));
  if (p.seq > 0) in.Add("seq", Tree::Int(p.seq));
  in.Add("gpus", Tree::Int(p.gpus));
  in.Add("global_batch", Tree::Int(p.global_batch));
  in.Add("usable_memory_GiB", Tree::Num(p.usable_memory_bytes / kGiB));
  AddLayout(p, &t, [&p, &t](LayoutSlot slot) {
    switch (slot) {
      case LayoutSlot::kAfterConfig:
        t.Add("parallel", Tree::Str(p.ParallelString()));
        t.Add("gpus_used", Tree::Int(p.gpus_used));
        break;
      case LayoutSlot::kAfterSequenceParallel:
        t.Add("model_parameters", Tree::Num(p.model_parameters));
        t.Add("model_active_parameters", Tree::Num(p.model_active_parameters));
        if (p.mtp_parameters > 0) t.Add("mtp_parameters", Tree::Num(p.mtp_parameters));
        break;
      case LayoutSlot::kAfterInterleave:
        if (p.account_embedding_loss) t.Add("account_embedding_loss", Tree::Bool(true));
        break;
    }
  });
  t.Add("p2p_overlap", Tree::Bool(p.p2p_overlap));
  if (p.grad_dtype) t.Add("grad_dtype", Tree::Str(DTypeName(*p.grad_dtype)));
  if (p.optimizer_state != OptimizerState::kFp32)
    t.Add("optimizer_state", Tree::Str(OptimizerStateName(p.optimizer_state)));
  if (p.fp8_param_gather) t.Add("fp8_param_gather", Tree::Bool(true));
  t.Add("dp_comm", Tree::Str(DpCommName(p.dp_comm)));
  if (p.dp_servers > 0) t.Add("dp_servers", Tree::Int(p.dp_servers));
  if (p.ps_colocated) t.Add("ps_placement", Tree::Str("colocated"));
  if (p.vertical_sync) t.Add("vertical_sync", Tree::Bool(true));
  Tree stages = Tree::List();
  for (const auto& s : p.stages) {
    Tree st;
    st.Add("first_layer", Tree::Int(s.first_layer));
    st.Add("last_layer", Tree::Int(s.last_layer));
    st.Add("first_layer_name", Tree::Str(s.first_layer_name));
    st.Add("last_layer_name", Tree::Str(s.last_layer_name));
    st.Add("replicas", Tree::Int(s.replicas));
    st.Add("tp", Tree::Int(s.tp));
    st.Add("chunk", Tree::Int(s.chunk));
    st.Add("device_offset", Tree::Int(s.device_offset));
    Tree devs = Tree::List();
    for (int64_t d : s.devices) devs.list.push_back(Tree::Int(d));
    st.Add("devices", devs);
    st.Add("forward_seconds", Tree::Num(s.forward_s));
    st.Add("backward_input_seconds", Tree::Num(s.backward_input_s));
    st.Add("backward_weight_seconds", Tree::Num(s.backward_weight_s));
    st.Add("tp_comm_seconds", Tree::Num(s.tp_comm_s));
    st.Add("ep_comm_seconds", Tree::Num(s.ep_comm_s));
    st.Add("p2p_seconds", Tree::Num(s.p2p_s));
    st.Add("dp_allreduce_seconds", Tree::Num(s.dp_allreduce_s));
    st.Add("in_flight_microbatches", Tree::Int(s.in_flight));
    st.Add("weights_GiB", Tree::Num(s.weights_bytes / kGiB));
    st.Add("optimizer_GiB", Tree::Num(s.optimizer_bytes / kGiB));
    st.Add("activations_GiB", Tree::Num(s.activations_bytes / kGiB));
    st.Add("peak_memory_GiB", Tree::Num(s.peak_memory_bytes / kGiB));
    stages.list.push_back(std::move(st));
  }
  t.Add("stages", stages);
  Tree& pr = t.Add("predicted", Tree());
  pr.Add("iteration_seconds", Tree::Num(p.predicted.iteration_s));
  pr.Add("samples_per_second", Tree::Num(p.predicted.samples_per_second));
  pr.Add("tflops_per_gpu", Tree::Num(p.predicted.tflops_per_gpu));
  pr.Add("mfu", Tree::Num(p.predicted.mfu));
  pr.Add("hfu", Tree::Num(p.predicted.hfu));
  pr.Add("model_tflops_per_gpu", Tree::Num(p.predicted.model_tflops_per_gpu));
  pr.Add("model_flops_per_iteration", Tree::Num(p.predicted.model_flops_per_iteration));
  pr.Add("tokens_per_second_per_gpu", Tree::Num(p.predicted.tokens_per_second_per_gpu));
  pr.Add("bubble_fraction", Tree::Num(p.predicted.bubble_fraction));
  pr.Add("pipeline_seconds", Tree::Num(p.predicted.pipeline_s));
  pr.Add("dp_allreduce_seconds", Tree::Num(p.predicted.dp_allreduce_s));
  pr.Add("optimizer_seconds", Tree::Num(p.predicted.optimizer_s));
  pr.Add("peak_memory_GiB", Tree::Num(p.predicted.peak_memory_bytes / kGiB));
  if (p.predicted.peak_reserved_bytes > 0)
    pr.Add("peak_reserved_GiB", Tree::Num(p.predicted.peak_reserved_bytes / kGiB));
  if (!p.predicted.dp_comm_seconds.empty()) {
    Tree& dc = pr.Add("dp_comm_seconds", Tree());
    for (const auto& [name, seconds] : p.predicted.dp_comm_seconds) dc.Add(name, Tree::Num(seconds));
  }
  if (!p.predicted.communication.empty()) {
    Tree& cm = pr.Add("communication", Tree());
    for (const PlanComm& c : p.predicted.communication) {
      Tree& k = cm.Add(c.kind, Tree());
      k.Add("total_seconds", Tree::Num(c.total_s));
      k.Add("exposed_seconds", Tree::Num(c.exposed_s));
    }
  }
  if (p.predicted.band)
    pr.Add("band", BandTree(*p.predicted.band, p.predicted.iteration_s, p.predicted.tokens_per_second_per_gpu,
                            p.predicted.mfu));
  if (p.predicted.lead) {
    const PlanLead& l = *p.predicted.lead;
    Tree& lt = pr.Add("lead", Tree());
    lt.Add("runner_up_iteration_seconds", Tree::Num(l.runner_up_s));
    lt.Add("chosen_no_overlap_seconds", Tree::Num(l.chosen_no_overlap_s));
    lt.Add("runner_up_no_overlap_seconds", Tree::Num(l.runner_up_no_overlap_s));
    lt.Add("overlap_share", Tree::Num(l.OverlapShare(p.predicted.iteration_s)));
    lt.Add("runners_up_within_band", Tree::Int(l.runners_up_within_band));
  }
  if (!p.predicted.engines.empty()) {
    Tree& et = pr.Add("engines", Tree());
    for (const PlanEngine& e : p.predicted.engines) {
      Tree& one = et.Add(e.engine, Tree());
      if (!e.error.empty()) {
        one.Add("error", Tree::Str(e.error));
        continue;
      }
      one.Add("iteration_seconds", Tree::Num(e.iteration_s));
      one.Add("tokens_per_second_per_gpu", Tree::Num(e.tokens_per_second_per_gpu));
      one.Add("mfu", Tree::Num(e.mfu));
      one.Add("peak_memory_GiB", Tree::Num(e.peak_memory_bytes / kGiB));
      if (e.band) one.Add("band", BandTree(*e.band, e.iteration_s, e.tokens_per_second_per_gpu, e.mfu));
    }
  }
  Tree ru = Tree::List();
  for (const auto& s : p.runners_up) ru.list.push_back(SummaryTree(s));
  t.Add("runners_up", ru);
  Tree notes = Tree::List();
  for (const auto& n : p.notes) notes.list.push_back(Tree::Str(n));
  t.Add("notes", notes);
  return t;
}

// optimizer_state (absent: fp32), checked against the precision.
Status GetOptimizerState(const YamlReader& r, const YAML::Node& root, Plan* p) {
  std::string text;
  PLANNER_RETURN_IF_ERROR(
      r.GetEnum(root, "optimizer_state", "optimizer_state", OptimizerStateNameList(), &text, false));
  if (text.empty()) return Status::OK();
  ParseOptimizerState(text, &p->optimizer_state);
  if (const std::string why = p->dtype ? OptimizerStateRefusal(*p->dtype, p->optimizer_state) : ""; !why.empty())
    return r.FieldError(root["optimizer_state"], "optimizer_state",
                        fmt::format("{} with inputs.dtype {}: {}", text, DTypeName(*p->dtype), why));
  return Status::OK();
}

// fp8_param_gather (absent: false): an FP8 plan's, sharded (the fp32 master lives in the distributed optimizer or
// FSDP; Megatron-LM asserts one of them).
Status GetFp8ParamGather(const YamlReader& r, const YAML::Node& root, Plan* p) {
  PLANNER_RETURN_IF_ERROR(r.GetBool(root, "fp8_param_gather", "fp8_param_gather", &p->fp8_param_gather, false));
  if (!p->fp8_param_gather) {
    if (const std::string why = OptimizerStateFp8ParamsRefusal(p->optimizer_state, false); !why.empty())
      return r.FieldError(root["optimizer_state"], "optimizer_state",
                          fmt::format("{} without fp8_param_gather: {}; set fp8_param_gather true or optimizer_state "
                                      "bf16",
                                      OptimizerStateName(p->optimizer_state), why));
    return Status::OK();
  }
  if (p->dtype && *p->dtype != DType::kFp8)
    return r.FieldError(root["fp8_param_gather"], "fp8_param_gather",
                        fmt::format("FP8 parameters with inputs.dtype {}: an FP8 plan's only; set it false or plan in "
                                    "fp8",
                                    DTypeName(*p->dtype)));
  if (const std::string why = OptimizerStateFp8ParamsRefusal(p->optimizer_state, true); !why.empty())
    return r.FieldError(root["fp8_param_gather"], "fp8_param_gather",
                        fmt::format("FP8 parameters with optimizer_state {}: {}; set it false or optimizer_state fp32 "
                                    "or bf16-master",
                                    OptimizerStateName(p->optimizer_state), why));
  // Over one data-parallel rank the distributed optimizer shards nothing, and the plan says ZeRO-0.
  if (p->zero_stage == ZeroStage::kNone && p->dp * std::max<int64_t>(1, p->cp) > 1)
    return r.FieldError(root["fp8_param_gather"], "fp8_param_gather",
                        "FP8 parameters with zero_stage 0: the fp32 master weights live in the distributed optimizer "
                        "or FSDP (zero_stage 1 or 3); set it false or shard the optimizer");
  return Status::OK();
}

// dp_comm, dp_servers and vertical_sync, checked against each other and the schedule.
Status GetDpComm(const YamlReader& r, const YAML::Node& root, Plan* p) {
  std::string name;
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "dp_comm", "dp_comm", DpCommNames(), &name, false));
  if (!name.empty() && !ParseDpComm(name, &p->dp_comm))
    return r.FieldError(root["dp_comm"], "dp_comm", "unknown dp_comm " + name);
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "dp_servers", "dp_servers", &p->dp_servers, false, 0));
  if (p->dp_servers > (int64_t{1} << 20)) {
    return r.FieldError(
        root["dp_servers"], "dp_servers",
        fmt::format("{} servers is more than the 1048576 a cluster file may declare; lower it", p->dp_servers));
  }
  std::string placement;
  PLANNER_RETURN_IF_ERROR(
      r.GetEnum(root, "ps_placement", "ps_placement", {"dedicated", "colocated"}, &placement, false));
  p->ps_colocated = placement == "colocated";
  if (p->ps_colocated && p->dp_comm == DpComm::kParameterServer && p->dp_servers > 0) {
    return r.FieldError(
        root["dp_servers"], "dp_servers",
        "a co-located ps runs its servers on the GPU machines; remove dp_servers or set ps_placement: dedicated");
  }
  if (p->dp_comm == DpComm::kParameterServer && p->dp_servers < 1 && !p->ps_colocated) {
    return r.FieldError(root["dp_comm"], "dp_servers",
                        "a parameter server needs dp_servers >= 1; set dp_servers or choose another dp_comm");
  }
  if (!DpCommUsesServers(p->dp_comm) && p->dp_servers > 0) {
    return r.FieldError(root["dp_servers"], "dp_servers",
                        fmt::format("dp_comm {} has no servers; remove dp_servers or set dp_comm ps or byteps",
                                    DpCommName(p->dp_comm)));
  }
  PLANNER_RETURN_IF_ERROR(r.GetBool(root, "vertical_sync", "vertical_sync", &p->vertical_sync, false));
  if (p->vertical_sync && p->schedule != Schedule::kPipeDream) {
    return r.FieldError(
        root["vertical_sync"], "vertical_sync",
        fmt::format(
            "vertical sync is for the asynchronous pipedream schedule, not {}; remove it or set schedule: pipedream",
            ScheduleName(p->schedule)));
  }
  return Status::OK();
}

// One of the schedule / recompute spellings, as the enum; `field` ends in the key.
Status GetSchedule(const YamlReader& r, const YAML::Node& map, const std::string& field, Schedule* out, bool required) {
  std::string name;
  PLANNER_RETURN_IF_ERROR(r.GetEnum(map, field.substr(field.rfind('.') + 1), field, ScheduleNames(), &name, required));
  if (!name.empty() && !ParseSchedule(name, out)) return r.FieldError(map, field, "unknown schedule " + name);
  return Status::OK();
}

Status GetRecompute(const YamlReader& r, const YAML::Node& map, const std::string& field, Recompute* out,
                    bool required) {
  std::string name;
  PLANNER_RETURN_IF_ERROR(r.GetEnum(map, field.substr(field.rfind('.') + 1), field, RecomputeNames(), &name, required));
  if (!name.empty() && !ParseRecompute(name, out)) return r.FieldError(map, field, "unknown recompute " + name);
  return Status::OK();
}

// An optional list of selective recompute modules (default: core_attn alone), as a RecomputeBit mask.
Status GetRecomputeModules(const YamlReader& r, const YAML::Node& map, const std::string& field, uint32_t* out) {
  const YAML::Node node = map[field.substr(field.rfind('.') + 1)];
  if (!node.IsDefined() || node.IsNull()) return Status::OK();
  PLANNER_RETURN_IF_ERROR(r.RequireSequence(node, field));
  uint32_t mask = 0;
  for (size_t i = 0; i < node.size(); ++i) {
    RecomputeModule m;
    const std::string name = node[i].IsScalar() ? node[i].Scalar() : std::string();
    if (!ParseRecomputeModule(name, &m)) {
      return r.FieldError(
          node[i], fmt::format("{}[{}]", field, i),
          fmt::format("unknown recompute module '{}'; choose from {}", name, fmt::join(RecomputeModuleNames(), ", ")));
    }
    mask |= RecomputeBit(m);
  }
  *out = mask;
  return Status::OK();
}

// An optional ZeRO stage, 0 (the default) to 3.
Status GetZeroStage(const YamlReader& r, const YAML::Node& map, const std::string& field, ZeroStage* out) {
  int64_t n = 0;
  PLANNER_RETURN_IF_ERROR(r.GetInt(map, field.substr(field.rfind('.') + 1), field, &n, false, 0));
  if (!ZeroStageFromNumber(n, out)) {
    return r.FieldError(map[field.substr(field.rfind('.') + 1)], field,
                        fmt::format("must be 0, 1, 2 or 3 (the ZeRO stage), got {}", n));
  }
  return Status::OK();
}

}  // namespace

std::string PlanToYaml(const Plan& plan) {
  YAML::Emitter e;
  EmitYaml(PlanTree(plan), e);
  return std::string(e.c_str()) + "\n";
}

std::string PlanToJson(const Plan& plan) {
  std::string o;
  EmitJson(PlanTree(plan), o, 0);
  return o + "\n";
}

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// The keys PlanTree writes, per mapping: anything else is a typo or a field of another file.
const std::vector<std::string> kTopKeys = {"format_version",
                                           "mode",
                                           "inputs",
                                           "config",
                                           "parallel",
                                           "gpus_used",
                                           "tp",
                                           "pp",
                                           "dp",
                                           "cp",
                                           "ep",
                                           "etp",
                                           "sequence_parallel",
                                           "model_parameters",
                                           "model_active_parameters",
                                           "mtp_parameters",
                                           "microbatch_size",
                                           "num_microbatches",
                                           "schedule",
                                           "interleave",
                                           "account_embedding_loss",
                                           "recompute",
                                           "recompute_num_layers",
                                           "recompute_modules",
                                           "zero_stage",
                                           "dp_replicate",
                                           "p2p_overlap",
                                           "grad_dtype",
                                           "optimizer_state",
                                           "fp8_param_gather",
                                           "dp_comm",
                                           "dp_servers",
                                           "ps_placement",
                                           "vertical_sync",
                                           "stages",
                                           "predicted",
                                           "runners_up",
                                           "notes"};
const std::vector<std::string> kInputKeys = {
    "model",           "model_path",        "model_digest",  "cluster",         "cluster_path", "cluster_digest",
    "profile_path",    "profile_digest",    "cost_source",   "dtype",           "seq",          "gpus",
    "global_batch",    "usable_memory_GiB", "engine",        "kernels",         "calibration",  "cp_comm_type",
    "moe_dispatcher",  "moe_overlap",       "moe_imbalance", "tp_comm_overlap", "engine_file",  "fp8_recipe",
    "attention_kernel"};
const std::vector<std::string> kStageKeys = {"first_layer",
                                             "last_layer",
                                             "first_layer_name",
                                             "last_layer_name",
                                             "replicas",
                                             "tp",
                                             "chunk",
                                             "device_offset",
                                             "devices",
                                             "forward_seconds",
                                             "backward_input_seconds",
                                             "backward_weight_seconds",
                                             "tp_comm_seconds",
                                             "ep_comm_seconds",
                                             "p2p_seconds",
                                             "dp_allreduce_seconds",
                                             "in_flight_microbatches",
                                             "weights_GiB",
                                             "optimizer_GiB",
                                             "activations_GiB",
                                             "peak_memory_GiB"};
const std::vector<std::string> kPredictedKeys = {"iteration_seconds",
                                                 "samples_per_second",
                                                 "tflops_per_gpu",
                                                 "mfu",
                                                 "hfu",
                                                 "model_tflops_per_gpu",
                                                 "model_flops_per_iteration",
                                                 "tokens_per_second_per_gpu",
                                                 "bubble_fraction",
                                                 "pipeline_seconds",
                                                 "dp_allreduce_seconds",
                                                 "optimizer_seconds",
                                                 "peak_memory_GiB",
                                                 "peak_reserved_GiB",
                                                 "dp_comm_seconds",
                                                 "communication",
                                                 "band",
                                                 "lead",
                                                 "engines"};
const std::vector<std::string> kRunnerUpKeys = {"config",
                                                "tp",
                                                "pp",
                                                "dp",
                                                "cp",
                                                "ep",
                                                "etp",
                                                "sequence_parallel",
                                                "microbatch_size",
                                                "num_microbatches",
                                                "schedule",
                                                "interleave",
                                                "recompute",
                                                "recompute_num_layers",
                                                "recompute_modules",
                                                "zero_stage",
                                                "dp_replicate",
                                                "iteration_seconds",
                                                "samples_per_second",
                                                "peak_memory_GiB",
                                                "why_lost"};

Status ReadInputs(const YamlReader& r, const YAML::Node& root, Plan* p) {
  const YAML::Node& in = root["inputs"];
  if (!in.IsDefined())
    return r.FieldError(root, "inputs", "missing required field; is this a plan.yaml written by planner solve?");
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(in, "inputs", kInputKeys));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "model", "inputs.model", &p->model_name, true));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "model_path", "inputs.model_path", &p->model_path, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "model_digest", "inputs.model_digest", &p->model_digest, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "cluster", "inputs.cluster", &p->cluster_name, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "cluster_path", "inputs.cluster_path", &p->cluster_path, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "cluster_digest", "inputs.cluster_digest", &p->cluster_digest, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "profile_path", "inputs.profile_path", &p->profile_path, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "profile_digest", "inputs.profile_digest", &p->profile_digest, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "engine", "inputs.engine", &p->engine, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "engine_file", "inputs.engine_file", &p->engine_file, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "kernels", "inputs.kernels", &p->kernels, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "calibration", "inputs.calibration", &p->calibration, false));
  std::string cp_comm = "p2p";
  PLANNER_RETURN_IF_ERROR(r.GetEnum(in, "cp_comm_type", "inputs.cp_comm_type", {"p2p", "allgather"}, &cp_comm, false));
  ParseCpCommType(cp_comm, &p->cp_comm_type);
  std::string dispatcher = "alltoall";
  PLANNER_RETURN_IF_ERROR(
      r.GetEnum(in, "moe_dispatcher", "inputs.moe_dispatcher", {"alltoall", "flex"}, &dispatcher, false));
  ParseMoeDispatcher(dispatcher, &p->moe_dispatcher);
  PLANNER_RETURN_IF_ERROR(r.GetBool(in, "moe_overlap", "inputs.moe_overlap", &p->moe_overlap, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(in, "moe_imbalance", "inputs.moe_imbalance", &p->moe_imbalance, false, 1, false));
  PLANNER_RETURN_IF_ERROR(r.GetBool(in, "tp_comm_overlap", "inputs.tp_comm_overlap", &p->tp_comm_overlap, false));
  PLANNER_RETURN_IF_ERROR(r.GetEnum(in, "fp8_recipe", "inputs.fp8_recipe", Fp8RecipeNames(), &p->fp8_recipe, false));
  PLANNER_RETURN_IF_ERROR(r.GetEnum(in, "attention_kernel", "inputs.attention_kernel", {"fa2", "fa3", "cudnn"},
                                    &p->attention_kernel, false));
  std::string cost_source = "analytic";
  PLANNER_RETURN_IF_ERROR(
      r.GetEnum(in, "cost_source", "inputs.cost_source", {"analytic", "profile"}, &cost_source, false));
  ParseCostSourceKind(cost_source, &p->cost_source);
  std::string dtype;
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "dtype", "inputs.dtype", &dtype, false));
  if (DType d; ParseDType(dtype, &d)) {
    p->dtype = d;
  } else if (!dtype.empty()) {
    return r.FieldError(in["dtype"], "inputs.dtype",
                        fmt::format("unknown precision '{}'; use bf16, fp16, fp8 or fp32", dtype));
  }
  PLANNER_RETURN_IF_ERROR(GetIntInRange(r, in, "seq", "inputs.seq", &p->seq, false, 1, kMaxBatch));
  PLANNER_RETURN_IF_ERROR(GetIntInRange(r, in, "gpus", "inputs.gpus", &p->gpus, true, 1, kMaxRanks));
  PLANNER_RETURN_IF_ERROR(
      GetIntInRange(r, in, "global_batch", "inputs.global_batch", &p->global_batch, true, 1, kMaxBatch));
  double usable = 0;
  PLANNER_RETURN_IF_ERROR(r.GetDouble(in, "usable_memory_GiB", "inputs.usable_memory_GiB", &usable, false, 0, false));
  p->usable_memory_bytes = usable * kGiB;
  return Status::OK();
}

// The configuration: sizes bounded (docs/formats.md "Limits") so that products of them cannot overflow.
Status ReadLayout(const YamlReader& r, const YAML::Node& root, Plan* p) {
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "config", "config", &p->config, true));
  PLANNER_RETURN_IF_ERROR(GetIntInRange(r, root, "gpus_used", "gpus_used", &p->gpus_used, true, 1, kMaxRanks));
  PLANNER_RETURN_IF_ERROR(ReadLayoutSizes(r, root, "", true, p));
  PLANNER_RETURN_IF_ERROR(
      r.GetDouble(root, "model_parameters", "model_parameters", &p->model_parameters, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(root, "model_active_parameters", "model_active_parameters",
                                      &p->model_active_parameters, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(root, "mtp_parameters", "mtp_parameters", &p->mtp_parameters, false, 0, false));
  PLANNER_RETURN_IF_ERROR(GetSchedule(r, root, "schedule", &p->schedule, true));
  PLANNER_RETURN_IF_ERROR(
      GetIntInRange(r, root, "interleave", "interleave", &p->interleave, true, 1, kMaxVirtualStages));
  PLANNER_RETURN_IF_ERROR(GetRecompute(r, root, "recompute", &p->recompute, true));
  PLANNER_RETURN_IF_ERROR(GetIntInRange(r, root, "recompute_num_layers", "recompute_num_layers",
                                        &p->recompute_num_layers, false, 0, kMaxVirtualStages));
  PLANNER_RETURN_IF_ERROR(GetRecomputeModules(r, root, "recompute_modules", &p->recompute_modules));
  PLANNER_RETURN_IF_ERROR(
      r.GetBool(root, "account_embedding_loss", "account_embedding_loss", &p->account_embedding_loss, false));
  PLANNER_RETURN_IF_ERROR(GetZeroStage(r, root, "zero_stage", &p->zero_stage));
  PLANNER_RETURN_IF_ERROR(r.GetBool(root, "p2p_overlap", "p2p_overlap", &p->p2p_overlap, false));
  std::string grad_text;
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "grad_dtype", "grad_dtype", {"fp32", "fp16", "bf16"}, &grad_text, false));
  if (DType grad_dtype; ParseDType(grad_text, &grad_dtype)) p->grad_dtype = grad_dtype;
  if (p->grad_dtype && p->dtype && !GradDTypeAllowed(*p->dtype, *p->grad_dtype)) {
    return r.FieldError(
        root["grad_dtype"], "grad_dtype",
        fmt::format("{} gradients do not go with inputs.dtype {} (fp32, or the weights' 16-bit dtype); use {}",
                    grad_text, DTypeName(*p->dtype), GradDTypeChoices(*p->dtype)));
  }
  PLANNER_RETURN_IF_ERROR(GetOptimizerState(r, root, p));
  PLANNER_RETURN_IF_ERROR(GetFp8ParamGather(r, root, p));
  PLANNER_RETURN_IF_ERROR(GetDpComm(r, root, p));
  std::string parallel;
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "parallel", "parallel", &parallel, false));
  if (!parallel.empty() && parallel != p->ParallelString()) {
    return r.FieldError(root["parallel"], "parallel",
                        fmt::format("'{}' contradicts tp {}, pp {}, dp {} ('{}'); make them agree or solve again",
                                    parallel, p->tp, p->pp, p->dp, p->ParallelString()));
  }
  return Status::OK();
}

Status ReadStage(const YamlReader& r, const YAML::Node& n, const std::string& f, PlanStage* s) {
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(n, f, kStageKeys));
  PLANNER_RETURN_IF_ERROR(
      GetIntInRange(r, n, "first_layer", f + ".first_layer", &s->first_layer, true, 0, kMaxVirtualStages));
  PLANNER_RETURN_IF_ERROR(
      GetIntInRange(r, n, "last_layer", f + ".last_layer", &s->last_layer, true, 0, kMaxVirtualStages));
  if (s->last_layer < s->first_layer)
    return r.FieldError(n["last_layer"], f + ".last_layer",
                        fmt::format("{} is before first_layer {}", s->last_layer, s->first_layer));
  PLANNER_RETURN_IF_ERROR(r.GetString(n, "first_layer_name", f + ".first_layer_name", &s->first_layer_name, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(n, "last_layer_name", f + ".last_layer_name", &s->last_layer_name, false));
  PLANNER_RETURN_IF_ERROR(GetIntInRange(r, n, "replicas", f + ".replicas", &s->replicas, true, 1, kMaxRanks));
  PLANNER_RETURN_IF_ERROR(GetIntInRange(r, n, "tp", f + ".tp", &s->tp, true, 1, kMaxRanks));
  PLANNER_RETURN_IF_ERROR(GetIntInRange(r, n, "chunk", f + ".chunk", &s->chunk, false, 0, kMaxVirtualStages));
  PLANNER_RETURN_IF_ERROR(
      GetIntInRange(r, n, "device_offset", f + ".device_offset", &s->device_offset, false, 0, kMaxRanks));
  PLANNER_RETURN_IF_ERROR(r.GetIntList(n, "devices", f + ".devices", &s->devices, false, 0));
  for (size_t k = 0; k < s->devices.size(); ++k) {
    if (s->devices[k] >= kMaxRanks)
      return r.FieldError(n["devices"][k], fmt::format("{}.devices[{}]", f, k),
                          fmt::format("must be below {}, got {}", kMaxRanks, s->devices[k]));
  }
  for (auto [key, out, required] : {std::tuple{"forward_seconds", &s->forward_s, true},
                                    {"backward_input_seconds", &s->backward_input_s, true},
                                    {"backward_weight_seconds", &s->backward_weight_s, true},
                                    {"tp_comm_seconds", &s->tp_comm_s, false},
                                    {"ep_comm_seconds", &s->ep_comm_s, false},
                                    {"p2p_seconds", &s->p2p_s, false},
                                    {"dp_allreduce_seconds", &s->dp_allreduce_s, false}}) {
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, key, f + "." + key, out, required, 0, false));
    if (*out > kMaxStageSeconds)
      return r.FieldError(n[key], f + "." + key,
                          fmt::format("{} s is not a stage time (at most {:g} s); regenerate the plan with planner "
                                      "solve",
                                      *out, kMaxStageSeconds));
  }
  PLANNER_RETURN_IF_ERROR(
      GetIntInRange(r, n, "in_flight_microbatches", f + ".in_flight_microbatches", &s->in_flight, false, 0, kMaxBatch));
  for (auto [key, out] : {std::pair{"weights_GiB", &s->weights_bytes},
                          {"optimizer_GiB", &s->optimizer_bytes},
                          {"activations_GiB", &s->activations_bytes},
                          {"peak_memory_GiB", &s->peak_memory_bytes}}) {
    double gib = 0;
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, key, f + "." + key, &gib, false, 0, false));
    *out = gib * kGiB;
  }
  return Status::OK();
}

Status ReadStages(const YamlReader& r, const YAML::Node& root, Plan* p) {
  const YAML::Node& stages = root["stages"];
  if (!stages.IsDefined()) return r.FieldError(root, "stages", "missing required field");
  PLANNER_RETURN_IF_ERROR(r.RequireSequence(stages, "stages"));
  if (stages.size() == 0) return r.FieldError(stages, "stages", "a plan has at least one stage");
  if (static_cast<int64_t>(stages.size()) > kMaxVirtualStages) {
    return r.FieldError(stages, "stages",
                        fmt::format("{} stages is more than {} (one per layer of the largest model)", stages.size(),
                                    kMaxVirtualStages));
  }
  for (size_t i = 0; i < stages.size(); ++i) {
    PlanStage s;
    PLANNER_RETURN_IF_ERROR(ReadStage(r, stages[i], fmt::format("stages[{}]", i), &s));
    p->stages.push_back(std::move(s));
  }
  return Status::OK();
}

// A band written by BandTree at `f` (absent: *out unchanged); the derived ranges are written for readers of the file
// and recomputed from the errors here.
Status ReadBand(const YamlReader& r, const YAML::Node& b, const std::string& f, std::optional<PlanBand>* out) {
  if (!b.IsDefined()) return Status::OK();
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(
      b, f,
      {"basis", "runs", "checks", "error_low", "error_high", "iteration_seconds_low", "iteration_seconds_high",
       "tokens_per_second_per_gpu_low", "tokens_per_second_per_gpu_high", "mfu_low", "mfu_high"}));
  PlanBand band;
  PLANNER_RETURN_IF_ERROR(r.GetString(b, "basis", f + ".basis", &band.basis, true));
  PLANNER_RETURN_IF_ERROR(r.GetInt(b, "runs", f + ".runs", &band.runs, true, 0));
  PLANNER_RETURN_IF_ERROR(r.GetInt(b, "checks", f + ".checks", &band.checks, false, 0));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(b, "error_low", f + ".error_low", &band.error_low, true, -1, true));
  PLANNER_RETURN_IF_ERROR(
      r.GetDouble(b, "error_high", f + ".error_high", &band.error_high, true, band.error_low, false));
  *out = band;
  return Status::OK();
}

// predicted.communication, predicted.band and predicted.lead (optional): the stored figures.
Status ReadPredictedSections(const YamlReader& r, const YAML::Node& pr, PlanPredicted* out) {
  const YAML::Node& cm = pr["communication"];
  if (cm.IsDefined()) {
    const std::vector<std::string> kinds = {"tensor_parallel", "context_parallel", "expert_all_to_all", "pipeline_p2p",
                                            "data_parallel"};
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(cm, "predicted.communication", kinds));
    for (const std::string& k : kinds) {
      if (!cm[k].IsDefined()) continue;
      const std::string f = "predicted.communication." + k;
      PLANNER_RETURN_IF_ERROR(r.CheckKeys(cm[k], f, {"total_seconds", "exposed_seconds"}));
      PlanComm c;
      c.kind = k;
      PLANNER_RETURN_IF_ERROR(r.GetDouble(cm[k], "total_seconds", f + ".total_seconds", &c.total_s, true, 0, false));
      PLANNER_RETURN_IF_ERROR(
          r.GetDouble(cm[k], "exposed_seconds", f + ".exposed_seconds", &c.exposed_s, true, 0, false));
      out->communication.push_back(c);
    }
  }
  PLANNER_RETURN_IF_ERROR(ReadBand(r, pr["band"], "predicted.band", &out->band));
  const YAML::Node& l = pr["lead"];
  if (l.IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(l, "predicted.lead",
                                        {"runner_up_iteration_seconds", "chosen_no_overlap_seconds",
                                         "runner_up_no_overlap_seconds", "overlap_share", "runners_up_within_band"}));
    PlanLead lead;
    for (auto [key, v] : {std::pair{"runner_up_iteration_seconds", &lead.runner_up_s},
                          {"chosen_no_overlap_seconds", &lead.chosen_no_overlap_s},
                          {"runner_up_no_overlap_seconds", &lead.runner_up_no_overlap_s}}) {
      PLANNER_RETURN_IF_ERROR(r.GetDouble(l, key, std::string("predicted.lead.") + key, v, true, 0, false));
    }
    PLANNER_RETURN_IF_ERROR(r.GetInt(l, "runners_up_within_band", "predicted.lead.runners_up_within_band",
                                     &lead.runners_up_within_band, false, 0));
    out->lead = lead;
  }
  const YAML::Node& en = pr["engines"];
  if (en.IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.RequireMap(en, "predicted.engines"));
    for (const auto& kv : en) {
      PlanEngine e;
      e.engine = kv.first.as<std::string>();
      const std::string f = "predicted.engines." + e.engine;
      PLANNER_RETURN_IF_ERROR(r.RequireMap(kv.second, f));
      PLANNER_RETURN_IF_ERROR(r.CheckKeys(
          kv.second, f, {"error", "iteration_seconds", "tokens_per_second_per_gpu", "mfu", "peak_memory_GiB", "band"}));
      PLANNER_RETURN_IF_ERROR(r.GetString(kv.second, "error", f + ".error", &e.error, false));
      const bool runs = e.error.empty();
      PLANNER_RETURN_IF_ERROR(
          r.GetDouble(kv.second, "iteration_seconds", f + ".iteration_seconds", &e.iteration_s, runs, 0, true));
      PLANNER_RETURN_IF_ERROR(r.GetDouble(kv.second, "tokens_per_second_per_gpu", f + ".tokens_per_second_per_gpu",
                                          &e.tokens_per_second_per_gpu, false, 0, false));
      PLANNER_RETURN_IF_ERROR(r.GetDouble(kv.second, "mfu", f + ".mfu", &e.mfu, false, 0, false));
      PLANNER_RETURN_IF_ERROR(
          r.GetDouble(kv.second, "peak_memory_GiB", f + ".peak_memory_GiB", &e.peak_memory_bytes, false, 0, false));
      e.peak_memory_bytes *= kGiB;
      PLANNER_RETURN_IF_ERROR(ReadBand(r, kv.second["band"], f + ".band", &e.band));
      out->engines.push_back(std::move(e));
    }
  }
  return Status::OK();
}

Status ReadPredicted(const YamlReader& r, const YAML::Node& root, PlanPredicted* out) {
  const YAML::Node& pr = root["predicted"];
  if (!pr.IsDefined()) return r.FieldError(root, "predicted", "missing required field");
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(pr, "predicted", kPredictedKeys));
  PLANNER_RETURN_IF_ERROR(
      r.GetDouble(pr, "iteration_seconds", "predicted.iteration_seconds", &out->iteration_s, true, 0, false));
  for (auto [key, v] : {std::pair{"samples_per_second", &out->samples_per_second},
                        {"tflops_per_gpu", &out->tflops_per_gpu},
                        {"mfu", &out->mfu},
                        {"hfu", &out->hfu},
                        {"model_tflops_per_gpu", &out->model_tflops_per_gpu},
                        {"model_flops_per_iteration", &out->model_flops_per_iteration},
                        {"tokens_per_second_per_gpu", &out->tokens_per_second_per_gpu},
                        {"bubble_fraction", &out->bubble_fraction},
                        {"pipeline_seconds", &out->pipeline_s},
                        {"dp_allreduce_seconds", &out->dp_allreduce_s},
                        {"optimizer_seconds", &out->optimizer_s}}) {
    PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, key, std::string("predicted.") + key, v, false, 0, false));
  }
  double gib = 0;
  PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, "peak_memory_GiB", "predicted.peak_memory_GiB", &gib, false, 0, false));
  out->peak_memory_bytes = gib * kGiB;
  gib = 0;
  PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, "peak_reserved_GiB", "predicted.peak_reserved_GiB", &gib, false, 0, false));
  out->peak_reserved_bytes = gib * kGiB;
  if (pr["dp_comm_seconds"].IsDefined()) {
    const YAML::Node& dc = pr["dp_comm_seconds"];
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(dc, "predicted.dp_comm_seconds", DpCommNames()));
    for (const std::string& name : DpCommNames()) {
      if (!dc[name].IsDefined()) continue;
      double seconds = 0;
      PLANNER_RETURN_IF_ERROR(r.GetDouble(dc, name, "predicted.dp_comm_seconds." + name, &seconds, true, 0, false));
      out->dp_comm_seconds.emplace_back(name, seconds);
    }
  }
  return ReadPredictedSections(r, pr, out);
}

Status ReadRunnerUp(const YamlReader& r, const YAML::Node& n, const std::string& f, PlanSummary* s) {
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(n, f, kRunnerUpKeys));
  PLANNER_RETURN_IF_ERROR(r.GetString(n, "config", f + ".config", &s->config, false));
  PLANNER_RETURN_IF_ERROR(ReadLayoutSizes(r, n, f + ".", false, s));
  PLANNER_RETURN_IF_ERROR(GetSchedule(r, n, f + ".schedule", &s->schedule, false));
  PLANNER_RETURN_IF_ERROR(
      GetIntInRange(r, n, "interleave", f + ".interleave", &s->interleave, false, 1, kMaxVirtualStages));
  PLANNER_RETURN_IF_ERROR(GetRecompute(r, n, f + ".recompute", &s->recompute, false));
  PLANNER_RETURN_IF_ERROR(GetIntInRange(r, n, "recompute_num_layers", f + ".recompute_num_layers",
                                        &s->recompute_num_layers, false, 0, kMaxVirtualStages));
  PLANNER_RETURN_IF_ERROR(GetRecomputeModules(r, n, f + ".recompute_modules", &s->recompute_modules));
  PLANNER_RETURN_IF_ERROR(
      r.GetDouble(n, "iteration_seconds", f + ".iteration_seconds", &s->iteration_s, false, 0, false));
  PLANNER_RETURN_IF_ERROR(
      r.GetDouble(n, "samples_per_second", f + ".samples_per_second", &s->samples_per_second, false, 0, false));
  PLANNER_RETURN_IF_ERROR(GetZeroStage(r, n, f + ".zero_stage", &s->zero_stage));
  double gib = 0;
  PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "peak_memory_GiB", f + ".peak_memory_GiB", &gib, false, 0, false));
  s->peak_memory_bytes = gib * kGiB;
  return r.GetString(n, "why_lost", f + ".why_lost", &s->why_lost, false);
}

Status ReadRunnersUp(const YamlReader& r, const YAML::Node& root, Plan* p) {
  const YAML::Node& ru = root["runners_up"];
  const bool listed = ru.IsDefined() && !ru.IsNull();  // (an undefined node throws on any other question)
  if (listed) PLANNER_RETURN_IF_ERROR(r.RequireSequence(ru, "runners_up"));
  for (size_t i = 0; listed && i < ru.size(); ++i) {
    PlanSummary s;
    PLANNER_RETURN_IF_ERROR(ReadRunnerUp(r, ru[i], fmt::format("runners_up[{}]", i), &s));
    p->runners_up.push_back(std::move(s));
  }
  const YAML::Node& notes = root["notes"];
  if (notes.IsDefined() && !notes.IsNull()) {
    PLANNER_RETURN_IF_ERROR(r.RequireSequence(notes, "notes"));
    for (size_t i = 0; i < notes.size(); ++i) {
      if (!notes[i].IsScalar()) return r.FieldError(notes[i], fmt::format("notes[{}]", i), "must be a string");
      p->notes.push_back(notes[i].Scalar());
    }
  }
  // A plan written before inputs.moe_overlap says the EP overlap only in its solve note ("... all-to-all overlapped
  // with the layer's compute ..."): read as the input, so codegen and planner calibrate see one flag.
  if (!p->moe_overlap)
    p->moe_overlap = std::any_of(p->notes.begin(), p->notes.end(), [](const std::string& n) {
      return n.find("all-to-all overlapped") != std::string::npos;
    });
  return Status::OK();
}

// Per-stage replication ("2-1-1", pipedream): ranks are the stages' replicas x tp, placed by their
// devices (or device_offset); each GPU of gpus_used holds one.
Status CheckReplicatedStages(const YamlReader& r, const YAML::Node& root, const Plan& p) {
  if (p.interleave != 1 || p.cp != 1 || p.ep != 1) {
    return r.FieldError(
        root["config"], "config",
        fmt::format(
            "per-stage replication (config {}) runs with interleave, cp and ep 1, not {}, {} and {}; solve again",
            p.config, p.interleave, p.cp, p.ep));
  }
  if (p.global_batch % p.microbatch_size != 0) {
    return r.FieldError(
        root["microbatch_size"], "microbatch_size",
        fmt::format("{} does not divide inputs.global_batch {}; make it a divisor", p.microbatch_size, p.global_batch));
  }
  std::vector<bool> used(static_cast<size_t>(p.gpus_used), false);
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const PlanStage& s = p.stages[i];
    const YAML::Node n = root["stages"][i];
    const std::string f = fmt::format("stages[{}]", i);
    const int64_t width = s.replicas * s.tp;  // each <= kMaxRanks: no overflow
    const bool listed = static_cast<int64_t>(s.devices.size()) == width;
    for (int64_t k = 0; k < width; ++k) {
      const int64_t d = listed ? s.devices[static_cast<size_t>(k)] : s.device_offset + k;
      if (d >= p.gpus_used)
        return r.FieldError(
            n, f + ".devices",
            fmt::format("device {} is outside gpus_used {} (0..{}); fix devices / device_offset or solve again", d,
                        p.gpus_used, p.gpus_used - 1));
      if (used[static_cast<size_t>(d)])
        return r.FieldError(
            n, f + ".devices",
            fmt::format("device {} is already used by an earlier stage; every device holds one stage replica", d));
      used[static_cast<size_t>(d)] = true;
    }
  }
  for (size_t d = 0; d < used.size(); ++d) {
    if (!used[d])
      return r.FieldError(
          root["gpus_used"], "gpus_used",
          fmt::format(
              "{} GPUs but no stage replica is on device {}; the stages' replicas x tp must add up to gpus_used",
              p.gpus_used, d));
  }
  return Status::OK();
}

// Uniform plans: pp x interleave stages, tp x cp x dp x pp GPUs, the batch split into dp x microbatches.
Status CheckUniformStages(const YamlReader& r, const YAML::Node& root, const Plan& p) {
  int64_t stages = 0, gpus = 0, batch = 0;
  if (!CheckedProduct({p.pp, p.interleave}, &stages) || stages != static_cast<int64_t>(p.stages.size())) {
    return r.FieldError(
        root["stages"], "stages",
        fmt::format(
            "{} stages, but pp {} x interleave {} virtual stages are needed; fix pp / interleave or solve again",
            p.stages.size(), p.pp, p.interleave));
  }
  if (!CheckedProduct({p.tp, p.cp, p.dp, p.pp}, &gpus) || gpus != p.gpus_used) {
    return r.FieldError(root["gpus_used"], "gpus_used",
                        fmt::format("{} contradicts tp {} x cp {} x dp {} x pp {}; make them agree or solve again",
                                    p.gpus_used, p.tp, p.cp, p.dp, p.pp));
  }
  if (!CheckedProduct({p.microbatch_size, p.num_microbatches, p.dp}, &batch) || batch != p.global_batch) {
    return r.FieldError(
        root["num_microbatches"], "num_microbatches",
        fmt::format(
            "microbatch_size {} x num_microbatches {} x dp {} must be inputs.global_batch {}; fix them or solve again",
            p.microbatch_size, p.num_microbatches, p.dp, p.global_batch));
  }
  if ((p.tp * p.cp * p.dp) % (p.ep * p.etp) != 0) {  // each at most 2^20, and tp x cp x dp <= gpus_used: no overflow
    return r.FieldError(
        root["ep"], "ep",
        fmt::format("ep {} x etp {} must divide tp x cp x dp = {} (MoE parallel folding); fix ep / etp or solve again",
                    p.ep, p.etp, p.tp * p.cp * p.dp));
  }
  for (size_t i = 0; i < p.stages.size(); ++i) {
    if (p.stages[i].chunk >= p.interleave) {
      return r.FieldError(root["stages"][i]["chunk"], fmt::format("stages[{}].chunk", i),
                          fmt::format("{} is not below interleave {}", p.stages[i].chunk, p.interleave));
    }
  }
  return Status::OK();
}

// The plan against itself (the model is checked by codegen): sizes that multiply to gpus_used,
// stages that follow each other layer by layer, a batch that splits.
Status CheckPlanConsistency(const YamlReader& r, const YAML::Node& root, const Plan& p) {
  if (p.gpus_used > p.gpus) {
    return r.FieldError(root["gpus_used"], "gpus_used",
                        fmt::format("{} is more than inputs.gpus {}; solve again", p.gpus_used, p.gpus));
  }
  std::string chunks;  // what the schedule runs per device, when interleave says otherwise
  if (p.schedule == Schedule::kDualPipeV && p.interleave != 2)
    chunks = "2 chunks per device (its V): interleave must be 2";
  if (p.schedule == Schedule::kInterleaved && p.interleave < 2)
    chunks = "at least 2 chunks per device: interleave must be 2 or more";
  if (p.schedule != Schedule::kDualPipeV && p.schedule != Schedule::kInterleaved && p.interleave != 1)
    chunks = "one chunk per device: interleave must be 1";
  if (!chunks.empty()) {
    return r.FieldError(root["interleave"], "interleave",
                        fmt::format("schedule {} runs {}, got {}; fix interleave or the schedule",
                                    ScheduleName(p.schedule), chunks, p.interleave));
  }
  bool uniform = p.schedule != Schedule::kPipeDream;
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const PlanStage& s = p.stages[i];
    const YAML::Node n = root["stages"][i];
    const std::string f = fmt::format("stages[{}]", i);
    if (s.tp != p.tp)
      return r.FieldError(n["tp"], f + ".tp",
                          fmt::format("{} contradicts the plan's tp {}; make them agree", s.tp, p.tp));
    const int64_t expected = i == 0 ? 0 : p.stages[i - 1].last_layer + 1;
    if (s.first_layer != expected) {
      return r.FieldError(n["first_layer"], f + ".first_layer",
                          fmt::format("{} leaves a gap or overlaps: stages cover the layers in order, so it must be {}",
                                      s.first_layer, expected));
    }
    uniform = uniform && s.replicas == p.dp;
  }
  return uniform ? CheckUniformStages(r, root, p) : CheckReplicatedStages(r, root, p);
}

Status ParsePlanTree(const std::string& path, const YAML::Node& root, Plan* out) {
  YamlReader r(path);
  PLANNER_RETURN_IF_ERROR(r.RequireMap(root, "(top level)"));
  if (!root["format_version"].IsDefined() && !root["inputs"].IsDefined() && !root["stages"].IsDefined()) {
    return Status::InvalidArgument(fmt::format(
        "{}: not a plan (no format_version, inputs or stages); give a plan.yaml written by planner solve", path));
  }
  PLANNER_RETURN_IF_ERROR(r.CheckFormatVersion(root, true));
  if (!root["inputs"].IsDefined() && !root["stages"].IsDefined()) {
    return Status::InvalidArgument(
        fmt::format("{}: not a plan (no inputs and no stages: a model, cluster or launch file?); give a plan.yaml "
                    "written by planner solve",
                    path));
  }
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(root, "", kTopKeys));
  Plan p;
  std::string mode;
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "mode", "mode", {"auto", "pipedream"}, &mode, true));
  ParsePlanMode(mode, &p.mode);
  PLANNER_RETURN_IF_ERROR(ReadInputs(r, root, &p));
  PLANNER_RETURN_IF_ERROR(ReadLayout(r, root, &p));
  PLANNER_RETURN_IF_ERROR(ReadStages(r, root, &p));
  PLANNER_RETURN_IF_ERROR(ReadPredicted(r, root, &p.predicted));
  PLANNER_RETURN_IF_ERROR(ReadRunnersUp(r, root, &p));
  PLANNER_RETURN_IF_ERROR(CheckPlanConsistency(r, root, p));
  *out = std::move(p);
  return Status::OK();
}

}  // namespace

Status ParsePlan(const std::string& path, const std::string& text, Plan* out) {
  YAML::Node root;
  PLANNER_RETURN_IF_ERROR(ParseYamlText(path, text, &root));
  return CatchYamlErrors(path, [&] { return ParsePlanTree(path, root, out); });
}

Status LoadPlan(const std::string& path, Plan* out) {
  std::string text;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(path, &text, kMaxConfigFileBytes));
  return ParsePlan(path, text, out);
}

}  // namespace planner
