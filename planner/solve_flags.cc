#include "planner/solve_flags.h"

#include "spec/pipeline_layout.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/edit_distance.h"
#include "common/units.h"
#include "spec/dp_comm.h"
#include "spec/kinds.h"
#include "spec/model_state.h"

namespace planner {

namespace {

template <typename T>
Status ParseList(const std::vector<std::string>& in, bool (*parse)(std::string_view, T*),
                 const std::vector<std::string>& names, const char* flag, std::vector<T>* out) {
  for (const auto& s : in) {
    T v;
    if (!parse(s, &v))
      return Status::InvalidArgument(fmt::format("{}: unknown value '{}'{}", flag, s, DidYouMean(s, names)));
    out->push_back(v);
  }
  return Status::OK();
}

std::string JoinInts(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

// The numeric flags' bounds: a degree, a microbatch, a machine count at least 1 and bounded (the
// products the search forms stay far inside an int64), reals finite and in range.
constexpr int64_t kMaxDegree = int64_t{1} << 20, kMaxMicrobatch = int64_t{1} << 24;

Status CheckIntFlag(const char* flag, const std::vector<int64_t>& values, int64_t max_value) {
  for (int64_t v : values) {
    if (v < 1) return Status::InvalidArgument(fmt::format("{} {}: every value must be at least 1", flag, v));
    if (v > max_value)
      return Status::InvalidArgument(fmt::format("{} {}: every value must be at most {}", flag, v, max_value));
  }
  return Status::OK();
}

Status CheckRealFlag(const char* flag, double v, double min_value, bool min_exclusive, const char* fix) {
  if (std::isfinite(v) && (min_exclusive ? v > min_value : v >= min_value)) return Status::OK();
  return Status::InvalidArgument(fmt::format("{} {}: must be a finite number {} {}; {}", flag, v,
                                             min_exclusive ? "above" : "at least", min_value, fix));
}

// The numeric flags' ranges (before any file is read).
Status CheckNumericFlags(const SolveArgs& a, bool memory_given) {
  const std::pair<const char*, const std::vector<int64_t>*> degrees[] = {
      {"--tp", &a.tp}, {"--pp", &a.pp},   {"--cp", &a.cp},
      {"--ep", &a.ep}, {"--etp", &a.etp}, {"--pd-machines", &a.pd_machines}};
  for (const auto& [flag, values] : degrees) PLANNER_RETURN_IF_ERROR(CheckIntFlag(flag, *values, kMaxDegree));
  PLANNER_RETURN_IF_ERROR(CheckIntFlag("--microbatch", a.microbatch, kMaxMicrobatch));
  PLANNER_RETURN_IF_ERROR(CheckIntFlag("--interleave", a.interleave, kMaxDegree));
  PLANNER_RETURN_IF_ERROR(CheckIntFlag("--vp", a.vp, kMaxDegree));
  PLANNER_RETURN_IF_ERROR(CheckIntFlag("--dp-replicate", a.dp_replicate, kMaxDegree));
  if (a.global_batch > (int64_t{1} << 40))
    return Status::InvalidArgument(fmt::format("--global-batch {}: must be at most 2^40 samples", a.global_batch));
  if (a.seq > (int64_t{1} << 24))
    return Status::InvalidArgument(fmt::format("--seq {}: must be at most {} tokens", a.seq, int64_t{1} << 24));
  if (memory_given)
    PLANNER_RETURN_IF_ERROR(
        CheckRealFlag("--memory-bytes", a.memory_bytes, 0, true, "give the bytes of memory per machine, e.g. 16e9"));
  PLANNER_RETURN_IF_ERROR(CheckRealFlag("--bytes-per-param", a.bytes_per_param, 0, false,
                                        "give bytes of model state per parameter, e.g. 18 (0: the default)"));
  PLANNER_RETURN_IF_ERROR(CheckRealFlag("--activation-compression-ratio", a.acr, 0, false,
                                        "give 1 (no compression), a ratio above 1, or 0 (ignore activations)"));
  for (double b : a.pd_bandwidths)
    PLANNER_RETURN_IF_ERROR(CheckRealFlag("--pd-bandwidths", b, 0, true, "give bytes/s per level, e.g. 1.25e10"));
  if (!a.pd_machines.empty()) {
    if (a.mode != PlanMode::kPipeDream)
      return Status::InvalidArgument(
          "--pd-machines: applies to --mode pipedream only; drop it or add --mode pipedream");
    if (a.pd_bandwidths.size() != a.pd_machines.size()) {
      return Status::InvalidArgument(
          fmt::format("--pd-bandwidths: {} value(s) for {} --pd-machines level(s); give one bytes/s value per level",
                      a.pd_bandwidths.size(), a.pd_machines.size()));
    }
    int64_t product = 1;
    for (int64_t m : a.pd_machines)
      product = product > (int64_t{1} << 24) ? product : product * m;  // stops past 2^24: no overflow
    for (int64_t n : a.gpu_list) {
      if (product != n) {
        return Status::InvalidArgument(
            fmt::format("--pd-machines {}: the levels multiply to {} machines but --gpus is {}; give --gpus {} or "
                        "levels multiplying to {}",
                        JoinInts(a.pd_machines), product, n, product, n));
      }
    }
  } else if (!a.pd_bandwidths.empty()) {
    return Status::InvalidArgument("--pd-bandwidths: needs --pd-machines (one bytes/s value per level)");
  }
  return Status::OK();
}

// "1024" or "1024,2048,4096": positive GPU counts, each once, in the order given.
Status ParseGpuList(const std::string& text, std::vector<int64_t>* out) {
  out->clear();
  const std::string fix = "give positive GPU counts joined by commas, e.g. --gpus 1024 or --gpus 1024,2048,4096";
  std::string cur;
  for (char ch : text + ",") {
    if (ch != ',') {
      cur += ch;
      continue;
    }
    if (cur.empty() || cur.size() > 9 || cur.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(cur) < 1) {
      return Status::InvalidArgument(fmt::format(
          "--gpus '{}': {}; {}", text, cur.empty() ? "an empty entry" : "'" + cur + "' is not a GPU count", fix));
    }
    const int64_t n = std::stoll(cur);
    if (std::find(out->begin(), out->end(), n) != out->end()) {
      return Status::InvalidArgument(fmt::format("--gpus '{}': {} is listed twice; give each size once", text, n));
    }
    out->push_back(n);
    cur.clear();
  }
  return Status::OK();
}

// "300B", "15T", "2.5e9": a positive token count, suffixes K M B T (10^3 .. 10^12).
Status ParseTokenCount(const std::string& text, double* out) {
  static const std::pair<char, double> kSuffixes[] = {{'K', 1e3}, {'M', 1e6}, {'B', 1e9}, {'T', 1e12}};
  std::string number = text;
  double scale = 1;
  if (!number.empty()) {
    const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(number.back())));
    for (const auto& [suffix, value] : kSuffixes) {
      if (last == suffix) {
        scale = value;
        number.pop_back();
      }
    }
  }
  const std::optional<double> v = ParseDouble(number);
  if (!v || !(*v > 0) || !std::isfinite(*v * scale)) {
    return Status::InvalidArgument(
        fmt::format("--train-tokens '{}': not a token count; give a positive number with an optional suffix "
                    "K, M, B or T (10^3, 10^6, 10^9, 10^12), e.g. 300B or 15T",
                    text));
  }
  *out = *v * scale;
  return Status::OK();
}

// --interleave / --vp: v >= 2 and pp x v dividing a gpt model's layers (Megatron's rule).
Status CheckInterleave(const SolveArgs& a, const ModelSpec* model, const std::vector<int64_t>& values,
                       const char* flag) {
  // A --pipeline-model-parallel-layout places the layers itself (PipelineLayoutFlag checks its vp).
  const int64_t blocks = model != nullptr && model->is_gpt && a.pipeline_layout.empty() ? model->gpt.layers : 0;
  for (int64_t v : values) {
    if (v < 2)
      return Status::InvalidArgument(
          fmt::format("{} {}: chunks per device start at 2 (v = 1 is the 1f1b schedule)", flag, v));
    for (int64_t p : a.pp) {
      // Or blocks + 2 with the embedding and the loss counted as a layer each (docs/cost_model.md section 4).
      if (blocks > 0 && p >= 1 && blocks % (p * v) != 0 && (p < 2 || (blocks + 2) % (p * v) != 0)) {
        return Status::InvalidArgument(
            fmt::format("{} {} with --pp {}: pp x v must divide the {} layers of {} (or {} with the embedding and the "
                        "loss counted as a layer each)",
                        flag, v, p, blocks, a.model, blocks + 2));
      }
    }
    if (blocks > 0 && a.pp.empty() && blocks % v != 0 && (blocks + 2) % v != 0) {
      return Status::InvalidArgument(
          fmt::format("{} {}: v must divide the {} layers of {} (pp x v must, for any pp); choose a divisor of {}",
                      flag, v, blocks, a.model, blocks));
    }
  }
  return Status::OK();
}

// --cp, --zero, --sp and the forced degrees against every --gpus size.
Status CheckLayoutFlags(const SolveArgs& a, const ModelSpec* model, SearchOptions* o) {
  PLANNER_RETURN_IF_ERROR(CheckInterleave(a, model, a.interleave, "--interleave"));
  PLANNER_RETURN_IF_ERROR(CheckInterleave(a, model, a.vp, "--vp"));
  for (int64_t c : a.cp) {
    if (c == 1) continue;
    if (model == nullptr || !model->is_gpt) {
      return Status::InvalidArgument(
          fmt::format("--cp {}: context parallelism splits a sequence; give a gpt: model with --model", c));
    }
    if (model->gpt.seq % (2 * c) != 0) {
      return Status::InvalidArgument(
          fmt::format("--cp {}: 2 x cp = {} must divide the sequence length {} of {} (causal load balancing "
                      "cuts it into 2 x cp chunks); choose a cp dividing {}",
                      c, 2 * c, model->gpt.seq, a.model, model->gpt.seq / 2));
    }
  }
  for (int64_t z : a.zero) {
    if (z < 0 || z > 3) {
      return Status::InvalidArgument(
          fmt::format("--zero {}: ZeRO stages are 0 (none), 1 (optimizer states: Megatron's distributed optimizer), "
                      "2 (and gradients), 3 (and parameters: FSDP); e.g. --zero 0,1",
                      z));
    }
  }
  if (a.sp == "on") o->sequence_parallel = {1};
  else if (a.sp == "off") o->sequence_parallel = {0};
  else if (a.sp == "both") o->sequence_parallel = {0, 1};
  else if (!a.sp.empty())
    return Status::InvalidArgument(
        fmt::format("--sp: unknown value '{}'{}; use on, off or both", a.sp, DidYouMean(a.sp, {"on", "off", "both"})));
  if (a.tp.empty() && a.pp.empty() && a.cp.empty()) return Status::OK();
  const std::vector<int64_t> one = {1};
  std::vector<int64_t> products;
  for (int64_t t : a.tp.empty() ? one : a.tp)
    for (int64_t c : a.cp.empty() ? one : a.cp)
      for (int64_t p : a.pp.empty() ? one : a.pp)
        if (t >= 1 && p >= 1 && std::find(products.begin(), products.end(), t * c * p) == products.end())
          products.push_back(t * c * p);
  std::string given;
  if (!a.tp.empty()) given += "--tp " + JoinInts(a.tp);
  if (!a.cp.empty()) given += std::string(given.empty() ? "" : " ") + "--cp " + JoinInts(a.cp);
  if (!a.pp.empty()) given += std::string(given.empty() ? "" : " ") + "--pp " + JoinInts(a.pp);
  for (int64_t n : a.gpu_list) {
    bool fits = false;
    for (int64_t x : products) fits = fits || n % x == 0;
    if (fits || products.empty()) continue;
    return Status::InvalidArgument(
        products.size() == 1
            ? fmt::format(
                  "{}: tp x cp x pp = {} does not divide --gpus {}; choose degrees whose product divides the GPU count",
                  given, products[0], n)
            : fmt::format("{}: no tp x cp x pp product ({}) divides --gpus {}; choose degrees whose product divides "
                          "the GPU count",
                          given, JoinInts(products), n));
  }
  return Status::OK();
}

// --moe-imbalance, --moe-overlap and --moe-dispatcher (docs/cost_model.md, "Expert parallelism").
Status MoeCostFlags(const SolveArgs& a, SearchOptions* o) {
  if (!(a.moe_imbalance >= 1) || !std::isfinite(a.moe_imbalance)) {
    return Status::InvalidArgument(
        fmt::format("--moe-imbalance {}: the busiest expert-parallel rank's tokens over the mean is at least 1; "
                    "give 1 (balanced routing) or the measured ratio, e.g. 1.2",
                    a.moe_imbalance));
  }
  o->cost.moe_imbalance = a.moe_imbalance;
  if (a.moe_overlap != "on" && a.moe_overlap != "off") {
    return Status::InvalidArgument(fmt::format(
        "--moe-overlap: unknown value '{}'{}; use on (all-to-all hidden behind the MoE layer's compute) or off",
        a.moe_overlap, DidYouMean(a.moe_overlap, {"on", "off"})));
  }
  o->cost.moe_overlap = a.moe_overlap == "on";
  MoeDispatcher dispatcher;
  if (!ParseMoeDispatcher(a.moe_dispatcher, &dispatcher)) {
    return Status::InvalidArgument(
        fmt::format("--moe-dispatcher: unknown value '{}'{}; use alltoall (one copy per routed expert, NCCL) or flex "
                    "(one copy per node reached, DeepEP)",
                    a.moe_dispatcher, DidYouMean(a.moe_dispatcher, {"alltoall", "flex"})));
  }
  o->cost.moe_dedup = dispatcher == MoeDispatcher::kFlex;
  return Status::OK();
}

// --optimizer-state: how the optimizer keeps its state (spec/model_state.h), costed from the model's precision; the
// optimizer step's traffic follows it. The engine's optimizer_states check comes in ApplyEngine.
Status OptimizerStateFlag(const SolveArgs& a, const ModelSpec& model, SearchOptions* o) {
  if (a.optimizer_state.empty()) return Status::OK();
  OptimizerState s;
  if (!ParseOptimizerState(a.optimizer_state, &s))
    return Status::InvalidArgument(fmt::format("--optimizer-state: unknown value '{}'{}; use {}", a.optimizer_state,
                                               DidYouMean(a.optimizer_state, OptimizerStateNameList()),
                                               OptimizerStateNames()));
  if (a.model.empty())
    return Status::InvalidArgument(
        "--optimizer-state: the optimizer's bytes are costed from a model's precision; pass --model or drop "
        "--optimizer-state");
  if (a.bytes_per_param > 0 && s != OptimizerState::kFp32)
    return Status::InvalidArgument(
        "--optimizer-state with --bytes-per-param: --bytes-per-param is the whole model state as you count it; drop "
        "one of them");
  if (const std::string why = OptimizerStateRefusal(model.dtype, s); !why.empty())
    return Status::InvalidArgument(fmt::format("--optimizer-state {}: the model trains in {}: {}", a.optimizer_state,
                                               DTypeName(model.dtype), why));
  o->cost.optimizer_state = s;  // the step's traffic follows (CostOptions::OptimizerStepBytesPerParam)
  return Status::OK();
}

// --fp8-param-gather: the weights kept in FP8 alone (an FP8 model's); the engine's ZeRO stages for it come in
// ApplyEngine.
Status Fp8ParamGatherFlag(const SolveArgs& a, const ModelSpec& model, SearchOptions* o) {
  if (!a.fp8_param_gather) {
    if (const std::string why = OptimizerStateFp8ParamsRefusal(o->cost.optimizer_state, false); !why.empty())
      return Status::InvalidArgument(fmt::format(
          "--optimizer-state {} without --fp8-param-gather: {}; add {}--fp8-param-gather or use "
          "--optimizer-state bf16",
          OptimizerStateName(o->cost.optimizer_state), why, model.dtype == DType::kFp8 ? "" : "--precision fp8 "));
    return Status::OK();
  }
  if (a.model.empty())
    return Status::InvalidArgument(
        "--fp8-param-gather: FP8 parameters are costed from a model's precision; pass --model or drop "
        "--fp8-param-gather");
  if (model.dtype != DType::kFp8)
    return Status::InvalidArgument(fmt::format(
        "--fp8-param-gather: model {} trains in {}, and FP8 parameters are an FP8 model's weights; add --precision "
        "fp8 or drop --fp8-param-gather",
        model.name, DTypeName(model.dtype)));
  // The remainder states keep the master's low half beside a bf16 weight, bf16 none at all: FP8 parameters have
  // neither, and keep a master apart (Megatron-Core fp32; NeMo 1.x's Apex optimizer store_params, in its dtype).
  if (const std::string why = OptimizerStateFp8ParamsRefusal(o->cost.optimizer_state, true); !why.empty())
    return Status::InvalidArgument(
        fmt::format("--fp8-param-gather with --optimizer-state {}: {}; use --optimizer-state fp32 or bf16-master, or "
                    "drop --fp8-param-gather",
                    OptimizerStateName(o->cost.optimizer_state), why));
  o->cost.fp8_params = true;
  return Status::OK();
}

// --dp-comm and --ps-servers (docs/cost_model.md, "Data-parallel communication architectures"); the
// search checks them against the cluster's CPU machines.
Status DpCommFlags(const SolveArgs& a, SearchOptions* o) {
  for (const auto& name : a.dp_comm) {
    DpComm d;
    if (!ParseDpComm(name, &d)) {
      return Status::InvalidArgument(fmt::format("--dp-comm: unknown architecture '{}'{}; choose from {}", name,
                                                 DidYouMean(name, DpCommNames()), DpCommChoices()));
    }
    if (std::find(o->dp_comms.begin(), o->dp_comms.end(), d) == o->dp_comms.end()) o->dp_comms.push_back(d);
  }
  if (a.ps_servers < -1)
    return Status::InvalidArgument(
        fmt::format("--ps-servers {}: give a count of CPU machines, 0 or more", a.ps_servers));
  o->ps_servers = a.ps_servers;
  if (!a.ps_placement.empty() && a.ps_placement != "dedicated" && a.ps_placement != "colocated") {
    return Status::InvalidArgument(fmt::format(
        "--ps-placement: unknown value '{}'{}; use dedicated (servers on the cluster's CPU machines) or colocated "
        "(a server on every GPU machine)",
        a.ps_placement, DidYouMean(a.ps_placement, {"dedicated", "colocated"})));
  }
  o->ps_colocated = a.ps_placement == "colocated";
  o->ps_placement_named = !a.ps_placement.empty();
  if (o->ps_colocated && a.ps_servers > 0) {
    return Status::InvalidArgument(fmt::format(
        "--ps-placement colocated with --ps-servers {}: a co-located ps runs its servers on the GPU machines; "
        "drop --ps-servers or use --ps-placement dedicated",
        a.ps_servers));
  }
  return Status::OK();
}

}  // namespace

