// Evaluation of the joint search's candidates (docs/cost_model.md sections
// 4, 5 and 8): stage times from the cost tables, memory per device and the
// fastest ZeRO stage that fits, the exposed data-parallel collectives and the
// optimizer step; the simulated pipeline; and the Plan a candidate becomes.
// Thread-compatible.
#pragma once

#include <cstdint>
#include <limits>
#include <array>
#include <map>
#include <unordered_map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/status.h"
#include "dp_solver/candidates.h"
#include "dp_solver/cost_model.h"
#include "dp_solver/replicated_dp.h"
#include "dp_solver/schedule_sim.h"
#include "spec/dp_comm.h"
#include "spec/model_state.h"
#include "spec/plan.h"

namespace planner {

// The model state (spec/model_state.h) with the cluster's usable memory per GPU.
StateBytes MakeStateBytes(const CostSource& src, const SearchOptions& o);
// Parameters per gradient bucket of Megatron-Core's DDP at `dp` ranks: max(40M, 1M dp)
// (DistributedDataParallelConfig.bucket_size's default).
double BucketParams(int64_t dp);
// Exposed seconds of `comm_s` split into buckets of `bucket_fraction` of it, overlapped with a
// compute window: the last bucket + max(0, the rest - window). Without overlap: comm_s.
// `slowdown`: compute seconds lost per second of the hidden part (the engine's; 0 in the flat model).
double ExposedBucketed(double comm_s, double bucket_fraction, double window_s, bool overlap, double slowdown = 0);
// What a ZeRO stage stands for in the engines (the plan's note).
std::string ZeroEngineSetting(int64_t zero);
// The highest ZeRO stage the search may take at p pipeline stages and d replicas: none
// without data parallelism; at most ZeRO-1 with pipelining, the only stage an engine runs
// there (DeepSpeed refuses pipelining with ZeRO-2/3; Megatron's distributed optimizer is ZeRO-1);
// else --zero's limit (docs/cost_model.md section 5). `fsdp_with_pp`: the engine runs FSDP under
// pipelining (torchtitan): ZeRO-3 there too, costed as FsdpUnderPp says.
int64_t MaxZeroStage(int64_t max_zero_stage, int64_t p, int64_t d, bool fsdp_with_pp = false);
// Whether ZeRO stage z at p pipeline stages is torchtitan's FSDP under pipelining: parameters gathered at
// the step's first forward and kept whole through it (no reshard after forward or backward), gradients
// accumulated whole in the parameter dtype and reduce-scattered once at its last backward.
inline bool FsdpUnderPp(int64_t z, int64_t p, bool fsdp_with_pp) { return fsdp_with_pp && p > 1 && z == 3; }

// Everything the plan needs about a uniform candidate, short of its simulation.
struct Evaluation {
  const std::vector<int64_t>* cuts = nullptr;  // stage boundaries, p v + 1 of them
  std::vector<SimStage> sim;                   // per virtual stage
  std::vector<double> send;                    // per virtual stage: p2p to the next
  // Per device (pipeline position):
  std::vector<double> params, stash, acts, work, forward_s, backward_s, peak,
      allreduce_s;                           // stash: the largest chunk's; acts: peak activations
  std::vector<double> largest_layer_params;  // per device: its largest layer's parameters (ZeRO-3 gathers one whole)
  std::vector<double> param_layers;   // per device: layers holding parameters (FSDP's units: one gather call each)
  std::vector<double> expert_params;  // per device: the routed experts' part of params (sharded over the EDP group)
  int64_t zero = -1;                  // the fastest ZeRO stage that fits; -1: none fits
  int64_t zero_max = 0;               // the highest ZeRO stage tried (MaxZeroStage); -1: --zero allowed none
  int64_t replicate = 1;  // HSDP: the ZeRO-sharded dense state replicated this many times (sharded over dp cp / it)
  double peak_bytes = 0, dp_s = 0, optimizer_s = 0;
  // The fastest data-parallel architecture of those tried at the settled ZeRO stage (ties: hier, ring,
  // tree, ps, byteps); allreduce_s and dp_s are its.
  DpComm dp_comm = DpComm::kHierAllReduce;
};

// The cost tables of one search (one per (t, b, recompute)), their balanced
// partitions (cached), and the evaluation of candidates over them.
class Evaluator {
 public:
  Evaluator(const CostSource& src, const SearchOptions& o, int64_t global_batch);
  size_t AddTable(CostTable table);
  const std::vector<CostTable>& tables() const { return tables_; }
  const StateBytes& state_bytes() const { return sb_; }

