// The joint search (--mode auto): tensor-parallel degree t (within a node),
// pipeline depth p, data-parallel width d = n / (t p), microbatch size b,
// schedule, interleave v, recompute and ZeRO stage. Stages are balanced by a
// min-max partition of the layer chain; every candidate is scored by the
// schedule simulator plus the exposed data-parallel all-reduce and the
// optimizer step; memory is a hard constraint. Returns the best plan with the
// k-1 runners-up and why each lost. docs/cost_model.md sections 3-5.
// Its parts: candidates.h (the values tried and the uniform family),
// evaluate.h (times, memory, simulation, the plan of a candidate), rank.h
// (lower bounds, top K, runners-up, the error when no plan is left).
// Pure function of its inputs; thread-compatible; SearchOptions::threads runs its
// evaluations in parallel with the same results.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "dp_solver/cost_model.h"
#include "dp_solver/schedule_sim.h"
#include "spec/dp_comm.h"
#include "spec/plan.h"

namespace planner {

// The per-stage replication family (PipeDream's schedule, --replication) runs a DP quadratic in the
// layers: searched by default for models of at most this many layers, refused when asked beyond it
// (docs/formats.md, "Limits"). Transformer (gpt:) models do not search it by default anyway.
constexpr int64_t kMaxReplicatedLayers = 2048;
// And, by default, for layers x workers at most this (models of more than 256 layers).
constexpr int64_t kMaxReplicatedLayerWorkers = 32768;
// Layers of the cost source (the model's, else the profile's).
int64_t CostSourceLayers(const CostSource& src);

struct SearchOptions {
  int64_t gpus = 0;
  int64_t global_batch = 0;  // 0: the model's
  int top_k = 5;
  std::vector<int64_t> tp;          // empty: powers of two up to the node size
  std::vector<int64_t> pp;          // empty: every depth that divides the GPUs
  std::vector<int64_t> microbatch;  // empty: powers of two up to 64 (or the profile's size)
  std::vector<Schedule>
      schedules;  // empty: gpipe, 1f1b, interleaved, zb-h1, pipedream (per-stage replication), dualpipev
  std::vector<Recompute> recompute;  // empty: none, selective (transformers), full
  // Block recompute (`--recompute block`): the first N blocks of each chunk recomputed, N the
  // smallest that fits (gpt models; docs/cost_model.md section 5). -1: on when `recompute` is
  // empty (the default list), 0: off, 1: on.
  int recompute_block = -1;
  // Selective recompute's modules (`--recompute-modules`, RecomputeBit mask); 0: core_attn, and for
  // MLA / MoE models whose best plan is then full recompute or none, a second search with
  // DeepSeek-V3's set (core_attn, layernorm, mla_up_proj, moe_act) besides (docs/cost_model.md
  // section 5, "Recompute modules").
  uint32_t recompute_modules = 0;
  std::vector<int64_t>
      interleave;  // empty: every v >= 2 with p v dividing a gpt model's blocks (Megatron's rule); else 2, 3, 4
  int64_t max_zero_stage = 3;
  std::vector<int64_t> cp;             // context-parallel sizes; empty: the search's defaults (docs/cost_model.md)
  std::vector<int> sequence_parallel;  // 0 (off) / 1 (on, tp > 1 only); empty: the search's defaults
  // Expert parallelism (MoE models; docs/cost_model.md, "Expert parallelism"): expert-parallel sizes
  // (empty: every divisor of the experts) and expert tensor-parallel sizes (empty: 1 and tp; 0 in
  // the list stands for tp, Megatron's default). ep x etp must divide tp x cp x dp.
  std::vector<int64_t> ep, etp;
  std::vector<int64_t> zero;  // ZeRO stages allowed (0..3, `--zero`); empty: all
  // HSDP (ParallelLayout::dp_replicate): the ZeRO stages the engine shards hierarchically (bit z; 0: none,
  // the flat model's default) and the replicate degrees tried (`--dp-replicate`; empty: 1 and the degree
  // whose shard group fills one node).
  uint32_t hsdp_zero = 0;
  std::vector<int64_t> dp_replicate;
  int64_t max_replicated_units = 32;  // per-stage replication DP: workers grouped to at most this many units
  std::vector<int64_t>
      replication;  // non-empty: only this per-stage replica vector ("2-1-1", in TP groups), pipedream schedule
  bool vertical_sync = false;  // pipedream schedule: PipeDream's vertical sync (more weight versions at later stages)
  CostOptions cost;
  // Data-parallel gradient synchronisation (`--dp-comm`, docs/cost_model.md "Data-parallel
  // communication architectures"): the architectures tried, the fastest per candidate kept; empty:
  // every one the cluster can run. The per-stage replication family (pipedream schedule) uses
  // allreduce-hier unless the list was named. ps_servers: CPU machines of ps / byteps (-1: all of them).
  // ps_colocated (`--ps-placement colocated`): ps runs a server on every GPU machine of the group
  // (k = 0, ColocatedPsSeconds) instead of on the CPU machines; byteps keeps ps_servers.
  std::vector<DpComm> dp_comms;
  int64_t ps_servers = -1;
  bool ps_colocated = false;
  bool ps_placement_named = false;  // --ps-placement given (either value): ps must be among the architectures
  bool exhaustive = false;          // simulate every feasible candidate (tests of the pruning)
  // Stage boundaries forced by Megatron's --pipeline-model-parallel-layout (spec/pipeline_layout.h): pp x v + 1
  // rows; candidates with another pp x v have no partition. Empty: the search balances the stages.
  std::vector<int64_t> forced_cuts;
  // Threads that evaluate and simulate candidates (`--threads`): each has its own Evaluator (a copy made
  // once the cost tables are built); their results are combined in candidate order, so the plan, the
  // runners-up, the messages and SearchStats are identical at every thread count.
  int threads = 1;
};

// What a search did (its output beside the plan; the CLI's "searched N candidates, simulated M" note):
// counted over both passes when MLA / MoE models are searched again with DeepSeek-V3's modules.
struct SearchStats {
  int64_t considered = 0;   // candidates enumerated (uniform ones and per-stage replication DP runs)
  int64_t simulated = 0;    // uniform candidates simulated (all of them with SearchOptions::exhaustive)
  int64_t closed_form = 0;  // of those, timed by the closed form (uniform stages, no send time: UniformMakespan)
  // Of those, simulations stopped once bound to end past the k-th best (SimResult::cut). Unlike the counts
  // above it may differ with SearchOptions::threads (a window's simulations are cut at the k-th best of the
  // window's start), so it is not printed.
  int64_t cut = 0;
};

// Fills *plan (mode "auto") on success. Errors: InvalidArgument (or NotFound)
// naming the flag or file and the fix for inputs the search cannot use (no
// peak for the model's dtype, a profile without timings at a --tp asked for,
// a --replication no tp matches); Infeasible naming the binding constraint
// (memory, else what left the layouts out) when nothing fits; Internal for
// the simulator's failures, which the candidates' checks rule out. `stats` (may be null) receives
// the counts, on failure too.
Status SolveAuto(const CostSource& src, const SearchOptions& options, Plan* plan, SearchStats* stats = nullptr);

// Balanced contiguous partition of layers [0, n) into k non-empty parts that
// minimises the largest part's time (exact: binary search over the answer
// with a greedy feasibility check) with each part ending as near its share
// of the whole time as that allows. Returns part boundaries b_0=0 < ... < b_k=n,
// each one of `cut_points` (sorted, from 0 to n; empty: every position); empty when
// fewer than k parts can be cut there.
std::vector<int64_t> BalancedPartition(const CostTable& table, int64_t k, std::vector<int64_t> cut_points = {});

}  // namespace planner