Status ValidateSolveArgs(SolveArgs* a, bool memory_bytes_given) {
  PLANNER_RETURN_IF_ERROR(ParseGpuList(a->gpus_text, &a->gpu_list));
  if (!ParsePlanMode(a->mode_text, &a->mode)) {
    return Status::InvalidArgument(fmt::format("--mode: unknown value '{}'{}; use auto or pipedream", a->mode_text,
                                               DidYouMean(a->mode_text, {"auto", "pipedream"})));
  }
  PLANNER_RETURN_IF_ERROR(CheckNumericFlags(*a, memory_bytes_given));
  if (a->mode == PlanMode::kPipeDream && (!a->dp_comm.empty() || a->ps_servers >= 0 || !a->ps_placement.empty())) {
    return Status::InvalidArgument(
        "--dp-comm / --ps-servers / --ps-placement: pipedream mode runs PipeDream's optimizer with its "
        "own all-reduce; drop them or use --mode auto");
  }
  if (a->mode == PlanMode::kPipeDream && !a->optimizer_state.empty()) {
    return Status::InvalidArgument(
        "--optimizer-state: pipedream mode costs PipeDream's fixed bytes per parameter from the profile; "
        "drop it or use --mode auto --model M");
  }
  if (a->mode == PlanMode::kPipeDream && a->fp8_param_gather) {
    return Status::InvalidArgument(
        "--fp8-param-gather: pipedream mode costs PipeDream's fixed bytes per parameter from the profile; "
        "drop it or use --mode auto --model M");
  }
  if (a->mode == PlanMode::kPipeDream && !a->grad_dtype.empty()) {
    return Status::InvalidArgument(
        "--grad-dtype: pipedream mode costs PipeDream's fixed bytes per parameter from the profile; "
        "drop it or use --mode auto --model M");
  }
  if (!a->model.empty() && !a->profile.empty() && a->mode == PlanMode::kPipeDream) {
    return Status::InvalidArgument("pipedream mode reads a profile; drop --model");
  }
  if (!a->train_tokens_text.empty()) PLANNER_RETURN_IF_ERROR(ParseTokenCount(a->train_tokens_text, &a->train_tokens));
  if (a->vertical_sync && a->mode != PlanMode::kPipeDream && a->schedules != std::vector<std::string>{"pipedream"}) {
    const std::string asked = a->schedules.empty() ? std::string("the search's synchronous ones")
                                                   : fmt::format("--schedule {}", fmt::join(a->schedules, ","));
    return Status::InvalidArgument(
        fmt::format("--vertical-sync: vertical sync needs PipeDream's asynchronous schedule, not {}; "
                    "add --schedule pipedream (or --mode pipedream), or drop --vertical-sync",
                    asked));
  }
  return Status::OK();
}

