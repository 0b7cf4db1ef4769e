#include "spec/plan.h"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "spec/yaml_reader.h"

namespace planner {

std::string Plan::ParallelString() const { return fmt::format("{}-{}-{}", tp, pp, dp); }

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

  static Tree Str(std::string v) { Tree t; t.kind = kString; t.s = std::move(v); return t; }
  static Tree Num(double v) { Tree t; t.kind = kNumber; t.d = v; return t; }
  static Tree Int(int64_t v) { Tree t; t.kind = kInt; t.i = v; return t; }
  static Tree Bool(bool v) { Tree t; t.kind = kBool; t.i = v ? 1 : 0; return t; }
  static Tree List() { Tree t; t.kind = kList; return t; }
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
    if (c == '"' || c == '\\') { o += '\\'; o += static_cast<char>(c); }
    else if (c == '\n') o += "\\n";
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
      if (t.list.empty()) { o += "[]"; break; }
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

Tree SummaryTree(const PlanSummary& s) {
  Tree t;
  t.Add("config", Tree::Str(s.config));
  t.Add("tp", Tree::Int(s.tp));
  t.Add("pp", Tree::Int(s.pp));
  t.Add("dp", Tree::Int(s.dp));
  t.Add("cp", Tree::Int(s.cp));
  t.Add("ep", Tree::Int(s.ep));
  t.Add("etp", Tree::Int(s.etp));
  t.Add("sequence_parallel", Tree::Bool(s.sequence_parallel));
  t.Add("microbatch_size", Tree::Int(s.microbatch_size));
  t.Add("num_microbatches", Tree::Int(s.num_microbatches));
  t.Add("schedule", Tree::Str(ScheduleName(s.schedule)));
  t.Add("interleave", Tree::Int(s.interleave));
  t.Add("recompute", Tree::Str(RecomputeName(s.recompute)));
  if (s.recompute_num_layers > 0) t.Add("recompute_num_layers", Tree::Int(s.recompute_num_layers));
  if (s.recompute == Recompute::kSelective) t.Add("recompute_modules", ModulesTree(s.recompute_modules));
  t.Add("zero_stage", Tree::Int(ZeroStageNumber(s.zero_stage)));
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
  t.Add("mode", Tree::Str(p.mode));
  Tree& in = t.Add("inputs", Tree());
  in.Add("model", Tree::Str(p.model_name));
  in.Add("model_path", Tree::Str(p.model_path));
  in.Add("model_digest", Tree::Str(p.model_digest));
  in.Add("cluster", Tree::Str(p.cluster_name));
  in.Add("cluster_path", Tree::Str(p.cluster_path));
  in.Add("cluster_digest", Tree::Str(p.cluster_digest));
  in.Add("profile_path", Tree::Str(p.profile_path));
  in.Add("profile_digest", Tree::Str(p.profile_digest));
  in.Add("cost_source", Tree::Str(p.cost_source));
  in.Add("dtype", Tree::Str(p.dtype));
  if (p.seq > 0) in.Add("seq", Tree::Int(p.seq));
  in.Add("gpus", Tree::Int(p.gpus));
  in.Add("global_batch", Tree::Int(p.global_batch));
  in.Add("usable_memory_GiB", Tree::Num(p.usable_memory_bytes / kGiB));
  t.Add("config", Tree::Str(p.config));
  t.Add("parallel", Tree::Str(p.ParallelString()));
  t.Add("gpus_used", Tree::Int(p.gpus_used));
  t.Add("tp", Tree::Int(p.tp));
  t.Add("pp", Tree::Int(p.pp));
  t.Add("dp", Tree::Int(p.dp));
  t.Add("cp", Tree::Int(p.cp));
  t.Add("ep", Tree::Int(p.ep));
  t.Add("etp", Tree::Int(p.etp));
  t.Add("sequence_parallel", Tree::Bool(p.sequence_parallel));
  t.Add("model_parameters", Tree::Num(p.model_parameters));
  t.Add("model_active_parameters", Tree::Num(p.model_active_parameters));
  if (p.mtp_parameters > 0) t.Add("mtp_parameters", Tree::Num(p.mtp_parameters));
  t.Add("microbatch_size", Tree::Int(p.microbatch_size));
  t.Add("num_microbatches", Tree::Int(p.num_microbatches));
  t.Add("schedule", Tree::Str(ScheduleName(p.schedule)));
  t.Add("interleave", Tree::Int(p.interleave));
  if (p.account_embedding_loss) t.Add("account_embedding_loss", Tree::Bool(true));
  t.Add("recompute", Tree::Str(RecomputeName(p.recompute)));
  if (p.recompute_num_layers > 0) t.Add("recompute_num_layers", Tree::Int(p.recompute_num_layers));
  if (p.recompute == Recompute::kSelective) t.Add("recompute_modules", ModulesTree(p.recompute_modules));
  t.Add("zero_stage", Tree::Int(ZeroStageNumber(p.zero_stage)));
  t.Add("p2p_overlap", Tree::Bool(p.p2p_overlap));
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
  if (!p.predicted.dp_comm_seconds.empty()) {
    Tree& dc = pr.Add("dp_comm_seconds", Tree());
    for (const auto& [name, seconds] : p.predicted.dp_comm_seconds) dc.Add(name, Tree::Num(seconds));
  }
  Tree ru = Tree::List();
  for (const auto& s : p.runners_up) ru.list.push_back(SummaryTree(s));
  t.Add("runners_up", ru);
  Tree notes = Tree::List();
  for (const auto& n : p.notes) notes.list.push_back(Tree::Str(n));
  t.Add("notes", notes);
  return t;
}

// dp_comm, dp_servers and vertical_sync, checked against each other and the schedule.
Status GetDpComm(const YamlReader& r, const YAML::Node& root, Plan* p) {
  std::string name;
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "dp_comm", "dp_comm", DpCommNames(), &name, false));
  if (!name.empty() && !ParseDpComm(name, &p->dp_comm)) return r.FieldError(root["dp_comm"], "dp_comm", "unknown dp_comm " + name);
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "dp_servers", "dp_servers", &p->dp_servers, false, 0));
  if (p->dp_servers > (int64_t{1} << 20)) {
    return r.FieldError(root["dp_servers"], "dp_servers", fmt::format("{} servers is more than the 1048576 a cluster file may declare; lower it", p->dp_servers));
  }
  std::string placement;
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "ps_placement", "ps_placement", {"dedicated", "colocated"}, &placement, false));
  p->ps_colocated = placement == "colocated";
  if (p->ps_colocated && p->dp_comm == DpComm::kParameterServer && p->dp_servers > 0) {
    return r.FieldError(root["dp_servers"], "dp_servers", "a co-located ps runs its servers on the GPU machines; remove dp_servers or set ps_placement: dedicated");
  }
  if (p->dp_comm == DpComm::kParameterServer && p->dp_servers < 1 && !p->ps_colocated) {
    return r.FieldError(root["dp_comm"], "dp_servers", "a parameter server needs dp_servers >= 1; set dp_servers or choose another dp_comm");
  }
  if (!DpCommUsesServers(p->dp_comm) && p->dp_servers > 0) {
    return r.FieldError(root["dp_servers"], "dp_servers", fmt::format("dp_comm {} has no servers; remove dp_servers or set dp_comm ps or byteps", DpCommName(p->dp_comm)));
  }
  PLANNER_RETURN_IF_ERROR(r.GetBool(root, "vertical_sync", "vertical_sync", &p->vertical_sync, false));
  if (p->vertical_sync && p->schedule != Schedule::kPipeDream) {
    return r.FieldError(root["vertical_sync"], "vertical_sync",
                        fmt::format("vertical sync is for the asynchronous pipedream schedule, not {}; remove it or set schedule: pipedream", ScheduleName(p->schedule)));
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

Status GetRecompute(const YamlReader& r, const YAML::Node& map, const std::string& field, Recompute* out, bool required) {
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
      return r.FieldError(node[i], fmt::format("{}[{}]", field, i), fmt::format("unknown recompute module '{}'; choose from {}", name, fmt::join(RecomputeModuleNames(), ", ")));
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
    return r.FieldError(map[field.substr(field.rfind('.') + 1)], field, fmt::format("must be 0, 1, 2 or 3 (the ZeRO stage), got {}", n));
  }
  return Status::OK();
}

}  // namespace

