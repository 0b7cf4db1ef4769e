// Plan: one parallelization of a model on a cluster, as chosen by the solver
// and written to plan.yaml (docs/formats.md): the configuration, the stages
// and the predictions, plus the runners-up with the reason each lost.
// Plain value type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "spec/dp_comm.h"
#include "spec/dtype.h"
#include "spec/kinds.h"
#include "spec/layout.h"
#include "spec/model_state.h"

namespace planner {

struct PlanStage {
  int64_t first_layer = 0;  // index into the model's (or profile's) layer list
  int64_t last_layer = 0;   // inclusive
  std::string first_layer_name;
  std::string last_layer_name;
  int64_t replicas = 1;  // data-parallel width of this stage
  int64_t tp = 1;
  int64_t device_offset = 0;     // first device (rank) of this stage's first replica
  std::vector<int64_t> devices;  // all devices of the stage
  int64_t chunk = 0;             // interleaved: model chunk index on its device
  // Per microbatch on one device of the stage (seconds).
  double forward_s = 0;
  double backward_input_s = 0;
  double backward_weight_s = 0;
  double tp_comm_s = 0;       // exposed tensor-parallel all-reduces (inside forward/backward above)
  double ep_comm_s = 0;       // exposed expert-parallel all-to-all, dispatch + combine (inside forward/backward above)
  double p2p_s = 0;           // send of this stage's output activation to the next stage (not in forward_s)
  double dp_allreduce_s = 0;  // per iteration, gradient all-reduce of the replica group
  double peak_memory_bytes = 0;
  double weights_bytes = 0, optimizer_bytes = 0, activations_bytes = 0;
  int64_t in_flight = 0;  // microbatches whose activations are held at the peak
};

// The calibration band of a prediction (docs/cost_model.md section 2, "Bands"): the signed errors of
// predicted throughput, (predicted - measured) / measured, that the calibration runs of the plan's engine
// and precision span. Measured tokens/s is expected within predicted / (1 + high) .. predicted / (1 + low).
struct PlanBand {
  std::string basis;  // "megatron-core bf16": the engine and precision whose runs gave it
  double error_low = 0, error_high = 0;
  int64_t runs = 0;    // calibration runs of that engine and precision
  int64_t checks = 0;  // published check runs of that engine and precision joined with the calibration runs
                       // (runs + checks < 3: joined with the whole set's spread too)
  // Iteration seconds within the band: t (1 + low) .. t (1 + high).
  double IterationLow(double t) const { return t * (1 + error_low); }
  double IterationHigh(double t) const { return t * (1 + error_high); }
  // A throughput figure x (tokens/s, MFU) within the band: x / (1 + high) .. x / (1 + low).
  double RateLow(double x) const { return x / (1 + error_high); }
  double RateHigh(double x) const { return x / (1 + error_low); }
  // Whether a plan predicted at `other_s` cannot be told from one at `t`: their bands overlap.
  bool Overlaps(double t, double other_s) const { return IterationHigh(t) >= IterationLow(other_s); }
};

// The chosen plan's lead over the runner-up, and what of it rests on overlap assumptions: both layouts
// costed again with every overlap off (DP buckets, parameter gathers, TP and CP communication, p2p,
// MoE all-to-all exposed; no compute slowdown).
struct PlanLead {
  double runner_up_s = 0;              // the runner-up's predicted iteration
  double chosen_no_overlap_s = 0;      // the chosen layout, every overlap off
  double runner_up_no_overlap_s = 0;   // the runner-up, every overlap off
  int64_t runners_up_within_band = 0;  // runners-up whose band overlaps the chosen plan's
  // The share of the lead (runner_up_s - chosen) that the overlap assumptions give; above 1: without them
  // the runner-up would be faster.
  double OverlapShare(double chosen_s) const {
    const double lead = runner_up_s - chosen_s, bare = runner_up_no_overlap_s - chosen_no_overlap_s;
    return lead > 0 ? (lead - bare) / lead : 0;
  }
};

// The chosen layout on one engine (solve --engine all): its figures, or why the engine cannot run it.
struct PlanEngine {
  std::string engine;
  double iteration_s = 0, tokens_per_second_per_gpu = 0, mfu = 0, peak_memory_bytes = 0;
  std::string error;             // non-empty: the engine cannot run the layout (the figures are 0)
  std::optional<PlanBand> band;  // the engine's calibration band for the precision (none: not calibrated)
};

// One kind of communication per iteration on the busiest device: all of it, and what the overlaps leave
// exposed (docs/cost_model.md section 3, "Hidden and exposed").
struct PlanComm {
  std::string kind;  // tensor_parallel | context_parallel | expert_all_to_all | pipeline_p2p | data_parallel
  double total_s = 0, exposed_s = 0;
};

struct PlanPredicted {
  double iteration_s = 0;
  double samples_per_second = 0;
  double tflops_per_gpu = 0;             // hardware FLOPs (Megatron eq. (3) convention when recompute)
  double mfu = 0;                        // model FLOPs (no recompute) / (GPUs x peak x time)
  double hfu = 0;                        // hardware FLOPs (recompute included) / (GPUs x peak x time)
  double model_tflops_per_gpu = 0;       // model FLOPs per second per GPU (the MFU numerator), TFLOP/s
  double model_flops_per_iteration = 0;  // model FLOPs of one iteration (docs/cost_model.md, MFU)
  double tokens_per_second_per_gpu = 0;  // samples x sequence / time / GPUs (0: not a sequence model)
  double bubble_fraction = 0;            // idle share of the pipeline part of the iteration
  double pipeline_s = 0;                 // makespan of the schedule
  double dp_allreduce_s = 0;             // exposed data-parallel time
  double optimizer_s = 0;
  double peak_memory_bytes = 0;  // max over stages
  // What PyTorch's caching allocator reserves at that peak (nvidia-smi's figure, torchtitan's logged memory): the
  // peak / (1 - the engine's allocator_fragmentation); 0: not estimated (no engine figure, a profile, the flat model).
  double peak_reserved_bytes = 0;
  // Raw (not overlapped) data-parallel synchronisation seconds per iteration of the busiest stage
  // under each architecture the cluster can run, for the chosen layout (name, seconds), in
  // kAllDpComms order: the lecture's comparison (docs/cost_model.md, "Data-parallel communication
  // architectures"). Empty: not computed (dp = 1, or a plan of an older planner).
  std::vector<std::pair<std::string, double>> dp_comm_seconds;
  std::vector<PlanComm> communication;  // kinds with any communication; empty: not computed (older plans)
  std::optional<PlanBand> band;  // none: not calibrated (flat efficiency, a profile, fp32 / tf32, no engine band)
  std::optional<PlanLead> lead;  // none: no runner-up, or not costed
  // --engine all: the chosen layout costed again on every engine (the plan's own first); empty otherwise.
  std::vector<PlanEngine> engines;
};

// A runner-up: its layout, its predictions and why it lost.
struct PlanSummary : ParallelLayout {
  double iteration_s = 0, samples_per_second = 0, peak_memory_bytes = 0;
  std::string why_lost;
};

// The chosen plan: its layout (ParallelLayout) with its inputs, stages and predictions.
struct Plan : ParallelLayout {
  PlanMode mode = PlanMode::kAuto;
  std::string model_name, model_path, model_digest;
  std::string cluster_name, cluster_path, cluster_digest;
  std::string profile_path, profile_digest;
  // Kernel-level analytic costs (docs/cost_model.md section 2, "Engines"): the engine the prediction is
  // for and the kernel table it used; kernels empty: the cluster's flat efficiency.
  std::string engine, kernels;
  // The engine file the plan was costed with when it is not a built-in (`engine` is then that file's name, which may
  // be a built-in's): a re-costing reads it (beside the plan if moved), codegen's engine note skips it. "": built-in.
  std::string engine_file;
  // The FP8 recipe kernel-level costs assumed (inputs.fp8_recipe: the engine's fp8_recipe or solve --fp8-recipe;
  // "": not an FP8 plan, or costed on a profile or the flat efficiency). Codegen's exports run it.
  std::string fp8_recipe;
  // The attention kernel kernel-level costs assumed (inputs.attention_kernel: the engine's `attention`, else its
  // fallback on the kernel table; "": costed on a profile or the flat efficiency). Megatron's exports pick their
  // --attention-backend by it (Megatron-Core's kernel where the engine is the torchtitan or DeepSpeed built-in).
  std::string attention_kernel;
  std::string calibration;  // solve --calibration: the calibration file the engine's rates were scaled by ("": none)
  CpCommType cp_comm_type = CpCommType::kP2P;  // context parallelism's KV exchange (written when not p2p)
  // MoE token dispatch (written when not alltoall): alltoall (one copy per routed expert, NCCL) or flex
  // (deduplicated per node: DeepEP; Megatron --moe-token-dispatcher-type flex).
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  // The solve options the prediction rests on beyond the layout (inputs.*, written when not the default), so that
  // `planner calibrate` costs the plan again as it was solved and codegen turns on what was costed:
  bool moe_overlap = false;      // --moe-overlap on: the EP all-to-all overlapped with compute
  double moe_imbalance = 1;      // --moe-imbalance: the busiest EP rank's tokens over the mean
  bool tp_comm_overlap = false;  // --tp-comm-overlap on: TP collectives overlapped with the GEMMs
  CostSourceKind cost_source = CostSourceKind::kAnalytic;
  std::optional<DType>
      dtype;  // the precision solved with (`solve --precision` may differ from the model file's); none: not stated
  int64_t seq = 0;   // sequence length solved with (gpt: models; `solve --seq` may differ from the file's); 0: none
  int64_t gpus = 0;  // GPUs given to the solver
  int64_t gpus_used = 0;
  int64_t global_batch = 0;
  double model_parameters = 0;  // parameters of the model (tied weights once; MoE: every expert; MTP modules excluded)
  double model_active_parameters =
      0;  // parameters one token uses (MoE: top_k routed + shared experts); = model_parameters when dense
  double mtp_parameters = 0;  // parameters of the multi-token-prediction modules (not in model_parameters); 0: none
  // Megatron's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split:
  // the embedding and the loss count as one layer each, p v divides blocks + 2 (docs/cost_model.md section 4).
  bool account_embedding_loss = false;
  bool p2p_overlap = false;  // stage sends hidden behind compute (else the sender waits for them)
  // Gradient buffer dtype (accumulation over microbatches and data-parallel reduction): fp32, or
  // the model's 16-bit dtype (Megatron's default for fp16; --grad-reduce-in-bf16 for bf16); plan.yaml
  // `grad_dtype`. None in plans written before it (readers take DefaultGradDType of the precision).
  std::optional<DType> grad_dtype;
  // How the optimizer keeps its state (plan.yaml `optimizer_state`, written when not fp32; solve --optimizer-state).
  OptimizerState optimizer_state = OptimizerState::kFp32;
  // FP8 parameters (plan.yaml `fp8_param_gather: true`, written when on; solve --fp8-param-gather): an FP8 plan's
  // weights held in FP8 alone, the fp32 master in the sharded optimizer (ZeRO >= 1); Megatron --fp8-param-gather.
  bool fp8_param_gather = false;
  // How data-parallel replicas synchronise gradients (plan.yaml `dp_comm`, `solve --dp-comm`).
  DpComm dp_comm = DpComm::kHierAllReduce;
  // Summation servers of `ps` and `byteps` (CPU machines of the cluster file; `ps` needs >= 1,
  // `byteps` may have 0, which is the all-reduce's split); 0 for the all-reduce family.
  int64_t dp_servers = 0;
  // ps with a server process on every GPU machine of a group, the model sharded over them
  // (plan.yaml `ps_placement: colocated`, written only then; `solve --ps-placement`): the chosen
  // dp_comm ps (dp_servers then 0) or, under another dp_comm, the comparison's ps row.
  bool ps_colocated = false;
  // PipeDream's vertical sync (schedule pipedream only): every stage runs a minibatch's forward
  // and backward on the weight version the input stage had when the minibatch entered.
  bool vertical_sync = false;
  double usable_memory_bytes = 0;
  std::vector<PlanStage> stages;  // in pipeline order (interleaved: virtual stages)
  PlanPredicted predicted;
  std::vector<PlanSummary> runners_up;
  std::vector<std::string> notes;  // assumptions the prediction rests on
};

std::string PlanToYaml(const Plan& plan);
std::string PlanToJson(const Plan& plan);
Status LoadPlan(const std::string& path, Plan* out);
Status ParsePlan(const std::string& path, const std::string& text, Plan* out);

}  // namespace planner