Status ApplyModelOverrides(const SolveArgs& a, ModelSpec* model, std::vector<std::string>* notes) {
  if (a.seq == 0 && a.precision.empty()) return Status::OK();
  DType dtype = model->dtype;
  if (!a.precision.empty() && (!ParseDType(a.precision, &dtype) || a.precision == "tf32")) {
    return Status::InvalidArgument(fmt::format("--precision: unknown value '{}'{}; use bf16, fp16, fp8 or fp32",
                                               a.precision, DidYouMean(a.precision, {"bf16", "fp16", "fp8", "fp32"})));
  }
  if (a.model.empty()) {
    return Status::InvalidArgument(fmt::format("{} rebuilds a model file; pass --model (a profile's times are fixed)",
                                               a.seq > 0 ? "--seq" : "--precision"));
  }
  if (!model->is_gpt && a.seq > 0) {
    return Status::InvalidArgument(
        fmt::format("--seq {}: {} is an explicit layer list whose shapes its 'input:' fixes; --seq applies to gpt: "
                    "template models (edit the file's input instead)",
                    a.seq, a.model));
  }
  if (!model->is_gpt) {
    if (dtype == model->dtype) return Status::OK();
    return Status::InvalidArgument(
        fmt::format("--precision {}: {} is an explicit layer list; set its 'dtype:' key instead "
                    "(--precision rebuilds gpt: template models only)",
                    a.precision, a.model));
  }
  GptConfig g = model->gpt;
  if (a.seq > 0) g.seq = a.seq;
  if (g.seq == model->gpt.seq && dtype == model->dtype) return Status::OK();
  std::string what;
  if (g.seq != model->gpt.seq) what = fmt::format("--seq {} in place of the file's seq {}", g.seq, model->gpt.seq);
  if (dtype != model->dtype)
    what += fmt::format("{}precision {} in place of the file's {}", what.empty() ? "" : ", ", DTypeName(dtype),
                        DTypeName(model->dtype));
  ModelSpec m = *model;
  PLANNER_RETURN_IF_ERROR(BuildGptModel(g, dtype, &m));
  *model = std::move(m);
  notes->push_back(
      fmt::format("model {} solved with {} (plan.yaml's inputs.seq / inputs.dtype; codegen applies them to {})",
                  model->name, what, a.model));
  return Status::OK();
}

