// PyTorch profiler traces (the Chrome-trace JSON torch.profiler's export_chrome_trace writes with
// record_shapes=True: torchtitan's [profiling], Megatron-LM's --profile --use-pytorch-profiler) read for
// planner calibrate (docs/calibration.md, "Traces"): every GEMM operator (aten::mm, addmm, bmm, _scaled_mm)
// and attention operator (aten::_scaled_dot_product_{flash,cudnn,efficient}_attention and their backwards)
// joined with the GPU kernels it launched (the kernels' "External id" is the operator's), their shapes,
// precisions and summed kernel seconds; and from those, the kernel table (spec/kernel_table.h) measured on
// that GPU: its GEMM ceiling and K half-point per precision, its attention curves levelled to the trace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "spec/kernel_table.h"
#include "spec/profile.h"

namespace planner {

struct TraceGemm {
  double m = 0, n = 0, k = 0;  // C[m, n] = A[m, k] B[k, n] (bmm: the batch folded into m)
  std::string dtype;           // bf16 | fp16 | fp8 | fp32
  double seconds = 0;          // the GPU kernels it launched, summed
  // A Transformer Engine layer whose `fp8` argument the trace does not record (TE 2.10 on): dtype is its input's
  // type, and the run's precision (the plan's) decides whether the GEMM ran in FP8 (UsePlanPrecision).
  bool te_precision_unknown = false;
};

struct TraceAttention {
  std::string kernel;  // cudnn | fa2 (PyTorch's flash kernel is FlashAttention-2's) | efficient
  std::string pass;    // fwd | bwd
  bool causal = false;
  double batch = 0, heads = 0, seq = 0, head_dim = 0;
  double seconds = 0;
  // FlashAttention's FLOP count: 4 b h s^2 d, halved causal; the backward 2.5x.
  double Flops() const;
};

// One collective's NCCL kernel(s) with torch's record_param_comms metadata (torch/csrc/profiler/util.h:
// "Collective name", "dtype", "In msg nelems", "Out msg nelems", "Group size", "Process Group Ranks",
// "Global rank start", "Global rank stride"), from the kernel event's own args or the record_param_comms
// operator of the same External id.
struct TraceCollective {
  std::string collective;      // all_reduce | all_gather | reduce_scatter | all_to_all | send_recv | broadcast
  int64_t group_size = 0;      // ranks in the process group
  std::vector<int64_t> ranks;  // their global ranks (empty: the trace does not say)
  double bytes = 0;            // nccl-tests' size: max(in, out) elements x the dtype's bytes
  double seconds = 0;          // the NCCL kernel(s), summed
};

struct ProfilerTrace {
  std::string path;
  std::string device;  // deviceProperties[0].name ("" for a CPU-only trace)
  int64_t operators = 0, kernels = 0;
  std::vector<TraceGemm> gemms;
  std::vector<TraceAttention> attention;
  std::vector<TraceCollective> collectives;
};

// Transformer Engine GEMMs whose FP8 flag was not recorded take the run's precision (`plan_dtype`, "fp8" or
// another); returns how many.
int64_t UsePlanPrecision(const std::string& plan_dtype, ProfilerTrace* trace);

// Whether `text` looks like a Chrome trace (a JSON object with "traceEvents"), to tell it from a log.
bool LooksLikeProfilerTrace(const std::string& text);
// Reads a trace. InvalidArgument naming the file and how to produce a usable one when it has no
// operators with shapes (record_shapes=False) or no GPU kernels (ProfilerActivity.CUDA missing), or
// when none of its operators is a GEMM or attention.
Status ReadProfilerTrace(const std::string& path, const std::string& text, ProfilerTrace* out);

// The kernel table measured by `traces` on top of `published` (the GPU's table): for each precision with at
// least one GEMM, its ceiling (and, with 3 or more distinct K, its k_half) fitted to the GEMMs' fractions of
// `peak_tflops` (by precision name) through the table's wave and K model; for each measured attention
// (kernel, pass, causal, head dim), the published curve scaled to the trace's mean ratio at its sequence
// lengths (a curve the table lacks: flat at the measured rate). *notes: what was measured, what kept.
Status MeasuredKernelTable(const std::vector<ProfilerTrace>& traces, const KernelTable& published,
                           const std::map<std::string, double>& peak_tflops, KernelTable* out,
                           std::vector<std::string>* notes);
// The collectives of `traces` as comm curves (spec/profile.h, the format planner profile --comm writes):
// per (collective, level, group size), the median seconds at each size and the alpha / busbw fit. The level
// is "node" when the group's ranks share a node of `gpus_per_node` GPUs, else "cluster"; a collective whose
// ranks the trace does not give is skipped and named in *notes. All-gathers and reduce-scatters (ZeRO,
// FSDP, sequence parallelism) also give the level's all_reduce curve where the trace has no all-reduce of
// that group size: a ring all-reduce of M bytes is the reduce-scatter and the all-gather of M bytes, so
// each point counts twice its time (the same busbw). Empty when the traces hold no NCCL kernel.
std::vector<CommCurve> TraceCommCurves(const std::vector<ProfilerTrace>& traces, int64_t gpus_per_node,
                                       std::vector<std::string>* notes);

// The table in the format ParseKernelTable reads (docs/formats.md, "Kernel tables").
std::string KernelTableToYaml(const KernelTable& t, const std::string& header_comment);

}  // namespace planner