std::string RecomputeLabel(Recompute r, int64_t num_layers) {
  if (r == Recompute::kFull && num_layers > 0) return "full:" + std::to_string(num_layers);
  return RecomputeName(r);
}

std::string RecomputeLabel(Recompute r, int64_t num_layers, uint32_t modules) {
  if (r != Recompute::kSelective || modules == kDefaultRecomputeModules) return RecomputeLabel(r, num_layers);
  return fmt::format("selective:{}", fmt::join(RecomputeModuleList(modules), "+"));
}

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

Status ParsePlan(const std::string& path, const std::string& text, Plan* out) {
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  YAML::Node root;
  PLANNER_RETURN_IF_ERROR(ParseYamlText(path, text, &root));
  YamlReader r(path);
  PLANNER_RETURN_IF_ERROR(r.RequireMap(root, "(top level)"));
  int64_t version = 0;
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "format_version", "format_version", &version, true, 1));
  if (version != 1) return r.FieldError(root["format_version"], "format_version", fmt::format("version {} is not supported; this planner reads version 1", version));
  Plan p;
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "mode", "mode", &p.mode, true));
  const YAML::Node& in = root["inputs"];
  if (!in.IsDefined()) return r.FieldError(root, "inputs", "missing required field; is this a plan.yaml written by planner solve?");
  PLANNER_RETURN_IF_ERROR(r.RequireMap(in, "inputs"));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "model", "inputs.model", &p.model_name, true));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "model_path", "inputs.model_path", &p.model_path, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "model_digest", "inputs.model_digest", &p.model_digest, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "cluster", "inputs.cluster", &p.cluster_name, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "cluster_path", "inputs.cluster_path", &p.cluster_path, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "cluster_digest", "inputs.cluster_digest", &p.cluster_digest, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "profile_path", "inputs.profile_path", &p.profile_path, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "profile_digest", "inputs.profile_digest", &p.profile_digest, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "cost_source", "inputs.cost_source", &p.cost_source, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(in, "dtype", "inputs.dtype", &p.dtype, false));
  PLANNER_RETURN_IF_ERROR(r.GetInt(in, "seq", "inputs.seq", &p.seq, false, 1));
  PLANNER_RETURN_IF_ERROR(r.GetInt(in, "gpus", "inputs.gpus", &p.gpus, true, 1));
  PLANNER_RETURN_IF_ERROR(r.GetInt(in, "global_batch", "inputs.global_batch", &p.global_batch, true, 1));
  double usable = 0;
  PLANNER_RETURN_IF_ERROR(r.GetDouble(in, "usable_memory_GiB", "inputs.usable_memory_GiB", &usable, false, 0, false));
  p.usable_memory_bytes = usable * kGiB;
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "config", "config", &p.config, true));
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "gpus_used", "gpus_used", &p.gpus_used, true, 1));
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "tp", "tp", &p.tp, true, 1));
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "pp", "pp", &p.pp, true, 1));
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "dp", "dp", &p.dp, true, 1));
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "cp", "cp", &p.cp, false, 1));
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "ep", "ep", &p.ep, false, 1));
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "etp", "etp", &p.etp, false, 1));
  PLANNER_RETURN_IF_ERROR(r.GetBool(root, "sequence_parallel", "sequence_parallel", &p.sequence_parallel, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(root, "model_parameters", "model_parameters", &p.model_parameters, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(root, "model_active_parameters", "model_active_parameters", &p.model_active_parameters, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(root, "mtp_parameters", "mtp_parameters", &p.mtp_parameters, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "microbatch_size", "microbatch_size", &p.microbatch_size, true, 1));
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "num_microbatches", "num_microbatches", &p.num_microbatches, true, 1));
  PLANNER_RETURN_IF_ERROR(GetSchedule(r, root, "schedule", &p.schedule, true));
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "interleave", "interleave", &p.interleave, true, 1));
  PLANNER_RETURN_IF_ERROR(GetRecompute(r, root, "recompute", &p.recompute, true));
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "recompute_num_layers", "recompute_num_layers", &p.recompute_num_layers, false, 0));
  PLANNER_RETURN_IF_ERROR(GetRecomputeModules(r, root, "recompute_modules", &p.recompute_modules));
  PLANNER_RETURN_IF_ERROR(r.GetBool(root, "account_embedding_loss", "account_embedding_loss", &p.account_embedding_loss, false));
  PLANNER_RETURN_IF_ERROR(GetZeroStage(r, root, "zero_stage", &p.zero_stage));
  PLANNER_RETURN_IF_ERROR(r.GetBool(root, "p2p_overlap", "p2p_overlap", &p.p2p_overlap, false));
  PLANNER_RETURN_IF_ERROR(GetDpComm(r, root, &p));
  const YAML::Node& stages = root["stages"];
  if (!stages.IsDefined()) return r.FieldError(root, "stages", "missing required field");
  PLANNER_RETURN_IF_ERROR(r.RequireSequence(stages, "stages"));
  if (stages.size() == 0) return r.FieldError(stages, "stages", "a plan has at least one stage");
  for (size_t i = 0; i < stages.size(); ++i) {
    std::string f = fmt::format("stages[{}]", i);
    const YAML::Node& n = stages[i];
    PLANNER_RETURN_IF_ERROR(r.RequireMap(n, f));
    PlanStage s;
    double gib = 0;
    PLANNER_RETURN_IF_ERROR(r.GetInt(n, "first_layer", f + ".first_layer", &s.first_layer, true, 0));
    PLANNER_RETURN_IF_ERROR(r.GetInt(n, "last_layer", f + ".last_layer", &s.last_layer, true, 0));
    if (s.last_layer < s.first_layer) return r.FieldError(n, f + ".last_layer", "must not be before first_layer");
    PLANNER_RETURN_IF_ERROR(r.GetString(n, "first_layer_name", f + ".first_layer_name", &s.first_layer_name, false));
    PLANNER_RETURN_IF_ERROR(r.GetString(n, "last_layer_name", f + ".last_layer_name", &s.last_layer_name, false));
    PLANNER_RETURN_IF_ERROR(r.GetInt(n, "replicas", f + ".replicas", &s.replicas, true, 1));
    PLANNER_RETURN_IF_ERROR(r.GetInt(n, "tp", f + ".tp", &s.tp, true, 1));
    PLANNER_RETURN_IF_ERROR(r.GetInt(n, "chunk", f + ".chunk", &s.chunk, false, 0));
    PLANNER_RETURN_IF_ERROR(r.GetInt(n, "device_offset", f + ".device_offset", &s.device_offset, false, 0));
    PLANNER_RETURN_IF_ERROR(r.GetIntList(n, "devices", f + ".devices", &s.devices, false, 0));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "forward_seconds", f + ".forward_seconds", &s.forward_s, true, 0, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "backward_input_seconds", f + ".backward_input_seconds", &s.backward_input_s, true, 0, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "backward_weight_seconds", f + ".backward_weight_seconds", &s.backward_weight_s, true, 0, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "tp_comm_seconds", f + ".tp_comm_seconds", &s.tp_comm_s, false, 0, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "ep_comm_seconds", f + ".ep_comm_seconds", &s.ep_comm_s, false, 0, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "p2p_seconds", f + ".p2p_seconds", &s.p2p_s, false, 0, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "dp_allreduce_seconds", f + ".dp_allreduce_seconds", &s.dp_allreduce_s, false, 0, false));
    PLANNER_RETURN_IF_ERROR(r.GetInt(n, "in_flight_microbatches", f + ".in_flight_microbatches", &s.in_flight, false, 0));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "weights_GiB", f + ".weights_GiB", &gib, false, 0, false)); s.weights_bytes = gib * kGiB;
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "optimizer_GiB", f + ".optimizer_GiB", &gib, false, 0, false)); s.optimizer_bytes = gib * kGiB;
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "activations_GiB", f + ".activations_GiB", &gib, false, 0, false)); s.activations_bytes = gib * kGiB;
    gib = 0;
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "peak_memory_GiB", f + ".peak_memory_GiB", &gib, false, 0, false)); s.peak_memory_bytes = gib * kGiB;
    p.stages.push_back(std::move(s));
  }
  const YAML::Node& pr = root["predicted"];
  if (!pr.IsDefined()) return r.FieldError(root, "predicted", "missing required field");
  PLANNER_RETURN_IF_ERROR(r.RequireMap(pr, "predicted"));
  double gib = 0;
  PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, "iteration_seconds", "predicted.iteration_seconds", &p.predicted.iteration_s, true, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, "samples_per_second", "predicted.samples_per_second", &p.predicted.samples_per_second, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, "tflops_per_gpu", "predicted.tflops_per_gpu", &p.predicted.tflops_per_gpu, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, "mfu", "predicted.mfu", &p.predicted.mfu, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, "hfu", "predicted.hfu", &p.predicted.hfu, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, "model_tflops_per_gpu", "predicted.model_tflops_per_gpu", &p.predicted.model_tflops_per_gpu, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, "model_flops_per_iteration", "predicted.model_flops_per_iteration", &p.predicted.model_flops_per_iteration, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, "tokens_per_second_per_gpu", "predicted.tokens_per_second_per_gpu", &p.predicted.tokens_per_second_per_gpu, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, "bubble_fraction", "predicted.bubble_fraction", &p.predicted.bubble_fraction, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, "pipeline_seconds", "predicted.pipeline_seconds", &p.predicted.pipeline_s, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, "dp_allreduce_seconds", "predicted.dp_allreduce_seconds", &p.predicted.dp_allreduce_s, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, "optimizer_seconds", "predicted.optimizer_seconds", &p.predicted.optimizer_s, false, 0, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(pr, "peak_memory_GiB", "predicted.peak_memory_GiB", &gib, false, 0, false));
  if (pr["dp_comm_seconds"].IsDefined()) {
    const YAML::Node& dc = pr["dp_comm_seconds"];
    PLANNER_RETURN_IF_ERROR(r.RequireMap(dc, "predicted.dp_comm_seconds"));
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(dc, "predicted.dp_comm_seconds", DpCommNames()));
    for (const std::string& name : DpCommNames()) {
      if (!dc[name].IsDefined()) continue;
      double seconds = 0;
      PLANNER_RETURN_IF_ERROR(r.GetDouble(dc, name, "predicted.dp_comm_seconds." + name, &seconds, true, 0, false));
      p.predicted.dp_comm_seconds.emplace_back(name, seconds);
    }
  }
  p.predicted.peak_memory_bytes = gib * kGiB;
  const YAML::Node& ru = root["runners_up"];
  if (ru.IsDefined() && ru.IsSequence()) {
    for (size_t i = 0; i < ru.size(); ++i) {
      std::string f = fmt::format("runners_up[{}]", i);
      PlanSummary s;
      PLANNER_RETURN_IF_ERROR(r.RequireMap(ru[i], f));
      PLANNER_RETURN_IF_ERROR(r.GetString(ru[i], "config", f + ".config", &s.config, false));
      PLANNER_RETURN_IF_ERROR(r.GetInt(ru[i], "tp", f + ".tp", &s.tp, false, 1));
      PLANNER_RETURN_IF_ERROR(r.GetInt(ru[i], "pp", f + ".pp", &s.pp, false, 1));
      PLANNER_RETURN_IF_ERROR(r.GetInt(ru[i], "dp", f + ".dp", &s.dp, false, 1));
      PLANNER_RETURN_IF_ERROR(r.GetInt(ru[i], "cp", f + ".cp", &s.cp, false, 1));
      PLANNER_RETURN_IF_ERROR(r.GetInt(ru[i], "ep", f + ".ep", &s.ep, false, 1));
      PLANNER_RETURN_IF_ERROR(r.GetInt(ru[i], "etp", f + ".etp", &s.etp, false, 1));
      PLANNER_RETURN_IF_ERROR(r.GetBool(ru[i], "sequence_parallel", f + ".sequence_parallel", &s.sequence_parallel, false));
      PLANNER_RETURN_IF_ERROR(r.GetInt(ru[i], "microbatch_size", f + ".microbatch_size", &s.microbatch_size, false, 1));
      PLANNER_RETURN_IF_ERROR(r.GetInt(ru[i], "num_microbatches", f + ".num_microbatches", &s.num_microbatches, false, 1));
      PLANNER_RETURN_IF_ERROR(GetSchedule(r, ru[i], f + ".schedule", &s.schedule, false));
      PLANNER_RETURN_IF_ERROR(r.GetInt(ru[i], "interleave", f + ".interleave", &s.interleave, false, 1));
      PLANNER_RETURN_IF_ERROR(GetRecompute(r, ru[i], f + ".recompute", &s.recompute, false));
      PLANNER_RETURN_IF_ERROR(r.GetInt(ru[i], "recompute_num_layers", f + ".recompute_num_layers", &s.recompute_num_layers, false, 0));
      PLANNER_RETURN_IF_ERROR(GetRecomputeModules(r, ru[i], f + ".recompute_modules", &s.recompute_modules));
      PLANNER_RETURN_IF_ERROR(r.GetDouble(ru[i], "iteration_seconds", f + ".iteration_seconds", &s.iteration_s, false, 0, false));
      PLANNER_RETURN_IF_ERROR(r.GetDouble(ru[i], "samples_per_second", f + ".samples_per_second", &s.samples_per_second, false, 0, false));
      PLANNER_RETURN_IF_ERROR(GetZeroStage(r, ru[i], f + ".zero_stage", &s.zero_stage));
      double ru_gib = 0;
      PLANNER_RETURN_IF_ERROR(r.GetDouble(ru[i], "peak_memory_GiB", f + ".peak_memory_GiB", &ru_gib, false, 0, false));
      s.peak_memory_bytes = ru_gib * kGiB;
      PLANNER_RETURN_IF_ERROR(r.GetString(ru[i], "why_lost", f + ".why_lost", &s.why_lost, false));
      p.runners_up.push_back(std::move(s));
    }
  }
  *out = std::move(p);
  return Status::OK();
}

Status LoadPlan(const std::string& path, Plan* out) {
  std::string text;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(path, &text));
  return ParsePlan(path, text, out);
}

}  // namespace planner