// --pipeline-model-parallel-layout: the stage boundaries, pp and vp it gives, and the schedules that run them.
Status PipelineLayoutFlag(const SolveArgs& a, const ModelSpec& model, SearchOptions* o) {
  if (a.pipeline_layout.empty()) return Status::OK();
  if (a.model.empty())
    return Status::InvalidArgument("--pipeline-model-parallel-layout: places a model's layers; give --model");
  if (a.pp.size() != 1)
    return Status::InvalidArgument(
        "--pipeline-model-parallel-layout: needs one --pp (chunk q runs on pipeline rank q % pp), as Megatron's "
        "--pipeline-model-parallel-size");
  PipelineLayout L;
  PLANNER_RETURN_IF_ERROR(ResolvePipelineLayout(a.pipeline_layout, model, a.pp.front(), &L));
  for (int64_t v : o->interleave) {
    if (v != L.vp)
      return Status::InvalidArgument(fmt::format(
          "--pipeline-model-parallel-layout: {} chunks on --pp {} are vp {}, not the --interleave / --vp {} given",
          L.chunks.size(), L.pp, L.vp, v));
  }
  o->interleave = L.vp > 1 ? std::vector<int64_t>{L.vp} : std::vector<int64_t>{};
  const std::vector<Schedule> runs = L.vp > 1
                                         ? std::vector<Schedule>{Schedule::kInterleaved, Schedule::kDualPipeV}
                                         : std::vector<Schedule>{Schedule::kGpipe, Schedule::k1F1B, Schedule::kZbH1};
  if (o->schedules.empty()) {
    o->schedules = L.vp > 1 ? std::vector<Schedule>{Schedule::kInterleaved} : runs;
  }
  for (Schedule s : o->schedules) {
    if (std::find(runs.begin(), runs.end(), s) == runs.end() || (s == Schedule::kDualPipeV && L.vp != 2))
      return Status::InvalidArgument(
          fmt::format("--pipeline-model-parallel-layout: {} chunks per rank do not run with --schedule {}; use {}",
                      L.vp, ScheduleName(s),
                      L.vp > 1 ? (L.vp == 2 ? "interleaved or dualpipev" : "interleaved") : "gpipe, 1f1b or zb-h1"));
  }
  o->forced_cuts = L.cuts;
  return Status::OK();
}

