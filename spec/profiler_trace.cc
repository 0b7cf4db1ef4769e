#include "spec/profiler_trace.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "spec/json.h"

namespace planner {

double TraceAttention::Flops() const {
  const double fwd = 4 * batch * heads * seq * seq * head_dim * (causal ? 0.5 : 1.0);
  return pass == "bwd" ? 2.5 * fwd : fwd;
}

int64_t UsePlanPrecision(const std::string& plan_dtype, ProfilerTrace* trace) {
  int64_t n = 0;
  for (TraceGemm& g : trace->gemms) {
    if (!g.te_precision_unknown) continue;
    if (plan_dtype == "fp8") g.dtype = "fp8";
    ++n;
  }
  return n;
}

bool LooksLikeProfilerTrace(const std::string& text) {
  const size_t start = text.find_first_not_of(" \t\r\n");
  return start != std::string::npos && text[start] == '{' && text.find("\"traceEvents\"") != std::string::npos;
}

namespace {

// One operator of interest: which input holds which shape, where is_causal sits in "Concrete Inputs".
struct OpKind {
  const char* name;
  const char* kernel;  // "" for GEMMs
  const char* pass;
  int a, b;    // GEMM: the A and B inputs; attention: a = the query
  int causal;  // attention: the index of is_causal
};
constexpr OpKind kOps[] = {
    {"aten::mm", "", "", 0, 1, -1},
    {"aten::addmm", "", "", 1, 2, -1},
    {"aten::bmm", "", "", 0, 1, -1},
    {"aten::_scaled_mm", "", "", 0, 1, -1},
    // (query, key, value, dropout_p, is_causal, return_debug_mask, scale)
    {"aten::_scaled_dot_product_flash_attention", "fa2", "fwd", 0, -1, 4},
    // (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)
    {"aten::_scaled_dot_product_flash_attention_backward", "fa2", "bwd", 1, -1, 11},
    // (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, return_debug_mask, scale)
    {"aten::_scaled_dot_product_cudnn_attention", "cudnn", "fwd", 0, -1, 6},
    // (grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q, cum_seq_k,
    //  max_q, max_k, dropout_p, is_causal, scale)
    {"aten::_scaled_dot_product_cudnn_attention_backward", "cudnn", "bwd", 1, -1, 14},
    // (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, scale)
    {"aten::_scaled_dot_product_efficient_attention", "efficient", "fwd", 0, -1, 6},
    // (grad_out, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p,
    //  grad_input_mask, is_causal, scale)
    {"aten::_scaled_dot_product_efficient_attention_backward", "efficient", "bwd", 1, -1, 11},
    // The CPU's SDPA (a CPU trace): read, but no kernel table has its curve.
    {"aten::_scaled_dot_product_flash_attention_for_cpu", "cpu", "fwd", 0, -1, 4},
};

std::string DTypeOf(const std::string& t) {
  if (t == "c10::BFloat16") return "bf16";
  if (t == "c10::Half") return "fp16";
  if (t == "float") return "fp32";
  if (t.find("Float8") != std::string::npos) return "fp8";
  return "";
}

// The dims of input `i` of an operator's args; empty when absent.
std::vector<double> Dims(const JsonValue& args, int i) {
  std::vector<double> out;
  const JsonValue* d = args.Get("Input Dims");
  if (d == nullptr || !d->IsArray() || i < 0 || static_cast<size_t>(i) >= d->items.size()) return out;
  for (const JsonValue& x : d->items[static_cast<size_t>(i)].items)
    if (x.IsNumber()) out.push_back(x.number);
  return out;
}

std::string Type(const JsonValue& args, int i) {
  const JsonValue* t = args.Get("Input type");
  if (t == nullptr || !t->IsArray() || i < 0 || static_cast<size_t>(i) >= t->items.size()) return "";
  return t->items[static_cast<size_t>(i)].str;
}

std::string Concrete(const JsonValue& args, int i) {
  const JsonValue* c = args.Get("Concrete Inputs");
  if (c == nullptr || !c->IsArray() || i < 0 || static_cast<size_t>(i) >= c->items.size()) return "";
  return c->items[static_cast<size_t>(i)].str;
}

int64_t ExternalId(const JsonValue& e) {
  const JsonValue* args = e.Get("args");
  const JsonValue* id = args != nullptr ? args->Get("External id") : nullptr;
  if (id == nullptr || !id->IsNumber() || !(id->number >= 0 && id->number < 9e15)) return -1;
  return static_cast<int64_t>(id->number);
}

// One operator's GEMM or attention record; false when its shapes cannot be read.
bool Record(const OpKind& k, const JsonValue& args, double seconds, ProfilerTrace* t) {
  if (k.kernel[0] == '\0') {
    const std::vector<double> a = Dims(args, k.a), b = Dims(args, k.b);
    if (a.size() < 2 || b.size() < 2) return false;
    TraceGemm g;
    g.m = a[a.size() - 2] * (a.size() == 3 ? a[0] : 1);
    g.k = a.back();
    g.n = b.back();
    g.dtype = DTypeOf(Type(args, k.a));
    g.seconds = seconds;
    if (g.dtype.empty() || g.m <= 0 || g.n <= 0 || g.k <= 0) return false;
    t->gemms.push_back(g);
    return true;
  }
  const std::vector<double> q = Dims(args, k.a);
  const std::string causal = Concrete(args, k.causal);
  if (q.size() != 4 || (causal != "True" && causal != "False")) return false;
  if (!(q[0] > 0 && q[1] > 0 && q[2] > 0 && q[3] > 0)) return false;
  TraceAttention a;
  a.kernel = k.kernel;
  a.pass = k.pass;
  a.causal = causal == "True";
  a.batch = q[0], a.heads = q[1], a.seq = q[2], a.head_dim = q[3];
  a.seconds = seconds;
  t->attention.push_back(a);
  return true;
}

// torch's collective names (ProcessGroupNCCL's RECORD_PARAM_COMMS: "allreduce", "_allgather_base",
// "allgather_into_tensor_coalesced", "_reduce_scatter_base", "all_to_all", "alltoall_base", "send", "recv",
// "broadcast", ...) as the comm curves' names; "" for the rest (barrier, init, gather, scatter, reduce).
std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string CollectiveKind(const std::string& raw) {
  const std::string name = Lower(raw);
  if (name.find("reduce_scatter") != std::string::npos || name.find("reducescatter") != std::string::npos)
    return "reduce_scatter";
  if (name.find("allreduce") != std::string::npos || name.find("all_reduce") != std::string::npos) return "all_reduce";
  if (name.find("allgather") != std::string::npos || name.find("all_gather") != std::string::npos) return "all_gather";
  if (name.find("alltoall") != std::string::npos || name.find("all_to_all") != std::string::npos) return "all_to_all";
  if (name == "send" || name == "recv" || name == "sendrecv") return "send_recv";
  if (name.find("broadcast") != std::string::npos) return "broadcast";
  return "";
}

// Bytes per element of torch's scalar type names (c10::toString of ScalarType); 0 unknown.
double ScalarBytes(const std::string& t) {
  static const std::map<std::string, double> kBytes = {{"BFloat16", 2},
                                                       {"Half", 2},
                                                       {"Float", 4},
                                                       {"Double", 8},
                                                       {"Byte", 1},
                                                       {"Char", 1},
                                                       {"Bool", 1},
                                                       {"Short", 2},
                                                       {"Int", 4},
                                                       {"Long", 8},
                                                       {"Float8_e4m3fn", 1},
                                                       {"Float8_e5m2", 1},
                                                       {"Float8_e4m3fnuz", 1},
                                                       {"Float8_e5m2fnuz", 1}};
  auto it = kBytes.find(t);
  return it == kBytes.end() ? 0 : it->second;
}

double Number(const JsonValue& args, const char* key, double otherwise) {
  const JsonValue* v = args.Get(key);
  return v != nullptr && v->IsNumber() ? v->number : otherwise;
}

// "Process Group Ranks" ("[0, 8, 16]", a string in kineto's traces, or an array); else the ranks from
// "Global rank start" / "Global rank stride" when set (>= 0); empty when neither says.
std::vector<int64_t> GroupRanks(const JsonValue& args, int64_t group_size) {
  std::vector<int64_t> ranks;
  const JsonValue* r = args.Get("Process Group Ranks");
  if (r != nullptr && r->IsArray()) {
    for (const JsonValue& x : r->items)
      if (x.IsNumber() && x.number >= 0 && x.number < 1e9) ranks.push_back(static_cast<int64_t>(x.number));
  } else if (r != nullptr && r->IsString() && r->str.find("...") == std::string::npos) {
    int64_t cur = -1;
    for (char c : r->str + ",") {
      if (c >= '0' && c <= '9') {
        cur = (cur < 0 ? 0 : cur) * 10 + (c - '0');
        if (cur > 1000000000) return {};
      } else if (cur >= 0) {
        ranks.push_back(cur);
        cur = -1;
      }
    }
  }
  if (static_cast<int64_t>(ranks.size()) == group_size) return ranks;
  ranks.clear();
  const double start = Number(args, "Global rank start", -1), stride = Number(args, "Global rank stride", -1);
  if (start >= 0 && stride > 0 && start < 1e9 && stride < 1e9)
    for (int64_t i = 0; i < group_size; ++i)
      ranks.push_back(static_cast<int64_t>(start) + i * static_cast<int64_t>(stride));
  return ranks;
}

// A collective from its metadata and kernel seconds; false when it is not one the curves hold.
bool RecordCollective(const JsonValue& args, double seconds, ProfilerTrace* t) {
  const JsonValue* name = args.Get("Collective name");
  const JsonValue* dtype = args.Get("dtype");
  if (name == nullptr || !name->IsString() || dtype == nullptr || !dtype->IsString()) return false;
  TraceCollective c;
  c.collective = CollectiveKind(name->str);
  const double n = Number(args, "Group size", 0);
  const double elements = std::max(Number(args, "In msg nelems", 0), Number(args, "Out msg nelems", 0));
  if (c.collective.empty() || !(n >= 2 && n < 1e9) || !(elements > 0 && elements < 1e18)) return false;
  c.group_size = static_cast<int64_t>(n);
  c.bytes = elements * ScalarBytes(dtype->str);
  c.ranks = GroupRanks(args, c.group_size);
  c.seconds = seconds;
  if (!(c.bytes > 0)) return false;
  t->collectives.push_back(std::move(c));
  return true;
}

// Transformer Engine 2.x's layers (TE 2.1 - 2.9 argument order): the autograd Functions are the operators
// (PyTorch records Function.apply under the class name, its tensor, None and primitive arguments in order),
// and their GEMM kernels launch under them directly: TE calls cuBLASLt from its own extension
// (tex.generic_gemm), which records no operator. The forward's GEMM is Y = X W^T, W [N, K], X [..., K].
struct TeGemmOp {
  const char* name;
  int weight, input, fp8_flag;  // Input Dims indices; Concrete Inputs index of the `fp8` argument
};
constexpr TeGemmOp kTeGemms[] = {
    {"_Linear", 0, 1, 4},           // (weight, inp, bias, is_first_microbatch, fp8, ...)
    {"_LayerNormLinear", 3, 0, 7},  // (inp, ln_weight, ln_bias, weight, bias, eps, is_first_microbatch, fp8, ...)
};

// A GEMM kernel by its name: cuBLASLt's Hopper kernels (nvjet_*, sm90_xmma_gemm_*) and CUTLASS / cuBLAS *gemm*.
bool IsGemmKernel(const JsonValue& e) {
  const JsonValue* name = e.Get("name");
  if (name == nullptr || !name->IsString()) return false;
  const std::string n = Lower(name->str);
  return n.rfind("nvjet", 0) == 0 || n.find("gemm") != std::string::npos;
}

bool RecordTeGemm(const TeGemmOp& k, const JsonValue& args, double seconds, ProfilerTrace* t) {
  const std::vector<double> w = Dims(args, k.weight);
  // The input: at k.input, or one later (TE 2.15's _Linear takes a weight workspace, W's shape, before it).
  int input = -1;
  for (int i : {k.input, k.input + 1}) {
    const std::vector<double> x = Dims(args, i);
    if (input < 0 && x.size() >= 2 && w.size() == 2 && x.back() == w[1] && x != w) input = i;
  }
  if (input < 0 || !(seconds > 0)) return false;
  const std::vector<double> x = Dims(args, input);
  TraceGemm g;
  g.m = 1;
  for (size_t i = 0; i + 1 < x.size(); ++i) g.m *= x[i];
  g.k = x.back();
  g.n = w[0];
  const std::string fp8 = Concrete(args, k.fp8_flag);
  g.te_precision_unknown = fp8 != "True" && fp8 != "False";
  g.dtype = fp8 == "True" ? "fp8" : DTypeOf(Type(args, input));
  if (g.dtype.empty() || !(g.m > 0 && g.n > 0 && g.k > 0)) return false;
  g.seconds = seconds;
  t->gemms.push_back(g);
  return true;
}

// TE's cuDNN fused attention (FusedAttnFunc, its forward): q, k, v at Input Dims 9, 10, 11 (TE 2.4 on: two page
// tables before them) or 7, 8, 9 (earlier), in Megatron's sbhd layout [s, b, h, d]. The mask type is a string
// argument, which PyTorch does not record: the attention is taken as causal (GPT training).
bool RecordTeAttention(const JsonValue& args, double seconds, ProfilerTrace* t) {
  for (int q : {9, 7}) {
    const std::vector<double> a = Dims(args, q), b = Dims(args, q + 1), c = Dims(args, q + 2);
    if (a.size() != 4 || b.size() != 4 || c.size() != 4 || a[3] != b[3] || a[1] != b[1]) continue;
    if (!(a[0] > 0 && a[1] > 0 && a[2] > 0 && a[3] > 0 && seconds > 0)) return false;
    TraceAttention x;
    x.kernel = "cudnn";
    x.pass = "fwd";
    x.causal = true;
    x.seq = a[0], x.batch = a[1], x.heads = a[2], x.head_dim = a[3];
    x.seconds = seconds;
    t->attention.push_back(x);
    return true;
  }
  return false;
}

bool IsNcclKernel(const JsonValue& e) {
  const JsonValue* name = e.Get("name");
  return name != nullptr && name->IsString() && name->str.rfind("nccl", 0) == 0;
}

}  // namespace

Status ReadProfilerTrace(const std::string& path, const std::string& text, ProfilerTrace* out) {
  JsonValue root;
  PLANNER_RETURN_IF_ERROR(ParseJson(path, text, &root));
  const JsonValue* events = root.Get("traceEvents");
  if (events == nullptr || !events->IsArray())
    return Status::InvalidArgument(fmt::format(
        "{}: not a PyTorch profiler trace (no traceEvents array); write one with prof.export_chrome_trace(...)", path));
  ProfilerTrace t;
  t.path = path;
  const JsonValue* props = root.Get("deviceProperties");
  if (props != nullptr && props->IsArray() && !props->items.empty() && props->items[0].Get("name") != nullptr)
    t.device = props->items[0].Get("name")->str;
  std::unordered_map<int64_t, double> kernel_us;            // External id -> the kernels' summed microseconds
  std::unordered_map<int64_t, double> gemm_us;              // the same, GEMM kernels only (TE's layers)
  std::unordered_map<int64_t, const JsonValue*> comm_args;  // External id of NCCL kernels -> their metadata
  bool shapes = false;
  for (const JsonValue& e : events->items) {
    const JsonValue* cat = e.Get("cat");
    if (cat == nullptr || !cat->IsString()) continue;
    if (cat->str == "kernel") {
      ++t.kernels;
      const JsonValue* dur = e.Get("dur");
      const int64_t id = ExternalId(e);
      if (dur != nullptr && dur->IsNumber() && dur->number > 0 && id >= 0) {
        kernel_us[id] += dur->number;
        if (IsGemmKernel(e)) gemm_us[id] += dur->number;
        const JsonValue* args = e.Get("args");
        if (IsNcclKernel(e))  // its own metadata (torch 2.4 on) or, until the operator is read, none
          comm_args[id] = args != nullptr && args->Get("Collective name") != nullptr ? args : nullptr;
      }
    } else if (cat->str == "cpu_op") {
      ++t.operators;
      const JsonValue* args = e.Get("args");
      shapes = shapes || (args != nullptr && args->Get("Input Dims") != nullptr);
    }
  }
  if (t.operators == 0 || !shapes)
    return Status::InvalidArgument(fmt::format(
        "{}: {} without operator shapes; profile with torch.profiler.profile(record_shapes=True) (torchtitan records "
        "them; Megatron-LM main: --pytorch-profiler-collect-shapes)",
        path, t.operators == 0 ? "no CPU operators" : "operators"));
  if (t.kernels == 0)
    return Status::InvalidArgument(fmt::format(
        "{}: no GPU kernels (a CPU-only trace); profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] "
        "on the GPU",
        path));
  for (const JsonValue& e : events->items) {
    const JsonValue* cat = e.Get("cat");
    const JsonValue* name = e.Get("name");
    const JsonValue* args = e.Get("args");
    if (cat == nullptr || cat->str != "cpu_op" || name == nullptr || args == nullptr) continue;
    if (name->str == "record_param_comms") {
      auto c = comm_args.find(ExternalId(e));
      if (c != comm_args.end() && c->second == nullptr) c->second = args;
      continue;
    }
    for (const TeGemmOp& te : kTeGemms) {
      auto g = gemm_us.find(ExternalId(e));
      if (name->str == te.name && g != gemm_us.end()) RecordTeGemm(te, *args, g->second * 1e-6, &t);
    }
    if (name->str == "FusedAttnFunc") {
      auto a = kernel_us.find(ExternalId(e));
      if (a != kernel_us.end()) RecordTeAttention(*args, a->second * 1e-6, &t);
      continue;
    }
    const OpKind* k = nullptr;
    for (const OpKind& o : kOps)
      if (name->str == o.name) k = &o;
    if (k == nullptr) continue;
    auto it = kernel_us.find(ExternalId(e));
    if (it == kernel_us.end() || it->second <= 0) continue;
    Record(*k, *args, it->second * 1e-6, &t);
  }
  std::vector<std::pair<int64_t, const JsonValue*>> comms(comm_args.begin(), comm_args.end());
  std::sort(comms.begin(), comms.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [id, args] : comms)
    if (args != nullptr) RecordCollective(*args, kernel_us[id] * 1e-6, &t);
  if (t.gemms.empty() && t.attention.empty() && t.collectives.empty())
    return Status::InvalidArgument(fmt::format(
        "{}: {} kernels, but none launched by a GEMM (aten::mm, addmm, bmm, _scaled_mm; Transformer Engine's _Linear, "
        "_LayerNormLinear), attention operator (aten::_scaled_dot_product_*_attention, TE's FusedAttnFunc) with its "
        "shapes or NCCL collective with torch's record_param_comms metadata; profile the training steps themselves",
        path, t.kernels));
  *out = std::move(t);
  return Status::OK();
}

namespace {

double Wave(const KernelTable& t, double m, double n) {
  const GemmEfficiency unit{1.0, 0.0};
  return t.GemmFraction(unit, m, n, 1e30);  // the wave fill alone (K factor 1)
}

// Fits {ceiling, k_half} of one precision to measured fractions.
GemmEfficiency FitGemm(const KernelTable& t, const std::vector<TraceGemm>& g, double peak, double k_half_published,
                       bool* fitted_k_half) {
  std::set<double> ks;
  for (const TraceGemm& x : g) ks.insert(x.k);
  *fitted_k_half = ks.size() >= 3;
  std::vector<double> candidates;
  if (*fitted_k_half) {
    for (double kh = 0; kh <= 8192; kh = kh < 16 ? kh + 16 : kh * 1.02) candidates.push_back(kh);
  } else {
    candidates.push_back(k_half_published);
  }
  GemmEfficiency best{0, 0};
  double best_sse = INFINITY;
  for (double kh : candidates) {
    double sum = 0;
    for (const TraceGemm& x : g) {
      const double frac = 2 * x.m * x.n * x.k / x.seconds / (peak * 1e12);
      sum += std::log(frac / (x.k / (x.k + kh) * Wave(t, x.m, x.n)));
    }
    const double c = std::exp(sum / static_cast<double>(g.size()));
    double sse = 0;
    for (const TraceGemm& x : g) {
      const double frac = 2 * x.m * x.n * x.k / x.seconds / (peak * 1e12);
      const double r = std::log(frac / (c * x.k / (x.k + kh) * Wave(t, x.m, x.n)));
      sse += r * r;
    }
    if (sse < best_sse) best_sse = sse, best = {c, kh};
  }
  return best;
}

}  // namespace

Status MeasuredKernelTable(const std::vector<ProfilerTrace>& traces, const KernelTable& published,
                           const std::map<std::string, double>& peak_tflops, KernelTable* out,
                           std::vector<std::string>* notes) {
  KernelTable t = published;
  t.name = published.name + "-measured";
  // The trace ran at its GPUs' power: its rates already carry any cap, which must not be applied again.
  t.power_watts.clear();
  t.power_clock.clear();
  std::map<std::string, std::vector<TraceGemm>> by_dtype;
  std::map<std::tuple<std::string, std::string, bool, double>, std::vector<TraceAttention>> by_curve;
  for (const ProfilerTrace& tr : traces) {
    for (const TraceGemm& g : tr.gemms) by_dtype[g.dtype].push_back(g);
    for (const TraceAttention& a : tr.attention) by_curve[{a.kernel, a.pass, a.causal, a.head_dim}].push_back(a);
  }
  for (const auto& [dtype, g] : by_dtype) {
    auto peak = peak_tflops.find(dtype);
    if (peak == peak_tflops.end() || dtype == "fp32") {
      notes->push_back(
          fmt::format("{} {} GEMM(s) measured, no {} entry to fit (no peak or an fp32 GEMM)", g.size(), dtype, dtype));
      continue;
    }
    auto old = t.gemm.find(dtype);
    const double k_half = old != t.gemm.end() ? old->second.k_half : 256;
    bool fitted_k_half = false;
    const GemmEfficiency e = FitGemm(t, g, peak->second, k_half, &fitted_k_half);
    if (!(e.ceiling > 0) || e.ceiling > 1)
      return Status::InvalidArgument(fmt::format(
          "{}: the trace's {} GEMMs run at {:.2f} of the cluster's {} peak {} TFLOP/s once waves and K are divided out "
          "(above 1 is faster than the GPU): the cluster's peak or the trace's GPU is wrong; give the plan of a run on "
          "this GPU",
          traces.front().path, dtype, e.ceiling, dtype, peak->second));
    notes->push_back(
        fmt::format("gemm {}: measured from {} GEMM(s): ceiling {:.3f} (published {:.3f}), k_half {:.0f} ({})", dtype,
                    g.size(), e.ceiling, old != t.gemm.end() ? old->second.ceiling : 0.0, e.k_half,
                    fitted_k_half ? "fitted" : "kept: fewer than 3 distinct K"));
    t.gemm[dtype] = e;
  }
  for (const auto& [key, list] : by_curve) {
    const auto& [kernel, pass, causal, head_dim] = key;
    if (kernel == "cpu" || kernel == "efficient") {
      notes->push_back(fmt::format("attention {} {}: {} call(s) not tabled (no engine runs it on a GPU)", kernel, pass,
                                   list.size()));
      continue;
    }
    double log_ratio = 0, log_rate = 0;
    bool published_curve = true;
    auto bf16 = peak_tflops.find("bf16");
    for (const TraceAttention& a : list) {
      const double measured = a.Flops() / a.seconds / 1e12;
      if (bf16 != peak_tflops.end() && !(measured <= bf16->second))
        return Status::InvalidArgument(fmt::format(
            "{}: attention {} {} at {:.0f} TFLOP/s, above the cluster's bf16 peak {} TFLOP/s (faster than the GPU): "
            "the trace's shapes or durations are not of one call, or the plan is of another GPU",
            traces.front().path, kernel, pass, measured, bf16->second));
      const double pub = published.AttentionTflops(kernel, pass, causal, head_dim, a.seq);
      published_curve = published_curve && pub > 0;
      log_ratio += pub > 0 ? std::log(measured / pub) : 0;
      log_rate += std::log(measured);
    }
    const double n = static_cast<double>(list.size());
    AttentionCurve c;
    c.kernel = kernel;
    c.pass = pass;
    c.causal = causal;
    c.head_dim = static_cast<int64_t>(head_dim);
    for (double s : t.attention_seq)
      c.tflops.push_back(published_curve
                             ? published.AttentionTflops(kernel, pass, causal, head_dim, s) * std::exp(log_ratio / n)
                             : std::exp(log_rate / n));
    t.curves.erase(std::remove_if(t.curves.begin(), t.curves.end(),
                                  [&](const AttentionCurve& x) {
                                    return x.kernel == kernel && x.pass == pass && x.causal == causal &&
                                           x.head_dim == c.head_dim;
                                  }),
                   t.curves.end());
    t.curves.push_back(c);
    notes->push_back(fmt::format(
        "attention {} {} {} d={:.0f}: {} call(s), {}", kernel, pass, causal ? "causal" : "non-causal", head_dim,
        list.size(),
        published_curve ? fmt::format("the published curve x{:.3f}", std::exp(log_ratio / n))
                        : fmt::format("flat at {:.0f} TFLOP/s (no published curve)", std::exp(log_rate / n))));
  }
  *out = std::move(t);
  return Status::OK();
}

std::string KernelTableToYaml(const KernelTable& t, const std::string& header_comment) {
  std::string o = header_comment;
  o += fmt::format("format_version: 1\nname: {}\ngpus: [", t.name);
  for (size_t i = 0; i < t.gpus.size(); ++i) o += (i ? ", " : "") + t.gpus[i];
  o += fmt::format("]\nsms: {}\nmemory_efficiency: {:.6g}\n", t.sms, t.memory_efficiency);
  if (!t.power_watts.empty())
    o += fmt::format("power_clock: {{watts: [{}], clock: [{}]}}\n", fmt::join(t.power_watts, ", "),
                     fmt::join(t.power_clock, ", "));
  o += "gemm:\n  tiles: [";
  for (size_t i = 0; i < t.tiles.size(); ++i)
    o += fmt::format("{}[{}, {}]", i ? ", " : "", t.tiles[i].first, t.tiles[i].second);
  o += "]\n";
  for (const auto& [p, g] : t.gemm)
    o += fmt::format("  {}: {{ceiling: {:.6g}, k_half: {:.6g}}}\n", p, g.ceiling, g.k_half);
  if (!t.fp8_recipes.empty()) {
    o += "fp8_recipes:\n";
    for (const auto& [name, r] : t.fp8_recipes)
      o += fmt::format("  {}: {{gemm: {:.6g}, amax_passes: {}, weight_bytes: {:.6g}, param_gather_bytes: {:.6g}}}\n",
                       name, r.gemm, r.amax_passes, r.weight_bytes, r.param_gather_bytes);
  }
  o += "attention:\n  seq: [";
  for (size_t i = 0; i < t.attention_seq.size(); ++i) o += fmt::format("{}{:.0f}", i ? ", " : "", t.attention_seq[i]);
  o += "]\n  curves:\n";
  for (const AttentionCurve& c : t.curves) {
    o += fmt::format("    - {{kernel: {}, pass: {}, causal: {}, head_dim: {}, tflops: [", c.kernel, c.pass,
                     c.causal ? "true" : "false", c.head_dim);
    for (size_t i = 0; i < c.tflops.size(); ++i) o += fmt::format("{}{:.6g}", i ? ", " : "", c.tflops[i]);
    o += "]}\n";
  }
  return o;
}

namespace {

// One curve from (bytes, seconds) samples: the median seconds per size, then the alpha / busbw fit (through
// the origin when only one size was seen: its latency cannot be told from its bandwidth).
CommCurve FitTraceCurve(const std::string& collective, const std::string& level, int64_t group_size,
                        std::vector<std::pair<double, double>> samples) {
  CommCurve c;
  c.collective = collective;
  c.level = level;
  c.group_size = group_size;
  c.backend = "nccl";
  std::sort(samples.begin(), samples.end());
  for (size_t i = 0; i < samples.size();) {
    size_t j = i;
    while (j < samples.size() && samples[j].first == samples[i].first) ++j;
    const size_t mid = i + (j - i) / 2;
    const double median = (j - i) % 2 == 1 ? samples[mid].second : (samples[mid - 1].second + samples[mid].second) / 2;
    c.points.emplace_back(samples[i].first, median);
    i = j;
  }
  double beta = 0;
  if (c.points.size() == 1) {
    c.alpha_s = 0;
    beta = c.points[0].second / c.points[0].first;
  } else {
    FitAlphaBeta(c.points, &c.alpha_s, &beta);
  }
  c.busbw_GBps = beta > 0 ? BusBandwidthFactor(collective, static_cast<int>(group_size)) / beta / 1e9 : 0;
  return c;
}

}  // namespace

std::vector<CommCurve> TraceCommCurves(const std::vector<ProfilerTrace>& traces, int64_t gpus_per_node,
                                       std::vector<std::string>* notes) {
  std::map<std::tuple<std::string, std::string, int64_t>, std::vector<std::pair<double, double>>> samples;
  int64_t unplaced = 0, total = 0;
  for (const ProfilerTrace& t : traces) {
    for (const TraceCollective& c : t.collectives) {
      ++total;
      if (c.ranks.empty() || gpus_per_node < 1) {
        ++unplaced;
        continue;
      }
      const bool one_node = std::all_of(c.ranks.begin(), c.ranks.end(), [&](int64_t r) {
        return r / gpus_per_node == c.ranks.front() / gpus_per_node;
      });
      samples[{c.collective, one_node ? "node" : "cluster", c.group_size}].emplace_back(c.bytes, c.seconds);
    }
  }
  if (unplaced > 0)
    notes->push_back(fmt::format(
        "{} of {} collective(s) skipped: the trace does not give their group's ranks (Process Group Ranks, torch 2.2 "
        "on), so their level (node or cluster) is unknown",
        unplaced, total));
  std::vector<CommCurve> out;
  std::set<std::pair<std::string, int64_t>> with_all_reduce;
  for (const auto& [key, s] : samples) {
    const auto& [collective, level, n] = key;
    out.push_back(FitTraceCurve(collective, level, n, s));
    if (collective == "all_reduce") with_all_reduce.insert({level, n});
    notes->push_back(fmt::format("{} over {} ranks ({}): {} call(s), {} size(s), busbw {:.1f} GB/s, alpha {:.1f} us",
                                 collective, n, level, s.size(), out.back().points.size(), out.back().busbw_GBps,
                                 out.back().alpha_s * 1e6));
  }
  std::map<std::pair<std::string, int64_t>, std::vector<std::pair<double, double>>> halves;
  for (const auto& [key, s] : samples) {
    const auto& [collective, level, n] = key;
    if ((collective != "all_gather" && collective != "reduce_scatter") || with_all_reduce.count({level, n})) continue;
    for (const auto& [bytes, seconds] : s) halves[{level, n}].emplace_back(bytes, 2 * seconds);
  }
  for (const auto& [key, s] : halves) {
    out.push_back(FitTraceCurve("all_reduce", key.first, key.second, s));
    notes->push_back(fmt::format(
        "all_reduce over {} ranks ({}): from {} reduce-scatter / all-gather call(s) (a ring all-reduce is the two), "
        "busbw {:.1f} GB/s",
        key.second, key.first, s.size(), out.back().busbw_GBps));
  }
  return out;
}

}  // namespace planner
