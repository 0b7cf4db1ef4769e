// EngineSpec: how one training engine runs a plan (configs/engines/*.yaml, embedded in the binary;
// docs/formats.md "Engine files"; docs/cost_model.md section 2, "Engines"): the attention kernel it
// calls, its FP8 recipe, the share of the kernel tables' rates it sustains per operation class, the
// elementwise traffic of its unfused kernels, what its overlaps hide and what they cost, its memory
// behaviour. Plain value type.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "spec/dtype.h"
#include "spec/model_state.h"

namespace planner {

// The calibration band of one precision on an engine (docs/cost_model.md section 2, "Bands"): the signed
// errors of predicted throughput, (predicted - published) / published, that bench/calibrate.py's runs span
// joined with the published check runs of dense models made on the engine (widened to include 0; with fewer than 3
// of both, with the whole set's spread). Measured throughput is
// expected between predicted / (1 + high) and predicted / (1 + low).
struct EngineBand {
  std::string precision;  // "bf16", "fp16", "fp8"
  double low = 0, high = 0;
  int64_t runs = 0;  // the engine's calibration runs at this precision
  // Published check runs of dense models on this engine and precision joined with the calibration runs
  // (file key `checks`; absent: 0).
  int64_t checks = 0;
};

struct EngineSpec {
  std::string name;                             // "megatron-core"
  std::string path;                             // "builtin:megatron-core" or the file read
  std::string attention = "cudnn";              // the flash-attention kernel it calls (a kernel table's name)
  std::vector<std::string> attention_fallback;  // tried in order when the table lacks `attention`
  std::string fp8_recipe = "delayed";
  double sustained_gemm = 1, sustained_attention = 1, sustained_memory = 1;
  // FP8 GEMMs' sustained share (file key sustained.gemm_fp8); below 0: gemm's.
  double sustained_gemm_fp8 = -1;
  double SustainedGemm(DType dtype) const {
    return dtype == DType::kFp8 && sustained_gemm_fp8 > 0 ? sustained_gemm_fp8 : sustained_gemm;
  }
  double elementwise_traffic = 1;  // memory-bound bytes relative to the fused kernels the layer model counts
  double fp8_cast_fused = 0.5;     // share of FP8 input casts fused into the producing kernel
  bool grad_reduce_overlap = true;
  // ZeRO-1/2's all-gather of the updated parameters after the step overlapped with the next forward (file key
  // overlap.param_gather: Megatron --overlap-param-gather; false: DeepSpeed's ZeRO-1/2 gathers in step(), exposed).
  bool param_gather_overlap = true;
  // ZeRO-3's per-layer parameter gathers prefetched ahead of their use (overlap.param_prefetch: FSDP2, DeepSpeed's
  // stage3_prefetch_bucket_size, Megatron FSDP); false: each gathered when its layer runs, exposed.
  bool param_prefetch_overlap = true;
  // The gradient reduce overlapped with backward under pipelining too (file key overlap.grad_reduce_with_pp);
  // false: a pipelined run reduces after its last microbatch, exposed (DeepSpeed's PipelineEngine).
  bool grad_reduce_overlap_pp = true;
  double tp_comm_overlap_hidden = 0;  // share of TP collectives hidden when TP communication overlap is on
  // Share of the MoE all-to-all run beside compute with EP overlap (--moe-overlap on); 0: the engine has no EP
  // overlap (the file key absent), and `--moe-overlap on` is refused on it.
  double moe_a2a_hidden = 0;
  double compute_slowdown = 0;  // compute seconds lost per second of communication hidden behind it
  // The attention core's rate in ring attention's steps (cp > 1) against one GPU's kernel at the steps'
  // lengths (file key cp_ring: {fwd, bwd}): per-step softmax-statistics merges and output corrections,
  // dq / dk / dv accumulation between steps.
  double cp_ring_fwd = 1, cp_ring_bwd = 1;
  // cp_ring.with_exchange: the shares were measured with the ring's KV exchange running beside the steps, so
  // they carry its interference: no compute_slowdown is added on the hidden exchange (it would count it twice).
  bool cp_ring_with_exchange = false;
  // Context parallelism's KV exchanges it runs as the planner costs them (file key `cp_comm_types`; --cp-comm-type),
  // and why not the others (`cp_comm_reason`: the error's words).
  std::vector<std::string> cp_comm_types = {"p2p"};
  std::string cp_comm_reason;
  // MoE token dispatchers it runs (file key `moe_dispatchers`; --moe-dispatcher): alltoall (one copy per
  // routed expert) and flex (deduplicated per node, DeepEP).
  std::vector<std::string> moe_dispatchers = {"alltoall"};
  // Flex dispatch's two hops (file key `moe_flex_hops`): serial (a copy's NVLink forward after its network
  // hop, the levels' times add) or overlapped (pipelined so the slowest level sets the time).
  bool moe_flex_serial = true;
  // Where a weight-gradient GEMM's output goes (file key `wgrad_accumulation`): fused, accumulated by the GEMM into
  // the gradient buffer (beta 1: read and write in its dtype; Megatron --gradient-accumulation-fusion), or separate,
  // written in the model's dtype as a new tensor (autograd's; a later add, with gradient accumulation, not costed).
  bool wgrad_accumulation_fused = false;
  // What selective activation checkpointing keeps of the outputs its policy saves (file key `sac_saves`): all (eager
  // PyTorch's checkpoint keeps every MUST_SAVE output) or read (torch.compile's partitioner saves a MUST_SAVE output only
  // where the backward reads it: torch/_functorch/partitioners.py). op_sac's w2 output is the one that differs.
  bool sac_saves_unread = true;
  // HBM bytes per parameter a separate gradient-accumulation pass moves after every microbatch's backward, by the
  // dtype gradients accumulate in (file key `grad_accumulation_bytes: {fp32: B, bf16: B, fp16: B}`; absent: not
  // costed): DeepSpeed's BF16_Optimizer casts each bf16 gradient to an fp32 temporary and adds it into its fp32 copy
  // (2 read + 4 written, 4 + 4 read + 4 written = 18); 16-bit accumulation is autograd's add into .grad (2 + 2 + 2).
  std::map<std::string, double> grad_accumulation_bytes;
  // The routed-expert block's host launches (file key `moe_host`; absent: not modelled): seconds of host time per
  // launch, and launches per local expert per layer-microbatch, forward and backward, by precision (bf16 also
  // serves fp16; fp8_delayed for the delayed and mxfp8 recipes, fp8_current for every other FP8 recipe; mxfp8's
  // one fused quantize per tensor is an assumption, not read from Transformer Engine's code). The block waits for
  // the host where its launches take longer than the GPU's work (docs/cost_model.md "The MoE expert block's host time").
  double moe_host_launch_s = 0;
  std::map<std::string, std::array<double, 2>> moe_host_launches;
  // Host seconds per local routed expert per layer-microbatch {forward, backward} at `dtype` and `fp8_recipe`;
  // {0, 0} where not modelled.
  std::array<double, 2> MoeHostSecondsPerExpert(DType dtype) const;
  double fp8_weight_bytes = 0;  // bytes per parameter of cached FP8 weight copies
  // memory.fp8_weight_bytes `recipe`: one cached copy as the kernel table's recipe keeps it (Fp8Recipe::weight_bytes;
  // Transformer Engine's per-module FP8 weight workspace); fp8_weight_bytes is then unused.
  bool fp8_weight_from_recipe = false;
  // Whether it casts FP8 weights once per iteration into a cached copy (a figure or `recipe`), not per use.
  bool CachesFp8Weights() const { return fp8_weight_from_recipe || fp8_weight_bytes > 0; }
  // The ZeRO stages it keeps FP8 parameters at (file key `fp8_param_gather`; solve --fp8-param-gather: the weights
  // held in FP8 alone, the fp32 master in the sharded optimizer; Megatron-Core's distributed optimizer and FSDP);
  // empty: it does not, for `fp8_param_gather_reason`.
  std::vector<int64_t> fp8_param_gather;
  std::string fp8_param_gather_reason;
  // Share of the caching allocator's reserved memory not held by live tensors at the peak (file key
  // memory.allocator_fragmentation): reserved = allocated / (1 - it). 0: not estimated.
  double allocator_fragmentation = 0;
  // Bytes per logit element (the microbatch's tokens on this GPU x its vocabulary share) live at the loss's peak, the
  // fp32 softmax kept for backward included (file key `memory.loss_logit_bytes: {tp1: B, tp: B}`; tp: under tensor
  // parallelism, the vocabulary split): Megatron-Core's vocab-parallel cross-entropy casts the bf16 logits to fp32 and
  // works in place (2 + 4 = 6); eager PyTorch's cross_entropy on .float() logits holds more (torchtitan: 12, 16 under
  // loss_parallel). {0, 0}: not stated (the working buffer every layer gets, twice its bf16 output, alone).
  std::array<double, 2> loss_logit_bytes = {0, 0};
  std::vector<int64_t> hsdp;  // ZeRO stages it shards hierarchically (HSDP: replicate x shard); empty: none
  bool fsdp_with_pp = false;  // runs FSDP (ZeRO-3) under pipelining, unsharded through the step (torchtitan)
  std::vector<int64_t> zero;  // ZeRO stages it runs (empty: any)
  std::string zero_reason;    // why the others are not (the error's words)
  // The optimizer states it keeps (file key `optimizer_states`: name -> the ZeRO stages it keeps it at;
  // spec/model_state.h) in OptimizerState order; empty: fp32 only, at any of `zero`.
  std::vector<std::pair<OptimizerState, std::vector<int64_t>>> optimizer_states;
  std::string optimizer_states_reason;  // why it keeps no other (the error's words)
  // The ZeRO stages it keeps `s` at (`zero` for fp32 in a file without optimizer_states); nullptr: it does not.
  const std::vector<int64_t>* OptimizerStateZero(OptimizerState s) const;
  std::vector<std::string> schedules;  // pipeline schedules it runs (empty: any)
  // Selective recompute's modules it runs (file key `recompute_modules`, RecomputeBit mask): its default
  // for `--recompute selective`; 0: Megatron's modules (op_sac excluded).
  uint32_t recompute_modules = 0;
  // The selective-recompute modules it runs: its own list, else every Megatron module (op_sac excluded).
  uint32_t RunsRecomputeModules() const;
  std::vector<EngineBand> bands;  // per precision (file key `band`); empty: not calibrated
  // Per precision, for models with routed experts (file key `band_moe`): the MoE runs' spread joined with `band`'s
  // (runs / checks: the MoE calibration and check runs); absent for a precision: `band` serves.
  std::vector<EngineBand> moe_bands;
  // The band of `precision` ("bf16"): with `moe` (a model with routed experts) its `band_moe` where the file has
  // one, else its `band`; nullptr when the file has none.
  const EngineBand* BandFor(const std::string& precision, bool moe = false) const;
};

// The built-in engines' names (configs/engines/*.yaml), in the order `--engine all` prints them.
std::vector<std::string> BuiltinEngines();
// The default engine's name: "megatron-core".
const char* DefaultEngineName();
// Reads an engine: a built-in name, or a path to a file in the same format. NotFound for an unknown
// name that is no file (naming the built-ins); InvalidArgument naming the file, line, field and the fix.
Status LoadEngineSpec(const std::string& name_or_path, EngineSpec* out);
Status ParseEngineSpec(const std::string& path, const std::string& text, EngineSpec* out);

}  // namespace planner