Status BuildSearchOptions(const SolveArgs& a, const ModelSpec& model, const Profile& profile, SearchOptions* o) {
  o->gpus = a.gpus;
  o->global_batch = a.global_batch;
  if (o->global_batch == 0 && a.model.empty() &&
      __builtin_mul_overflow(profile.reference_microbatch, a.gpus, &o->global_batch))
    return Status::InvalidArgument(
        fmt::format("the profile's reference_microbatch {} x --gpus {} overflows; give --global-batch",
                    profile.reference_microbatch, a.gpus));
  o->top_k = a.top;
  o->threads = a.threads;
  o->tp = a.tp;
  o->pp = a.pp;
  o->cp = a.cp;
  o->zero = a.zero;
  o->dp_replicate = a.dp_replicate;
  o->ep = a.ep;
  o->etp = a.etp;
  o->microbatch = a.microbatch;
  // Packed samples train one packed sequence per microbatch in the engines that pack (NeMo, Megatron-Bridge:
  // ConfigContainer.validate refuses more): the search's default, --microbatch searches others.
  if (o->microbatch.empty() && !a.model.empty() && model.is_gpt && model.gpt.packed_length > 0) o->microbatch = {1};
  o->interleave = a.interleave;
  for (int64_t v : a.vp) {
    if (std::find(o->interleave.begin(), o->interleave.end(), v) == o->interleave.end()) o->interleave.push_back(v);
  }
  PLANNER_RETURN_IF_ERROR(CheckLayoutFlags(a, a.model.empty() ? nullptr : &model, o));
  if (!a.replication.empty()) {
    std::string cur;
    for (char ch : a.replication + "-") {
      if (ch == '-') {
        if (cur.empty() || cur.size() > 6 || cur.find_first_not_of("0123456789") != std::string::npos ||
            std::stoll(cur) < 1) {
          return Status::InvalidArgument(
              fmt::format("--replication '{}': use positive counts joined by '-', e.g. 2-1-1", a.replication));
        }
        o->replication.push_back(std::stoll(cur));
        cur.clear();
      } else {
        cur += ch;
      }
    }
  }
  std::vector<std::string> snames = ScheduleNames();
  PLANNER_RETURN_IF_ERROR(ParseList<Schedule>(a.schedules, ParseSchedule, snames, "--schedule", &o->schedules));
  if (!a.vp.empty() && a.schedules.empty())
    o->schedules = {Schedule::kInterleaved};  // --vp V forces Megatron's interleaved layout
  if (!a.vp.empty() && std::none_of(o->schedules.begin(), o->schedules.end(), [](Schedule s) {
        return s == Schedule::kInterleaved || s == Schedule::kDualPipeV;
      }))
    return Status::InvalidArgument(
        fmt::format("--vp {}: virtual stages run only with --schedule interleaved (or dualpipev at 2); --schedule {} "
                    "has one chunk per device: add interleaved or drop --vp",
                    fmt::join(a.vp, ","), fmt::join(a.schedules, ",")));
  std::vector<std::string> rc_names;  // "block": block recompute, not a Recompute kind (docs/cost_model.md section 5)
  for (const auto& r : a.recompute) (r == "block" ? o->recompute_block = 1 : (rc_names.push_back(r), 0));
  if (!a.recompute.empty() && o->recompute_block != 1) o->recompute_block = 0;
  PLANNER_RETURN_IF_ERROR(ParseList<Recompute>(rc_names, ParseRecompute, {"none", "selective", "full", "block"},
                                               "--recompute", &o->recompute));
  for (const auto& name : a.recompute_modules) {
    RecomputeModule m;
    if (!ParseRecomputeModule(name, &m)) {
      return Status::InvalidArgument(
          fmt::format("--recompute-modules: unknown module '{}'; choose from {} (Megatron-Core's --recompute-modules)",
                      name, fmt::join(RecomputeModuleNames(), ",")));
    }
    o->recompute_modules |= RecomputeBit(m);
  }
  if (HasRecomputeModule(o->recompute_modules, RecomputeModule::kOpSac) &&
      o->recompute_modules != RecomputeBit(RecomputeModule::kOpSac)) {
    return Status::InvalidArgument(fmt::format(
        "--recompute-modules {}: op_sac is torchtitan's op-level policy for the whole block and stands alone; give "
        "op_sac or Megatron's modules",
        fmt::join(a.recompute_modules, ",")));
  }
  o->cost.dp_overlap = a.dp_overlap;
  for (const auto& [flag, text, out] :
       {std::tuple{"--overlap-grad-reduce", &a.overlap_grad_reduce, &o->cost.overlap_grad_reduce},
        std::tuple{"--overlap-param-gather", &a.overlap_param_gather, &o->cost.overlap_param_gather}}) {
    if (*text != "on" && *text != "off") {
      return Status::InvalidArgument(fmt::format(
          "{}: unknown value '{}'; use on (Megatron's {} flag) or off (as runs without it)", flag, *text, flag));
    }
    *out = *text == "on";
  }
  o->cost.overlap_param_prefetch = o->cost.overlap_param_gather;  // off: ZeRO-3's gathers exposed too
  PLANNER_RETURN_IF_ERROR(MoeCostFlags(a, o));
  PLANNER_RETURN_IF_ERROR(DpCommFlags(a, o));
  o->cost.p2p_overlap = a.p2p_overlap;
  o->cost.scatter_gather = !a.no_scatter_gather;
  o->cost.bytes_per_param = a.bytes_per_param;
  if (!a.grad_dtype.empty()) {
    DType g;
    if (a.grad_dtype == "fp8")
      return Status::InvalidArgument(
          "--grad-dtype fp8: gradients are not kept in fp8 (FP8 is for GEMM inputs); use fp32, fp16 or bf16");
    if (!ParseDType(a.grad_dtype, &g)) {
      return Status::InvalidArgument(fmt::format("--grad-dtype: unknown value '{}'{}", a.grad_dtype,
                                                 DidYouMean(a.grad_dtype, {"fp32", "fp16", "bf16"})) +
                                     "; use fp32, fp16 or bf16");
    }
    if (a.model.empty())
      return Status::InvalidArgument(
          "--grad-dtype: the gradient bytes are costed from a model's precision; pass --model or drop --grad-dtype");
    if (!GradDTypeAllowed(model.dtype, g)) {
      return Status::InvalidArgument(fmt::format("--grad-dtype {}: the model trains in {}; use {}", a.grad_dtype,
                                                 DTypeName(model.dtype), GradDTypeChoices(model.dtype)));
    }
    o->cost.grad_dtype = g;
  }
  PLANNER_RETURN_IF_ERROR(OptimizerStateFlag(a, model, o));
  PLANNER_RETURN_IF_ERROR(Fp8ParamGatherFlag(a, model, o));
  if (a.model.empty() && o->tp.empty()) o->tp = {1};
  o->vertical_sync = a.vertical_sync;
  return PipelineLayoutFlag(a, model, o);
}

