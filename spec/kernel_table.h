// KernelTable: what one GPU's kernels sustain, per operation class, from published kernel
// benchmarks (configs/kernels/*.yaml, embedded in the binary; docs/formats.md "Kernel tables";
// docs/cost_model.md section 2, "Kernel-level compute"): GEMMs by shape and precision, attention
// by kernel, pass, mask, head dim and sequence length, FP8 recipes, memory-bound work's share of
// HBM bandwidth. Plain value type; the lookups are pure and thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "spec/dtype.h"

namespace planner {

struct GemmEfficiency {
  double ceiling = 0;  // large-shape fraction of the precision's peak, wave and K effects divided out
  double k_half = 0;   // K at which a tile's main loop is half its time: factor K / (K + k_half)
};

struct Fp8Recipe {
  double gemm = 1;      // GEMM rate relative to per-tensor scaling
  int amax_passes = 0;  // extra reads of a GEMM input before its cast (current scaling: 1)
  // Bytes per element of one quantized weight as this GPU's FP8 GEMMs read it, forward and backward (file key
  // weight_bytes; absent: 2): the data, its transpose where the GEMM takes TN operands only (Hopper), both
  // orientations and their scales for block-scaled recipes (MXFP8: 2 x (1 + 1/32)). Transformer Engine's cached
  // copy of a bf16 weight, or the weight itself under FP8 parameters (solve --fp8-param-gather).
  double weight_bytes = 2;
  // Bytes per element an FP8 parameter's all-gather moves (file key param_gather_bytes; absent: 1): the FP8 data,
  // or 2 where Megatron-Core gathers the bf16 values and quantizes after (MXFP8).
  double param_gather_bytes = 1;
};

struct AttentionCurve {
  std::string kernel;  // fa2 | fa3 | cudnn
  std::string pass;    // fwd | bwd | both
  bool causal = true;
  int64_t head_dim = 128;
  std::vector<double> tflops;  // at KernelTable::attention_seq
};

struct KernelTable {
  std::string name;  // "h100"
  std::string path;  // the file it came from ("builtin:h100" for an embedded one)
  std::vector<std::string> gpus;
  int64_t sms = 0;
  double memory_efficiency = 0.8;
  std::vector<std::pair<int64_t, int64_t>> tiles;
  std::map<std::string, GemmEfficiency> gemm;  // by precision name (bf16, fp16, fp8)
  std::map<std::string, Fp8Recipe> fp8_recipes;
  std::vector<double> attention_seq;
  std::vector<AttentionCurve> curves;
  // The GPU's SM clock under a power cap (file key `power_clock`, docs/cost_model.md section 2, "Power caps"):
  // at `power_watts` (increasing, the last the TDP), the sustained clock as a fraction of the clock at the TDP.
  // Empty: not published for this table's GPUs (a cap is then not modelled, and solve says so).
  std::vector<double> power_watts, power_clock;

  // The precision's GEMM figures; nullptr when the table has none (fp16 and bf16 stand in for each other).
  const GemmEfficiency* Gemm(DType dtype) const;
  // FP8 recipe `name`'s figures; per-tensor scaling's (Fp8Recipe{}) where the table lists none of that name.
  Fp8Recipe Recipe(const std::string& name) const;
  // Fraction of peak one GEMM of M x K by K x N sustains: ceiling x K / (K + k_half) x the best
  // tile's wave fill, fill = tiles / (ceil(tiles / sms) sms), tiles = ceil(M / tm) ceil(N / tn).
  double GemmFraction(const GemmEfficiency& g, double m, double n, double k) const;
  // The compute clock's fraction under a power cap of `cap_watts`: 1 at or above the TDP (the last point) or with no
  // cap (0); linear between the points; below the first point, the first point's (the curve is not extended).
  double ClockUnderCap(double cap_watts) const;
  // Whether the table has a curve of `kernel`.
  bool HasKernel(const std::string& kernel) const;
  // TFLOP/s of `kernel`'s attention (FlashAttention's FLOP count: 4 s^2 a d, halved causal, backward
  // 2.5x) for one pass ("fwd" | "bwd") at sequence `seq` and head dim `head_dim`: log-linear in seq
  // between the table's points (clamped at its ends), linear in log2(head_dim) between the curves'
  // head dims (clamped). A missing causal backward curve is the non-causal backward x (causal forward
  // / non-causal forward) at the same point; a "both" curve serves either pass. 0 when the kernel has no curve.
  double AttentionTflops(const std::string& kernel, const std::string& pass, bool causal, double head_dim,
                         double seq) const;
  // TFLOP/s of one rank's ring-attention steps (cp >= 2, load-balanced chunks) holding `seq_rank` tokens: one step
  // of the cp is the causal diagonal at seq_rank, the others non-causal blocks at seq_rank / 2, all of equal work,
  // blended by time. 0 when the kernel has no curve.
  double RingStepTflops(const std::string& kernel, const std::string& pass, double head_dim, double seq_rank,
                        double cp) const;
};

// The built-in tables' names (configs/kernels/*.yaml), in the order BuiltinKernelTableFor searches them: "a100",
// "h100", "gb200", "b200".
std::vector<std::string> BuiltinKernelTables();
// Reads a table: a built-in name, or a path to a file in the same format. InvalidArgument naming
// the file, line, field and the fix; NotFound for an unknown name that is no file.
Status LoadKernelTable(const std::string& name_or_path, KernelTable* out);
Status ParseKernelTable(const std::string& path, const std::string& text, KernelTable* out);
// The built-in table whose `gpus` names a substring of `gpu_name` ("H100-SXM5-80GB" -> h100); false when none.
bool BuiltinKernelTableFor(const std::string& gpu_name, KernelTable* out);

}  // namespace planner
