// ParallelLayout: the parallel layout of a training run, declared once. The plan (Plan), each
// runner-up (PlanSummary), the launch plan (LaunchPlan) and the search's candidates (dp_solver
// Candidate) are a ParallelLayout plus what each adds. Adding a parallel dimension touches this type, the cost model
// (dp_solver/cost_model.cc, evaluate.cc), the rank generator and the files that write it
// (docs/design.md, "Adding a parallel dimension"). Plain value type.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "spec/kinds.h"

namespace YAML {
class Node;
}

namespace planner {

class YamlReader;

struct ParallelLayout {
  std::string config;              // "2-1-1": replicas per stage; uniform plans: the dp of every stage
  int64_t tp = 1, pp = 1, dp = 1;  // tensor-, pipeline- and data-parallel sizes
  int64_t cp = 1;                  // context-parallel size (Megatron rank order tp-cp-dp-pp)
  bool sequence_parallel = false;  // Megatron's --sequence-parallel (with tp > 1)
  int64_t ep = 1;   // expert-parallel size (MoE: folded out of tp x cp x dp, Megatron-Core's MoE parallel folding)
  int64_t etp = 1;  // expert tensor-parallel size (etp x ep divides tp x cp x dp)
  int64_t microbatch_size = 1, num_microbatches = 1;
  Schedule schedule = Schedule::k1F1B;
  int64_t interleave = 1;  // virtual pipeline stages per device (v)
  Recompute recompute = Recompute::kNone;
  // Block recompute (recompute full): the first N transformer blocks of every pipeline chunk are
  // recomputed, the rest keep their activations (Megatron --recompute-method block
  // --recompute-num-layers N); 0: not applicable (full recompute of every layer, or none / selective).
  int64_t recompute_num_layers = 0;
  // Selective recompute's modules (RecomputeBit mask; Megatron --recompute-modules; plan.yaml
  // `recompute_modules: [core_attn, ...]`, written with recompute: selective). Default core_attn.
  uint32_t recompute_modules = kDefaultRecomputeModules;
  ZeroStage zero_stage = ZeroStage::kNone;  // zero_stage: 0..3 in plan.yaml
  // Hybrid sharding (HSDP; torchtitan data_parallel_replicate_degree, Megatron
  // --num-distributed-optimizer-instances, DeepSpeed MiCS): the ZeRO-sharded state is sharded over
  // dp cp / dp_replicate ranks and replicated dp_replicate times; 1: sharded over all dp cp ranks.
  int64_t dp_replicate = 1;

  // "tp-pp-dp", as plan.yaml's `parallel` and every printed configuration name it.
  std::string ParallelString() const;
  // The one printed label of a layout: "tp-pp-dp 8-8-16 | cp 1 | sp on | replication 16 | microbatch 1 x 128 |
  // schedule interleaved (v=2) | recompute selective | ZeRO 1 | ep 1 etp 1".
  // `state` stands after the ZeRO stage (the plan's gradient dtype: " | gradients fp32"), as `solve` prints it.
  std::string Label(const std::string& state = "") const;
};

// The layout's sizes as plan.yaml, its runners_up and launch.yaml write them: tp, pp, dp (and microbatch_size,
// num_microbatches) required where `required`, cp, ep, etp and sequence_parallel optional, each bounded
// (spec/input_limits.h); fields named `prefix` + key ("runners_up[2].tp"). The one reader of these fields.
Status ReadLayoutSizes(const YamlReader& r, const YAML::Node& map, const std::string& prefix, bool required,
                       ParallelLayout* out);

// The recompute as printed: its name, "full:N" for block recompute of N layers per chunk.
std::string RecomputeLabel(Recompute r, int64_t num_layers);
// The same, selective recompute with modules other than core_attn alone as "selective:core_attn+layernorm".
std::string RecomputeLabel(Recompute r, int64_t num_layers, uint32_t modules);

}  // namespace planner