void NoteUnappliedFlags(const SolveArgs& a, Plan* plan) {
  auto allowed = [](const std::vector<int64_t>& v, int64_t x) {
    return v.empty() || std::find(v.begin(), v.end(), x) != v.end();
  };
  if (!allowed(a.cp, plan->cp))
    plan->notes.push_back(
        fmt::format("--cp {} was asked but the plan has cp {}: the search did not apply it", JoinInts(a.cp), plan->cp));
  if (!allowed(a.ep, plan->ep))
    plan->notes.push_back(
        fmt::format("--ep {} was asked but the plan has ep {}: the search did not apply it", JoinInts(a.ep), plan->ep));
  const int64_t zero = ZeroStageNumber(plan->zero_stage);
  if (!allowed(a.zero, zero))
    plan->notes.push_back(fmt::format("--zero {} was asked but the plan has ZeRO {}: the search did not apply it",
                                      JoinInts(a.zero), zero));
  if ((a.sp == "on" && plan->tp > 1 && !plan->sequence_parallel) || (a.sp == "off" && plan->sequence_parallel)) {
    plan->notes.push_back(
        fmt::format("--sp {} was asked but the plan has sequence parallelism {}: the search did not apply it", a.sp,
                    plan->sequence_parallel ? "on" : "off"));
  }
}

PipeDreamOptions PipeDreamOptionsOf(const SolveArgs& a) {
  PipeDreamOptions o;
  o.machines = a.pd_machines;
  o.bandwidths = a.pd_bandwidths;
  o.straight_pipeline = a.straight;
  o.use_fewer_machines = a.fewer;
  o.use_memory_constraint = a.memory_constraint;
  o.memory_bytes = a.memory_bytes > 0 ? a.memory_bytes : 16e9;  // 0: not given (a given value is checked above 0)
  o.activation_compression_ratio = a.acr;
  return o;
}

}  // namespace planner
