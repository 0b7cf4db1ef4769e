// planner solve --gpus N[,N...] [--model M | --profile P] [--cluster C] [--mode auto|pipedream] [-o plan.yaml] [--json]
// One size prints the best plan; a list prints a scaling table, one row per size (docs/formats.md).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/edit_distance.h"
#include "common/log.h"
#include "common/units.h"
#include "dp_solver/pipedream_plan.h"
#include "dp_solver/search.h"
#include "planner/commands.h"
#include "planner/render.h"
#include "spec/cluster_spec.h"
#include "spec/model_spec.h"
#include "spec/profile.h"

namespace planner {

namespace {

struct SolveArgs {
  int64_t gpus = 0;                  // the size being solved (one of gpu_list)
  std::string gpus_text;             // --gpus as given: "1024" or "1024,2048,4096"
  std::vector<int64_t> gpu_list;
  std::string model, profile, cluster, mode = "auto", output, comm_profile;
  bool json = false;
  int top = 5;
  int64_t global_batch = 0;
  std::vector<int64_t> tp, pp, microbatch, interleave, vp, cp, zero, ep, etp;
  double moe_imbalance = 1.0;
  std::string moe_overlap = "off";
  std::string replication, sp, precision, train_tokens_text;
  std::string overlap_grad_reduce = "on", overlap_param_gather = "on";
  std::string grad_dtype;
  int64_t seq = 0;
  double train_tokens = 0;
  std::vector<std::string> schedules, recompute, recompute_modules, dp_comm;
  int64_t ps_servers = -1;
  std::string ps_placement;
  bool dp_overlap = false, p2p_overlap = false, no_scatter_gather = false;
  double bytes_per_param = 0;
  // PipeDream mode.
  std::vector<int64_t> pd_machines;
  std::vector<double> pd_bandwidths;
  double memory_bytes = 0;
  bool straight = false, fewer = false, memory_constraint = false;
  bool vertical_sync = false;
  double acr = 1;
};

std::string DefaultCluster() {
  std::error_code ec;  // one that cannot be examined is not used; the source tree's then
  if (std::filesystem::exists("configs/clusters/dgx-a100.yaml", ec)) return "configs/clusters/dgx-a100.yaml";
  return std::string(PLANNER_SOURCE_DIR) + "/configs/clusters/dgx-a100.yaml";
}

// With neither --model nor --profile: the one *.profile.yaml in the working directory.
Status DiscoverProfile(std::string* path) {
  std::vector<std::string> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(".", ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::error_code type_ec;  // an entry that cannot be examined is no profile
    if (it->is_regular_file(type_ec) && name.size() > 13 && name.substr(name.size() - 13) == ".profile.yaml") found.push_back(name);
  }
  if (ec) {
    return Status::Unavailable(fmt::format(".: cannot list the working directory to find a profile: {}; pass --model or --profile", ec.message()));
  }
  std::sort(found.begin(), found.end());
  if (found.size() == 1) {
    *path = found[0];
    return Status::OK();
  }
  if (found.empty()) {
    return Status::InvalidArgument("no model or profile given and no *.profile.yaml in this directory; pass --model configs/models/<name>.yaml or --profile <file>");
  }
  std::string list;
  for (const auto& f : found) list += (list.empty() ? "" : ", ") + f;
  return Status::InvalidArgument("several profiles in this directory (" + list + "); choose one with --profile");
}

template <typename T>
Status ParseList(const std::vector<std::string>& in, bool (*parse)(std::string_view, T*), const std::vector<std::string>& names,
                 const char* flag, std::vector<T>* out) {
  for (const auto& s : in) {
    T v;
    if (!parse(s, &v)) return Status::InvalidArgument(fmt::format("{}: unknown value '{}'{}", flag, s, DidYouMean(s, names)));
    out->push_back(v);
  }
  return Status::OK();
}

std::string JoinInts(const std::vector<int64_t>& v);

// Flags are checked where they are read: a degree, a microbatch, a machine count at least 1 and
// bounded (the products the search forms stay far inside an int64), reals finite and in range.
constexpr int64_t kMaxDegree = int64_t{1} << 20, kMaxMicrobatch = int64_t{1} << 24;

Status CheckIntFlag(const char* flag, const std::vector<int64_t>& values, int64_t max_value) {
  for (int64_t v : values) {
    if (v < 1) return Status::InvalidArgument(fmt::format("{} {}: every value must be at least 1", flag, v));
    if (v > max_value) return Status::InvalidArgument(fmt::format("{} {}: every value must be at most {}", flag, v, max_value));
  }
  return Status::OK();
}

Status CheckRealFlag(const char* flag, double v, double min_value, bool min_exclusive, const char* fix) {
  if (std::isfinite(v) && (min_exclusive ? v > min_value : v >= min_value)) return Status::OK();
  return Status::InvalidArgument(fmt::format("{} {}: must be a finite number {} {}; {}", flag, v, min_exclusive ? "above" : "at least", min_value, fix));
}

// The numeric flags' ranges (before any file is read).
Status CheckNumericFlags(const SolveArgs& a, bool memory_given) {
  const std::pair<const char*, const std::vector<int64_t>*> degrees[] = {{"--tp", &a.tp}, {"--pp", &a.pp}, {"--cp", &a.cp}, {"--ep", &a.ep},
                                                                        {"--etp", &a.etp}, {"--pd-machines", &a.pd_machines}};
  for (const auto& [flag, values] : degrees) PLANNER_RETURN_IF_ERROR(CheckIntFlag(flag, *values, kMaxDegree));
  PLANNER_RETURN_IF_ERROR(CheckIntFlag("--microbatch", a.microbatch, kMaxMicrobatch));
  PLANNER_RETURN_IF_ERROR(CheckIntFlag("--interleave", a.interleave, kMaxDegree));
  PLANNER_RETURN_IF_ERROR(CheckIntFlag("--vp", a.vp, kMaxDegree));
  if (a.global_batch > (int64_t{1} << 40)) return Status::InvalidArgument(fmt::format("--global-batch {}: must be at most 2^40 samples", a.global_batch));
  if (a.seq > (int64_t{1} << 24)) return Status::InvalidArgument(fmt::format("--seq {}: must be at most {} tokens", a.seq, int64_t{1} << 24));
  if (memory_given) PLANNER_RETURN_IF_ERROR(CheckRealFlag("--memory-bytes", a.memory_bytes, 0, true, "give the bytes of memory per machine, e.g. 16e9"));
  PLANNER_RETURN_IF_ERROR(CheckRealFlag("--bytes-per-param", a.bytes_per_param, 0, false, "give bytes of model state per parameter, e.g. 18 (0: the default)"));
  PLANNER_RETURN_IF_ERROR(CheckRealFlag("--activation-compression-ratio", a.acr, 0, false, "give 1 (no compression), a ratio above 1, or 0 (ignore activations)"));
  for (double b : a.pd_bandwidths) PLANNER_RETURN_IF_ERROR(CheckRealFlag("--pd-bandwidths", b, 0, true, "give bytes/s per level, e.g. 1.25e10"));
  if (!a.pd_machines.empty()) {
    if (a.mode != "pipedream") return Status::InvalidArgument("--pd-machines: applies to --mode pipedream only; drop it or add --mode pipedream");
    if (a.pd_bandwidths.size() != a.pd_machines.size()) {
      return Status::InvalidArgument(fmt::format("--pd-bandwidths: {} value(s) for {} --pd-machines level(s); give one bytes/s value per level", a.pd_bandwidths.size(), a.pd_machines.size()));
    }
    int64_t product = 1;
    for (int64_t m : a.pd_machines) product = product > (int64_t{1} << 24) ? product : product * m;  // stops past 2^24: no overflow
    for (int64_t n : a.gpu_list) {
      if (product != n) {
        return Status::InvalidArgument(fmt::format("--pd-machines {}: the levels multiply to {} machines but --gpus is {}; give --gpus {} or levels multiplying to {}",
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
    if (cur.empty() || cur.size() > 9 || cur.find_first_not_of("0123456789") != std::string::npos || std::stoll(cur) < 1) {
      return Status::InvalidArgument(fmt::format("--gpus '{}': {}; {}", text, cur.empty() ? "an empty entry" : "'" + cur + "' is not a GPU count", fix));
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
    return Status::InvalidArgument(fmt::format("--train-tokens '{}': not a token count; give a positive number with an optional suffix "
                                               "K, M, B or T (10^3, 10^6, 10^9, 10^12), e.g. 300B or 15T", text));
  }
  *out = *v * scale;
  return Status::OK();
}

// --precision and --seq: a gpt: template is rebuilt at the new dtype / sequence
// length (name, path, digest and global batch kept); an explicit layer list is refused.
Status ApplyModelOverrides(const SolveArgs& a, ModelSpec* model, std::vector<std::string>* notes) {
  if (a.seq == 0 && a.precision.empty()) return Status::OK();
  DType dtype = model->dtype;
  if (!a.precision.empty() && (!ParseDType(a.precision, &dtype) || a.precision == "tf32")) {
    return Status::InvalidArgument(fmt::format("--precision: unknown value '{}'{}; use bf16, fp16, fp8 or fp32", a.precision,
                                               DidYouMean(a.precision, {"bf16", "fp16", "fp8", "fp32"})));
  }
  if (a.model.empty()) {
    return Status::InvalidArgument(fmt::format("{} rebuilds a model file; pass --model (a profile's times are fixed)", a.seq > 0 ? "--seq" : "--precision"));
  }
  if (!model->is_gpt && a.seq > 0) {
    return Status::InvalidArgument(fmt::format("--seq {}: {} is an explicit layer list whose shapes its 'input:' fixes; --seq applies to gpt: "
                                               "template models (edit the file's input instead)", a.seq, a.model));
  }
  if (!model->is_gpt) {
    if (dtype == model->dtype) return Status::OK();
    return Status::InvalidArgument(fmt::format("--precision {}: {} is an explicit layer list; set its 'dtype:' key instead "
                                               "(--precision rebuilds gpt: template models only)", a.precision, a.model));
  }
  GptConfig g = model->gpt;
  if (a.seq > 0) g.seq = a.seq;
  if (g.seq == model->gpt.seq && dtype == model->dtype) return Status::OK();
  std::string what;
  if (g.seq != model->gpt.seq) what = fmt::format("--seq {} in place of the file's seq {}", g.seq, model->gpt.seq);
  if (dtype != model->dtype) what += fmt::format("{}precision {} in place of the file's {}", what.empty() ? "" : ", ", DTypeName(dtype), DTypeName(model->dtype));
  ModelSpec m = *model;
  PLANNER_RETURN_IF_ERROR(BuildGptModel(g, dtype, &m));
  *model = std::move(m);
  notes->push_back(fmt::format("model {} solved with {} (plan.yaml's inputs.seq / inputs.dtype; codegen applies them to {})", model->name, what, a.model));
  return Status::OK();
}

std::string JoinInts(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// --interleave / --vp: v >= 2 and pp x v dividing a gpt model's layers (Megatron's rule).
Status CheckInterleave(const SolveArgs& a, const ModelSpec* model, const std::vector<int64_t>& values, const char* flag) {
  const int64_t blocks = model != nullptr && model->is_gpt ? model->gpt.layers : 0;
  for (int64_t v : values) {
    if (v < 2) return Status::InvalidArgument(fmt::format("{} {}: chunks per device start at 2 (v = 1 is the 1f1b schedule)", flag, v));
    for (int64_t p : a.pp) {
      // Or blocks + 2 with the embedding and the loss counted as a layer each (docs/cost_model.md section 4).
      if (blocks > 0 && p >= 1 && blocks % (p * v) != 0 && (p < 2 || (blocks + 2) % (p * v) != 0)) {
        return Status::InvalidArgument(fmt::format("{} {} with --pp {}: pp x v must divide the {} layers of {} (or {} with the embedding and the loss counted as a layer each)",
                                                   flag, v, p, blocks, a.model, blocks + 2));
      }
    }
    if (blocks > 0 && a.pp.empty() && blocks % v != 0 && (blocks + 2) % v != 0) {
      return Status::InvalidArgument(fmt::format("{} {}: v must divide the {} layers of {} (pp x v must, for any pp); choose a divisor of {}", flag, v, blocks, a.model, blocks));
    }
  }
  return Status::OK();
}

// --cp, --zero, --sp and the forced degrees against every --gpus size.
Status CheckLayoutFlags(const SolveArgs& a, const ModelSpec* model, SearchOptions* o) {
  PLANNER_RETURN_IF_ERROR(CheckInterleave(a, model, a.interleave, "--interleave"));
  PLANNER_RETURN_IF_ERROR(CheckInterleave(a, model, a.vp, "--vp"));
  for (int64_t c : a.cp) {
    if (c < 1) return Status::InvalidArgument(fmt::format("--cp {}: every value must be at least 1", c));
    if (c == 1) continue;
    if (model == nullptr || !model->is_gpt) {
      return Status::InvalidArgument(fmt::format("--cp {}: context parallelism splits a sequence; give a gpt: model with --model", c));
    }
    if (model->gpt.seq % (2 * c) != 0) {
      return Status::InvalidArgument(fmt::format("--cp {}: 2 x cp = {} must divide the sequence length {} of {} (causal load balancing "
                                                 "cuts it into 2 x cp chunks); choose a cp dividing {}", c, 2 * c, model->gpt.seq, a.model, model->gpt.seq / 2));
    }
  }
  for (int64_t z : a.zero) {
    if (z < 0 || z > 3) {
      return Status::InvalidArgument(fmt::format("--zero {}: ZeRO stages are 0 (none), 1 (optimizer states: Megatron's distributed optimizer), "
                                                 "2 (and gradients), 3 (and parameters: FSDP); e.g. --zero 0,1", z));
    }
  }
  if (a.sp == "on") o->sequence_parallel = {1};
  else if (a.sp == "off") o->sequence_parallel = {0};
  else if (a.sp == "both") o->sequence_parallel = {0, 1};
  else if (!a.sp.empty()) return Status::InvalidArgument(fmt::format("--sp: unknown value '{}'{}; use on, off or both", a.sp, DidYouMean(a.sp, {"on", "off", "both"})));
  if (a.tp.empty() && a.pp.empty() && a.cp.empty()) return Status::OK();
  const std::vector<int64_t> one = {1};
  std::vector<int64_t> products;
  for (int64_t t : a.tp.empty() ? one : a.tp)
    for (int64_t c : a.cp.empty() ? one : a.cp)
      for (int64_t p : a.pp.empty() ? one : a.pp)
        if (t >= 1 && p >= 1 && std::find(products.begin(), products.end(), t * c * p) == products.end()) products.push_back(t * c * p);
  std::string given;
  if (!a.tp.empty()) given += "--tp " + JoinInts(a.tp);
  if (!a.cp.empty()) given += (given.empty() ? "" : " ") + std::string("--cp ") + JoinInts(a.cp);
  if (!a.pp.empty()) given += (given.empty() ? "" : " ") + std::string("--pp ") + JoinInts(a.pp);
  for (int64_t n : a.gpu_list) {
    bool fits = false;
    for (int64_t x : products) fits = fits || n % x == 0;
    if (fits || products.empty()) continue;
    return Status::InvalidArgument(products.size() == 1
        ? fmt::format("{}: tp x cp x pp = {} does not divide --gpus {}; choose degrees whose product divides the GPU count", given, products[0], n)
        : fmt::format("{}: no tp x cp x pp product ({}) divides --gpus {}; choose degrees whose product divides the GPU count", given, JoinInts(products), n));
  }
  return Status::OK();
}

// -o with several sizes: PATH with ".<gpus>" before its extension (plan.yaml -> plan.1024.yaml).
std::string OutputPathForSize(const std::string& path, int64_t gpus, bool several) {
  if (!several) return path;
  const std::filesystem::path p(path);
  if (!p.has_extension()) return fmt::format("{}.{}", path, gpus);
  return (p.parent_path() / fmt::format("{}.{}{}", p.stem().string(), gpus, p.extension().string())).string();
}

// What every size of a --gpus list shares: the files read, with --seq / --precision applied.
struct SolveInputs {
  ClusterSpec cluster;
  std::string cluster_path, profile_path;
  ModelSpec model;
  Profile profile;
  std::vector<std::string> notes;  // comm curves applied, model overrides
};

// --moe-imbalance and --moe-overlap (docs/cost_model.md, "Expert parallelism").
Status MoeCostFlags(const SolveArgs& a, SearchOptions* o) {
  for (int64_t v : a.etp) {
    if (v < 1) return Status::InvalidArgument(fmt::format("--etp {}: expert tensor-parallel sizes start at 1 (Megatron's default is tp)", v));
  }
  if (!(a.moe_imbalance >= 1) || !std::isfinite(a.moe_imbalance)) {
    return Status::InvalidArgument(fmt::format("--moe-imbalance {}: the busiest expert-parallel rank's tokens over the mean is at least 1; "
                                               "give 1 (balanced routing) or the measured ratio, e.g. 1.2", a.moe_imbalance));
  }
  o->cost.moe_imbalance = a.moe_imbalance;
  if (a.moe_overlap != "on" && a.moe_overlap != "off") {
    return Status::InvalidArgument(fmt::format("--moe-overlap: unknown value '{}'{}; use on (all-to-all hidden behind the MoE layer's compute) or off",
                                               a.moe_overlap, DidYouMean(a.moe_overlap, {"on", "off"})));
  }
  o->cost.moe_overlap = a.moe_overlap == "on";
  return Status::OK();
}

// --dp-comm and --ps-servers (docs/cost_model.md, "Data-parallel communication architectures"); the
// search checks them against the cluster's CPU machines.
Status DpCommFlags(const SolveArgs& a, SearchOptions* o) {
  for (const auto& name : a.dp_comm) {
    DpComm d;
    if (!ParseDpComm(name, &d)) {
      return Status::InvalidArgument(fmt::format("--dp-comm: unknown architecture '{}'{}; choose from {}", name, DidYouMean(name, DpCommNames()), DpCommChoices()));
    }
    if (std::find(o->dp_comms.begin(), o->dp_comms.end(), d) == o->dp_comms.end()) o->dp_comms.push_back(d);
  }
  if (a.ps_servers < -1) return Status::InvalidArgument(fmt::format("--ps-servers {}: give a count of CPU machines, 0 or more", a.ps_servers));
  o->ps_servers = a.ps_servers;
  if (!a.ps_placement.empty() && a.ps_placement != "dedicated" && a.ps_placement != "colocated") {
    return Status::InvalidArgument(fmt::format("--ps-placement: unknown value '{}'{}; use dedicated (servers on the cluster's CPU machines) or colocated "
                                               "(a server on every GPU machine)", a.ps_placement, DidYouMean(a.ps_placement, {"dedicated", "colocated"})));
  }
  o->ps_colocated = a.ps_placement == "colocated";
  o->ps_placement_named = !a.ps_placement.empty();
  if (o->ps_colocated && a.ps_servers > 0) {
    return Status::InvalidArgument(fmt::format("--ps-placement colocated with --ps-servers {}: a co-located ps runs its servers on the GPU machines; "
                                               "drop --ps-servers or use --ps-placement dedicated", a.ps_servers));
  }
  return Status::OK();
}

// The auto search's options for a.gpus GPUs (the flags checked by CheckLayoutFlags).
Status BuildSearchOptions(const SolveArgs& a, const SolveInputs& in, SearchOptions* o) {
  o->gpus = a.gpus;
  o->global_batch = a.global_batch;
  if (o->global_batch == 0 && a.model.empty()) o->global_batch = in.profile.reference_microbatch * a.gpus;
  o->top_k = a.top;
  o->tp = a.tp;
  o->pp = a.pp;
  o->cp = a.cp;
  o->zero = a.zero;
  o->ep = a.ep;
  o->etp = a.etp;
  o->microbatch = a.microbatch;
  o->interleave = a.interleave;
  for (int64_t v : a.vp) {
    if (std::find(o->interleave.begin(), o->interleave.end(), v) == o->interleave.end()) o->interleave.push_back(v);
  }
  PLANNER_RETURN_IF_ERROR(CheckLayoutFlags(a, a.model.empty() ? nullptr : &in.model, o));
  if (!a.replication.empty()) {
    std::string cur;
    for (char ch : a.replication + "-") {
      if (ch == '-') {
        if (cur.empty() || cur.size() > 6 || cur.find_first_not_of("0123456789") != std::string::npos || std::stoll(cur) < 1) {
          return Status::InvalidArgument(fmt::format("--replication '{}': use positive counts joined by '-', e.g. 2-1-1", a.replication));
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
  if (!a.vp.empty() && a.schedules.empty()) o->schedules = {Schedule::kInterleaved};  // --vp V forces Megatron's interleaved layout
  std::vector<std::string> rc_names;  // "block": block recompute, not a Recompute kind (docs/cost_model.md section 5)
  for (const auto& r : a.recompute) (r == "block" ? o->recompute_block = 1 : (rc_names.push_back(r), 0));
  if (!a.recompute.empty() && o->recompute_block != 1) o->recompute_block = 0;
  PLANNER_RETURN_IF_ERROR(ParseList<Recompute>(rc_names, ParseRecompute, {"none", "selective", "full", "block"}, "--recompute", &o->recompute));
  for (const auto& name : a.recompute_modules) {
    RecomputeModule m;
    if (!ParseRecomputeModule(name, &m)) {
      return Status::InvalidArgument(fmt::format("--recompute-modules: unknown module '{}'; choose from {} (Megatron-Core's --recompute-modules)", name,
                                                 fmt::join(RecomputeModuleNames(), ",")));
    }
    o->recompute_modules |= RecomputeBit(m);
  }
  o->cost.dp_overlap = a.dp_overlap;
  for (const auto& [flag, text, out] : {std::tuple{"--overlap-grad-reduce", &a.overlap_grad_reduce, &o->cost.overlap_grad_reduce},
                                        std::tuple{"--overlap-param-gather", &a.overlap_param_gather, &o->cost.overlap_param_gather}}) {
    if (*text != "on" && *text != "off") {
      return Status::InvalidArgument(fmt::format("{}: unknown value '{}'; use on (Megatron's {} flag) or off (as runs without it)", flag, *text, flag));
    }
    *out = *text == "on";
  }
  PLANNER_RETURN_IF_ERROR(MoeCostFlags(a, o));
  PLANNER_RETURN_IF_ERROR(DpCommFlags(a, o));
  o->cost.p2p_overlap = a.p2p_overlap;
  o->cost.scatter_gather = !a.no_scatter_gather;
  o->cost.bytes_per_param = a.bytes_per_param;
  if (!a.grad_dtype.empty()) {
    DType g;
    if (a.grad_dtype == "fp8") return Status::InvalidArgument("--grad-dtype fp8: gradients are not kept in fp8 (FP8 is for GEMM inputs); use fp32, fp16 or bf16");
    if (!ParseDType(a.grad_dtype, &g)) {
      return Status::InvalidArgument(fmt::format("--grad-dtype: unknown value '{}'{}", a.grad_dtype, DidYouMean(a.grad_dtype, {"fp32", "fp16", "bf16"})) +
                                     "; use fp32, fp16 or bf16");
    }
    if (a.model.empty()) return Status::InvalidArgument("--grad-dtype: the gradient bytes are costed from a model's precision; pass --model or drop --grad-dtype");
    if (!GradDTypeAllowed(in.model.dtype, g)) {
      return Status::InvalidArgument(fmt::format("--grad-dtype {}: the model trains in {}; use {}", a.grad_dtype, DTypeName(in.model.dtype),
                                                 GradDTypeChoices(in.model.dtype)));
    }
    o->cost.grad_dtype = g;
  }
  if (a.model.empty() && o->tp.empty()) o->tp = {1};
  o->vertical_sync = a.vertical_sync;
  return Status::OK();
}

// A forced --cp / --zero / --sp value the plan does not carry is said in a note, never hidden.
void NoteUnappliedFlags(const SolveArgs& a, Plan* plan) {
  auto allowed = [](const std::vector<int64_t>& v, int64_t x) { return v.empty() || std::find(v.begin(), v.end(), x) != v.end(); };
  if (!allowed(a.cp, plan->cp)) plan->notes.push_back(fmt::format("--cp {} was asked but the plan has cp {}: the search did not apply it", JoinInts(a.cp), plan->cp));
  if (!allowed(a.ep, plan->ep)) plan->notes.push_back(fmt::format("--ep {} was asked but the plan has ep {}: the search did not apply it", JoinInts(a.ep), plan->ep));
  const int64_t zero = ZeroStageNumber(plan->zero_stage);
  if (!allowed(a.zero, zero)) plan->notes.push_back(fmt::format("--zero {} was asked but the plan has ZeRO {}: the search did not apply it", JoinInts(a.zero), zero));
  if ((a.sp == "on" && plan->tp > 1 && !plan->sequence_parallel) || (a.sp == "off" && plan->sequence_parallel)) {
    plan->notes.push_back(fmt::format("--sp {} was asked but the plan has sequence parallelism {}: the search did not apply it", a.sp, plan->sequence_parallel ? "on" : "off"));
  }
}

// One size: the search (or PipeDream's optimizer), then the plan's provenance and figures.
Status SolveSize(const SolveArgs& a, const SolveInputs& in, Plan* plan) {
  if (a.mode == "pipedream") {
    PipeDreamOptions o;  // --pd-machines with its --pd-bandwidths (checked to match), else the cluster's levels
    o.machines = a.pd_machines;
    o.bandwidths = a.pd_bandwidths;
    o.straight_pipeline = a.straight;
    o.use_fewer_machines = a.fewer;
    o.use_memory_constraint = a.memory_constraint;
    o.memory_bytes = a.memory_bytes > 0 ? a.memory_bytes : 16e9;  // 0: not given (a given value is checked above 0)
    o.activation_compression_ratio = a.acr;
    PLANNER_RETURN_IF_ERROR(BuildPipeDreamPlan(in.profile, in.cluster, a.gpus, o, plan));
  } else {
    CostSource src;
    src.cluster = &in.cluster;
    src.model = a.model.empty() ? nullptr : &in.model;
    src.profile = in.profile_path.empty() ? nullptr : &in.profile;
    SearchOptions o;
    PLANNER_RETURN_IF_ERROR(BuildSearchOptions(a, in, &o));
    SearchStats stats;
    PLANNER_RETURN_IF_ERROR(SolveAuto(src, o, plan, &stats));
    plan->notes.push_back(fmt::format("searched {} candidates, simulated {}", stats.considered, stats.simulated));
    const bool gpt = src.model != nullptr && src.model->is_gpt;
    if (!gpt && a.schedules.empty() && CostSourceLayers(src) > kMaxReplicatedLayers) {
      plan->notes.push_back(fmt::format("PipeDream's per-stage replication was not searched: {} layers is more than the {} its DP is run for (docs/formats.md, \"Limits\")",
                                        CostSourceLayers(src), kMaxReplicatedLayers));
    }
    NoteUnappliedFlags(a, plan);
  }
  if (a.vertical_sync) {
    if (plan->schedule != Schedule::kPipeDream) return Status::Internal("--vertical-sync: the search returned a synchronous plan for --schedule pipedream");
    plan->vertical_sync = true;
    if (a.mode == "pipedream") plan->notes.push_back("vertical sync: PipeDream mode keeps PipeDream's own memory check (--memory-constraint: one weight version per in-flight minibatch); "
                                     "the extra versions vertical sync holds at later stages are not in it (docs/cost_model.md)");
  }
  for (const auto& n : in.notes) plan->notes.push_back(n);
  plan->gpus = a.gpus;
  plan->cluster_name = in.cluster.name;
  plan->cluster_path = in.cluster_path;
  plan->cluster_digest = in.cluster.digest;
  plan->usable_memory_bytes = plan->usable_memory_bytes > 0 ? plan->usable_memory_bytes : in.cluster.UsableMemoryBytes();
  if (!a.model.empty()) {
    plan->model_name = in.model.name;
    plan->model_path = a.model;
    plan->model_digest = in.model.digest;
    plan->dtype = DTypeName(in.model.dtype);
    if (in.model.is_gpt) plan->seq = in.model.gpt.seq;
  } else {
    plan->model_name = in.profile.model;
    plan->dtype = in.profile.dtype;
  }
  plan->profile_path = in.profile_path;
  plan->profile_digest = in.profile_path.empty() ? "" : in.profile.digest;
  plan->cost_source = in.profile_path.empty() ? "analytic" : "profile";
  return Status::OK();
}

std::string PrecisionWithPeak(const ClusterSpec& c) {
  for (const char* d : {"bf16", "fp16", "fp32", "fp8"}) {
    if (c.peak_tflops.count(d) > 0) return d;
  }
  return "<one of the cluster's precisions>";
}

// A model in a precision the cluster has no peak for would cost nothing per FLOP or be refused by
// every candidate ("no configuration divides the problem"): said here, naming what the file has.
// A layer profile's times need no peak (only the MFU does, and the plan says why it has none).
Status CheckClusterPeak(const SolveArgs& a, const SolveInputs& in) {
  if (a.model.empty() || !in.profile_path.empty() || in.cluster.PeakFlops(in.model.dtype) > 0) return Status::OK();
  std::string have;
  for (const auto& [k, v] : in.cluster.peak_tflops) have += (have.empty() ? "" : ", ") + k;
  const char* dtype = DTypeName(in.model.dtype);
  return Status::InvalidArgument(fmt::format("{}: cluster '{}' ({}) has no {} peak (gpu.peak_tflops gives {}) for model {} in {}; add gpu.peak_tflops.{} "
                                             "to the cluster or pass --precision {}", in.cluster_path, in.cluster.name, in.cluster.gpu_name, dtype,
                                             have.empty() ? "none" : have, in.model.name, dtype, dtype, PrecisionWithPeak(in.cluster)));
}

// A layer profile measured in another precision than a gpt: template model's, without --precision:
// the model is planned in the profile's precision (its times are that precision's), and a note says so.
SolveArgs WithProfilePrecision(const SolveArgs& a, const SolveInputs& in) {
  DType measured;
  if (!a.precision.empty() || a.model.empty() || in.profile_path.empty() || !in.model.is_gpt || in.profile.layers.empty() ||
      !ParseDType(in.profile.dtype, &measured) || measured == in.model.dtype) {
    return a;
  }
  SolveArgs b = a;
  b.precision = in.profile.dtype;
  return b;
}

// Reads the cluster, model and profile files and checks them against each other and the flags.
Status LoadSolveInputs(const SolveArgs& a, SolveInputs* in) {
  in->profile_path = a.profile;
  if (a.model.empty() && in->profile_path.empty()) {
    PLANNER_RETURN_IF_ERROR(DiscoverProfile(&in->profile_path));
    LogNote("using profile " + in->profile_path + " (the only *.profile.yaml here)");
  }
  in->cluster_path = a.cluster;
  if (in->cluster_path.empty()) {
    in->cluster_path = DefaultCluster();
    LogNote("using cluster " + in->cluster_path + " (default; choose with --cluster)");
  }
  ClusterSpec& cluster = in->cluster;
  PLANNER_RETURN_IF_ERROR(LoadClusterSpec(in->cluster_path, &cluster));
  const std::string& profile_path = in->profile_path;
  if (!a.model.empty()) PLANNER_RETURN_IF_ERROR(LoadModelSpec(a.model, &in->model));
  if (!profile_path.empty()) PLANNER_RETURN_IF_ERROR(LoadProfile(profile_path, &in->profile));
  const Profile& profile = in->profile;
  const ModelSpec& model = in->model;
  if (!profile_path.empty() && profile.layers.empty()) {
    return Status::InvalidArgument(fmt::format("{} holds only collective curves; pass it as --comm-profile and give --model or a layer profile", profile_path));
  }
  const SolveArgs eff = WithProfilePrecision(a, *in);
  if (eff.precision != a.precision) {
    in->notes.push_back(fmt::format("model {} planned in {}, the precision {} was measured in (the model file says {}; --precision {} plans "
                                    "in that with these times)", model.name, eff.precision, profile_path, DTypeName(model.dtype), DTypeName(model.dtype)));
  }
  PLANNER_RETURN_IF_ERROR(ApplyModelOverrides(eff, &in->model, &in->notes));
  if (!a.precision.empty() && profile_path.empty() && model.dtype == DType::kFp8 && cluster.peak_tflops.count("fp8") == 0) {
    return Status::InvalidArgument(fmt::format("--precision fp8: {}: cluster '{}' ({}) has no FP8 peak; add gpu.peak_tflops.fp8 to it or choose --precision bf16",
                                               in->cluster_path, cluster.name, cluster.gpu_name));
  }
  PLANNER_RETURN_IF_ERROR(CheckClusterPeak(a, *in));
  if (!a.comm_profile.empty()) {
    Profile comm;
    PLANNER_RETURN_IF_ERROR(LoadProfile(a.comm_profile, &comm));
    if (comm.comm.empty()) return Status::InvalidArgument(a.comm_profile + " has no collective curves; make one with mpirun -np 2 planner profile --comm");
    ApplyCommCurves(comm, a.comm_profile, &cluster, &in->notes);
  } else if (!profile.comm.empty()) {
    ApplyCommCurves(profile, profile_path, &cluster, &in->notes);
  }
  for (int64_t n : a.gpu_list) {
    if (n > cluster.TotalGpus()) {
      return Status::InvalidArgument(fmt::format("--gpus {}: {} holds {} GPUs; lower --gpus or enlarge the cluster's topology", n, in->cluster_path, cluster.TotalGpus()));
    }
  }
  if (a.mode == "pipedream") {
    if (profile_path.empty()) return Status::InvalidArgument("pipedream mode needs --profile (e.g. from planner import pipedream)");
    return Status::OK();
  }
  if (!profile_path.empty() && !a.model.empty() && profile.layers.size() != model.layers.size()) {
    return Status::InvalidArgument(fmt::format("{} has {} layers but {} has {}; profile this model or drop one of them",
                                               profile_path, profile.layers.size(), a.model, model.layers.size()));
  }
  if (!profile_path.empty() && !a.model.empty() && profile.dtype != DTypeName(model.dtype)) {
    LogWarning(fmt::format("{} was measured in {} but the model trains in {}; the times may not transfer", profile_path, profile.dtype, DTypeName(model.dtype)));
  }
  const bool cpu_profile = profile.backend == "cpu", cpu_cluster = cluster.gpu_name.rfind("cpu", 0) == 0;
  if (!profile_path.empty() && !profile.device.empty() && profile.device.find(cluster.gpu_name) == std::string::npos && !(cpu_profile && cpu_cluster)) {
    LogWarning(fmt::format("{} was measured on '{}', not on the cluster's {}; its times are used as they are", profile_path, profile.device, cluster.gpu_name));
  }
  return Status::OK();
}

}  // namespace

Runner RegisterSolve(CLI::App& app) {
  auto* cmd = app.add_subcommand("solve", "choose stages, replication, TP/CP/PP/DP, microbatching, schedule, recompute and ZeRO");
  auto a = std::make_shared<SolveArgs>();
  cmd->add_option("--gpus", a->gpus_text, "GPUs to plan for; a list (1024,2048,4096) solves each size and prints a scaling table")->required();
  cmd->add_option("--model", a->model, "model.yaml (analytic costs)");
  cmd->add_option("--profile", a->profile, "measured profile (planner profile / planner import)");
  cmd->add_option("--cluster", a->cluster, "cluster.yaml (default: configs/clusters/dgx-a100.yaml)");
  cmd->add_option("--comm-profile", a->comm_profile, "measured collectives (planner profile --comm) replacing the cluster file's figures for the levels they cover");
  cmd->add_option("--mode", a->mode, "auto (joint TP/PP/DP search) or pipedream (PipeDream's optimizer, exactly)");
  cmd->add_option("-o,--output", a->output, "write the best plan to this YAML file; with a --gpus list, one plan per size with the size before the extension (p.yaml: p.1024.yaml, p.2048.yaml)");
  cmd->add_flag("--json", a->json, "print the plan as JSON on stdout instead of the table (a --gpus list: a JSON array, one plan per size)");
  cmd->add_option("--top", a->top, "plans to rank (best plus runners-up)")->check(CLI::Range(1, 100));
  cmd->add_option("--global-batch", a->global_batch, "samples per iteration (default: the model's)")->check(CLI::PositiveNumber);
  cmd->add_option("--seq", a->seq, "sequence length (tokens per sample) replacing a gpt: model's seq")->check(CLI::PositiveNumber);
  cmd->add_option("--precision", a->precision, "bf16, fp16, fp8 or fp32, replacing a gpt: model's dtype (fp8 needs the cluster's gpu.peak_tflops.fp8)");
  cmd->add_option("--train-tokens", a->train_tokens_text, "tokens to train on (suffixes K M B T: 300B, 15T): adds days and GPU-hours");
  cmd->add_option("--tp", a->tp, "tensor-parallel degrees to try")->delimiter(',');
  cmd->add_option("--pp", a->pp, "pipeline depths to try")->delimiter(',');
  cmd->add_option("--cp", a->cp, "context-parallel sizes to try (2 x cp must divide the sequence; tp x cp x pp must divide --gpus)")->delimiter(',');
  cmd->add_option("--ep", a->ep, "expert-parallel sizes to try (MoE models; each divides the experts; ep x etp divides tp x cp x dp; default: every divisor of the experts)")->delimiter(',');
  cmd->add_option("--etp", a->etp, "expert tensor-parallel sizes to try (MoE models; default: 1 and tp, Megatron's default being tp)")->delimiter(',');
  cmd->add_option("--moe-imbalance", a->moe_imbalance, "busiest expert-parallel rank's routed tokens over the mean, dropless routing (default 1: balanced; set the measured ratio)");
  cmd->add_option("--moe-overlap", a->moe_overlap, "on: the MoE all-to-all hidden behind the layer's compute of the same pass (DualPipe / Megatron's EP overlap), off (default): exposed");
  cmd->add_option("--sp", a->sp, "sequence parallelism with tp > 1: on, off or both (default: the search's)");
  cmd->add_option("--zero", a->zero, "ZeRO stages to try: 0,1,2,3 (1 is Megatron's distributed optimizer, 3 FSDP; default all)")->delimiter(',');
  cmd->add_option("--microbatch", a->microbatch, "microbatch sizes to try")->delimiter(',');
  cmd->add_option("--interleave", a->interleave, "interleaved schedule: chunks per device v to try (default: every v with pp x v dividing the layers)")->delimiter(',');
  cmd->add_option("--vp", a->vp, "Megatron's virtual pipeline size: --interleave's values, and without --schedule the interleaved schedule only")->delimiter(',');
  cmd->add_option("--replication", a->replication, "evaluate this per-stage replication only, e.g. 2-1-1 (TP groups per stage; PipeDream schedule)");
  cmd->add_option("--schedule", a->schedules, "schedules to try: gpipe,1f1b,interleaved,zb-h1,pipedream (asynchronous, per-stage replication),dualpipev (V-shaped, 2 chunks per rank)")->delimiter(',');
  cmd->add_option("--recompute-modules", a->recompute_modules, "selective recompute's modules (Megatron --recompute-modules): core_attn,layernorm,mla_up_proj,moe_act,mlp,moe,shared_experts; default core_attn, and on MLA / MoE models DeepSeek-V3's core_attn,layernorm,mla_up_proj,moe_act tried when core_attn leaves only full recompute fitting")->delimiter(',');
  cmd->add_option("--recompute", a->recompute, "recompute modes to try: none,selective,full,block (block: the first N blocks of each chunk, N the smallest that fits)")->delimiter(',');
  cmd->add_option("--dp-comm", a->dp_comm, "data-parallel gradient sync architectures to choose from: allreduce-ring,allreduce-tree,allreduce-hier,ps,byteps "
                 "(default: every one the cluster can run: the three all-reduces, and ps,byteps when the cluster declares cpu_machines; each is compared in the output)")->delimiter(',');
  cmd->add_option("--ps-servers", a->ps_servers, "CPU machines ps / byteps sum on (default: all the cluster's cpu_machines; ps needs at least 1)");
  cmd->add_option("--ps-placement", a->ps_placement, "where ps's servers run: dedicated (on --ps-servers CPU machines; the default) or colocated "
                 "(a server on every GPU machine, the model sharded over them; needs ps among --dp-comm's architectures)");
  cmd->add_flag("--dp-overlap", a->dp_overlap, "overlap the gradient all-reduce with backward");
  cmd->add_option("--overlap-grad-reduce", a->overlap_grad_reduce, "on (default; Megatron --overlap-grad-reduce: bucketed, behind the last backward) or off (the whole gradient reduction exposed)");
  cmd->add_option("--overlap-param-gather", a->overlap_param_gather, "on (default; Megatron --overlap-param-gather: behind the first forward) or off (exposed)");
  cmd->add_flag("--p2p-overlap", a->p2p_overlap, "hide pipeline sends behind compute");
  cmd->add_flag("--no-scatter-gather", a->no_scatter_gather, "send whole activations between stages when tp > 1");
  cmd->add_option("--bytes-per-param", a->bytes_per_param, "model-state bytes per parameter (default: weights + gradients + optimizer: 18 bf16 / fp8, 16 fp16 / fp32)");
  cmd->add_option("--grad-dtype", a->grad_dtype,
                  "gradient buffer dtype, accumulated over microbatches and reduced in it: fp32, or the model's 16-bit dtype (default Megatron's: "
                  "fp16 for fp16 models, fp32 otherwise; fp32 with fp16 is --accumulate-allreduce-grads-in-fp32, bf16 is --grad-reduce-in-bf16)");
  cmd->add_option("--pd-machines", a->pd_machines, "pipedream mode: machines per level, innermost first (-n)")->delimiter(',');
  cmd->add_option("--pd-bandwidths", a->pd_bandwidths, "pipedream mode: bytes/s per level (-b)")->delimiter(',');
  CLI::Option* memory_opt = cmd->add_option("--memory-bytes", a->memory_bytes, "pipedream mode: memory per machine (-s, default 16e9)");
  cmd->add_flag("--memory-constraint", a->memory_constraint, "pipedream mode: --use_memory_constraint");
  cmd->add_flag("--straight", a->straight, "pipedream mode: --straight_pipeline");
  cmd->add_flag("--fewer-machines", a->fewer, "pipedream mode: --use_fewer_machines");
  cmd->add_flag("--vertical-sync", a->vertical_sync, "PipeDream's vertical sync: every stage runs a minibatch on the input stage's weight version (with --schedule pipedream or --mode pipedream)");
  cmd->add_option("--activation-compression-ratio", a->acr, "pipedream mode: count activation transfers divided by this (0: ignore them; default 1)");
  return [a, memory_opt]() -> Status {
    PLANNER_RETURN_IF_ERROR(ParseGpuList(a->gpus_text, &a->gpu_list));
    if (a->mode != "auto" && a->mode != "pipedream") {
      return Status::InvalidArgument(fmt::format("--mode: unknown value '{}'{}; use auto or pipedream", a->mode, DidYouMean(a->mode, {"auto", "pipedream"})));
    }
    PLANNER_RETURN_IF_ERROR(CheckNumericFlags(*a, memory_opt->count() > 0));
    if (a->mode == "pipedream" && (!a->dp_comm.empty() || a->ps_servers >= 0 || !a->ps_placement.empty())) {
      return Status::InvalidArgument("--dp-comm / --ps-servers / --ps-placement: pipedream mode runs PipeDream's optimizer with its own all-reduce; drop them or use --mode auto");
    }
    if (a->mode == "pipedream" && !a->grad_dtype.empty()) {
      return Status::InvalidArgument("--grad-dtype: pipedream mode costs PipeDream's fixed bytes per parameter from the profile; drop it or use --mode auto --model M");
    }
    if (!a->model.empty() && !a->profile.empty() && a->mode == "pipedream") {
      return Status::InvalidArgument("pipedream mode reads a profile; drop --model");
    }
    if (!a->train_tokens_text.empty()) PLANNER_RETURN_IF_ERROR(ParseTokenCount(a->train_tokens_text, &a->train_tokens));
    if (a->vertical_sync && a->mode != "pipedream" && a->schedules != std::vector<std::string>{"pipedream"}) {
      return Status::InvalidArgument(fmt::format("--vertical-sync: vertical sync needs PipeDream's asynchronous schedule, not {}; add --schedule pipedream "
                                                 "(or --mode pipedream), or drop --vertical-sync", a->schedules.empty() ? std::string("the search's synchronous ones")
                                                                                                                      : fmt::format("--schedule {}", fmt::join(a->schedules, ","))));
    }
    SolveInputs in;
    PLANNER_RETURN_IF_ERROR(LoadSolveInputs(*a, &in));
    const bool several = a->gpu_list.size() > 1;
    std::vector<ScalingRow> rows;
    for (int64_t n : a->gpu_list) {
      SolveArgs one = *a;
      one.gpus = n;
      ScalingRow row;
      row.gpus = n;
      Status s = SolveSize(one, in, &row.plan);
      if (!s.ok() && (!several || s.code() != StatusCode::kInfeasible)) return s;
      if (!s.ok()) row.error = s.message();
      rows.push_back(std::move(row));
    }
    if (several && std::none_of(rows.begin(), rows.end(), [](const ScalingRow& r) { return r.error.empty(); })) {
      return Status::Infeasible(fmt::format("no size of --gpus {} has a plan; --gpus {}: {}", a->gpus_text, rows[0].gpus, rows[0].error));
    }
    if (!a->output.empty()) {
      for (const auto& r : rows) {
        if (!r.error.empty()) continue;
        const std::string path = OutputPathForSize(a->output, r.gpus, several);
        PLANNER_RETURN_IF_ERROR(WriteFileAtomic(path, PlanToYaml(r.plan)));
        LogNote("wrote " + path);
      }
    }
    std::string text;
    if (a->json) {
      for (const auto& r : rows) {
        if (r.error.empty()) text += (text.empty() ? "" : ",\n") + PlanToJson(r.plan);
      }
      if (several) text = "[\n" + text + "]\n";
    } else if (several) {
      text = RenderScalingTable(rows, a->train_tokens);
    } else {
      const Plan& plan = rows[0].plan;
      text = RenderPlanSummary(plan) + (a->train_tokens > 0 ? RenderTrainingTime(plan, a->train_tokens) : "") + "\n" + RenderStageTable(plan);
      const std::string dp_table = RenderDpCommTable(plan);
      if (!dp_table.empty()) text += "\n" + dp_table;
      std::string runners = RenderRunnersUp(plan);
      if (!runners.empty()) text += "\nrunners-up:\n" + runners;
      for (const auto& n : plan.notes) text += "note: " + n + "\n";
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
    return Status::OK();
  };
}

}  // namespace planner