  // Stage costs, memory, ZeRO stage, exposed DP all-reduce, optimizer step.
  // Internal when the candidate's partition does not exist.
  Status Evaluate(const Candidate& k, Evaluation* x);
  // The pipeline's makespan and bubble: the closed form where the stages are uniform and no send
  // costs time (UniformMakespan), else the simulator, whose errors name the candidate.
  // cutoff_s: the simulation may stop once the makespan is bound to exceed it (SimResult::cut).
  Status Simulate(const Candidate& k, const Evaluation& x, SimResult* res,
                  double cutoff_s = std::numeric_limits<double>::infinity()) const;
  // The plan of a simulated candidate (mode auto, without runners-up).
  Plan UniformPlan(const Candidate& k, const Evaluation& x, const SimResult& res) const;

  // The per-stage replication family over one table, m = batch / b
  // microbatches: the options of its dynamic program and the plan it makes.
  ReplicatedOptions ReplicatedOptionsFor(const CostTable& table) const;
  Plan ReplicatedPlan(const CostTable& table, const ReplicatedOptions& ro, const ReplicatedResult& rr) const;

 private:
  const std::vector<int64_t>& Partition(size_t table, int64_t k, bool account);
  // Rows [first, second) of chunk [a, e) that block recompute re-runs: its first k.rc_layers blocks.
  std::pair<int64_t, int64_t> RecomputedRows(const Candidate& k, int64_t a, int64_t e) const;
  // Block recompute's change to a prefix-summed column over rows [a, e) of a chunk: full - none on its recomputed rows.
  double BlockDelta(const Candidate& k, std::vector<double> CostTable::*column, int64_t a, int64_t e) const;
  double ChunkStash(const Candidate& k, int64_t a, int64_t e) const;
  void StageTimes(const Candidate& k, Evaluation* x) const;
  void DeviceLoads(const Candidate& k, Evaluation* x) const;
  double PeakBytes(const Candidate& k, int64_t z, Evaluation* x) const;
  void SettleMemory(const Candidate& k, Evaluation* x) const;
  double StatesBytes(const Candidate& k, int64_t z, size_t r, const Evaluation& x) const;
  double DeviceDpSeconds(const Candidate& k, const Evaluation& x, int64_t z, size_t r, DpComm d, double* total_s) const;
  void DataParallelTimes(const Candidate& k, int64_t z, Evaluation* x) const;
  // HSDP replicate degrees tried at ZeRO stage z (SearchOptions::dp_replicate, hsdp_zero): {1} unless the
  // engine runs z hierarchically; by default 1 and the degree that keeps one shard group inside a node.
  std::vector<int64_t> Replicates(const Candidate& k, int64_t z) const;
  // Each communication kind's seconds per iteration on the device that exposes the most, whole and exposed.
  std::vector<PlanComm> CommunicationByKind(const Candidate& k, const Evaluation& x) const;
  std::vector<std::pair<std::string, double>> DpCommComparison(const Candidate& k, const Evaluation& x) const;
  PlanStage UniformStage(const Candidate& k, const Evaluation& x, int64_t q) const;
  void FillFlops(Recompute rc, Plan* pl) const;
  void BlockRecomputeFlops(const Candidate& k, const Evaluation& x, Plan* pl) const;
  bool ZeroAllowed(int64_t z) const;

  const CostSource src_;
  const SearchOptions& o_;
  std::vector<DpComm> comms_;  // the architectures tried, in tie order (hier first)
  int64_t servers_ = 0;        // CPU machines of ps / byteps
  int64_t Servers(DpComm d) const {
    return d == DpComm::kParameterServer && o_.ps_colocated ? 0 : servers_;
  }  // ps co-located: 0 (DpServersFor)
  int64_t batch_ = 0;
  StateBytes sb_;
  std::vector<CostTable> tables_;
  std::map<std::tuple<size_t, int64_t, bool>, std::vector<int64_t>> partitions_;
  // Data-parallel collectives memoised by their inputs (parameters, group size and stride, architecture,
  // pipeline positions, calls): candidates that differ in microbatching, schedule or recompute share them.
  struct CollectiveKey {
    double params, calls;
    int64_t size, stride, positions;
    int d;
    bool operator==(const CollectiveKey& o) const {
      return params == o.params && calls == o.calls && size == o.size && stride == o.stride &&
             positions == o.positions && d == o.d;
    }
  };
  struct CollectiveHash {
    size_t operator()(const CollectiveKey& k) const;
  };
  // A direct-mapped cache (one slot per hash; a miss recomputes and overwrites): no chains, no allocation.
  struct CollectiveSlot {
    CollectiveKey key{-1, 0, 0, 0, 0, -1};
    std::array<double, 3> value{0, 0, 0};
  };
  mutable std::vector<CollectiveSlot> collectives_ = std::vector<CollectiveSlot>(1u << 14);
  std::array<double, 3> MemoCollectives(double params, int64_t size, int64_t stride, DpComm d, int64_t positions,
                                        double calls) const;
  int64_t block_begin_ = 0, block_end_ = 0;  // a gpt model's transformer-block rows
  std::vector<int64_t> cut_points_;          // PartitionCutPoints of the model
};

// Where a balanced partition of a gpt model may cut: 0, every boundary from its first transformer block to
// past its last block or MTP module, and the end. The rows before the blocks (the embedding) and after them
// (final norm, lm_head, loss) stay together, as Megatron places them (its layout's E and L). Empty for other
// models (any row boundary).
std::vector<int64_t> PartitionCutPoints(const ModelSpec& model);

// Tokens per sample of a sequence model: a gpt model's seq, else its embedding's input length; 0: none.
int64_t SequenceLength(const ModelSpec& model);

// Megatron's split with the embedding and the loss counted as a layer each (--account-for-embedding-
// in-pipeline-split --account-for-loss-in-pipeline-split): k chunks of u = (blocks + 2) / k units over
// rows [0, rows) whose blocks are rows [first_block, first_block + blocks); chunk 0 holds the rows
// before the blocks and u - 1 blocks, the last chunk u - 1 blocks and the rows after them. Empty when
// k does not divide blocks + 2 or a chunk would be empty.
std::vector<int64_t> AccountedPartition(int64_t rows, int64_t first_block, int64_t blocks, int64_t k);

// Microbatches in flight on device r (pipeline position) under k's schedule
// (dualpipev: both chunks', counted per chunk).
int64_t InFlight(const Candidate& k, int64_t r);

// DualPipeV (m >= 2p): microbatches whose activations chunk c (0: stage r, 1: stage 2p - 1 - r) of
// device r holds at the device's peak, right after the first F0 of the overlapped steps: 2p - r of
// chunk 0 and r + 1 of chunk 1, both at their maxima there (docs/cost_model.md section 4).
int64_t DualPipeVInFlight(int64_t p, int64_t r, int64_t chunk);

// Peak activation bytes on device r of an interleaved 1F1B pipeline (p
// devices, v chunks, m microbatches, m % p == 0) in Megatron's order (the
// simulator's): every in-flight (chunk, microbatch) is charged with its own
// chunk's stash, chunk_stash[c] (c = 0..v-1 on device r). Closed form over one
// period of the steady phase, O(v); docs/cost_model.md.
double InterleavedPeakActivations(const std::vector<double>& chunk_stash, int64_t p, int64_t m, int64_t r);

}  // namespace planner
