// The joint search's candidates (docs/cost_model.md section 4, "Search order
// and pruning"): the values each dimension takes (tensor-parallel degree t,
// microbatch size b, recompute, pipeline depth p, schedule, interleave v) and
// the enumeration of the uniform (Megatron-style) family over one cost table.
// ZeRO is not enumerated: evaluation keeps the fastest allowed stage that fits.
// Pure; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dp_solver/cost_model.h"
#include "dp_solver/search.h"
#include "spec/kinds.h"
#include "spec/layout.h"

namespace planner {

// The lists the search walks: SearchOptions' lists, empty ones filled with
// their defaults, and the problem's fixed sizes.
struct SearchSpace {
  int64_t gpus = 0;
  int64_t global_batch = 0;
  int64_t node = 1;         // GPUs in one node (level 0): the largest tp
  std::vector<int64_t> tp;  // in the order tried
  std::vector<int64_t> microbatch;
  std::vector<Schedule> schedules;
  std::vector<Recompute> recompute;         // the cost tables built (block recompute needs none and full)
  std::vector<Recompute> ranked;            // the recomputes ranked as themselves
  bool block = false;                       // block recompute (gpt models: the first N blocks of each chunk)
  std::vector<uint32_t> selective_modules;  // the module sets selective recompute's tables are built with
  std::vector<int64_t> cp;                  // context-parallel sizes
  std::vector<int> sp;                      // sequence parallelism off (0) / on (1); on only applies at tp > 1
  int64_t seq = 0;                          // tokens per sample (0: not a sequence model)
  bool replicated = false;                  // search the per-stage replication family too
  int64_t blocks = 0;                       // transformer blocks of a gpt: model (Megatron's interleave rule), else 0
  int64_t units = 0;         // parts a partition can cut a gpt: model into (PartitionCutPoints), else 0 (its rows)
  int64_t experts = 0;       // routed experts of an MoE model, else 0
  std::vector<int64_t> ep;   // expert-parallel sizes ({1} for a dense model)
  std::vector<int64_t> etp;  // expert tensor-parallel sizes; 0 stands for the table's tp
};

// Defaults: tp powers of two up to the node; microbatch every size the profile
// measured at tp = 1 (else powers of two up to 64); every schedule; recompute
// none, selective (models with attention) and full, and block recompute (gpt models); cp 1, and 2, 4, 8, 16 where seq / (2 cp) >= 1024
// on a model with attention (analytic costs only); sp on (Megatron-Core's recommendation with TP).
// `global_batch` >= 1.
SearchSpace MakeSearchSpace(const CostSource& src, const SearchOptions& o, int64_t global_batch);

// Why a value of t cannot be used ("" when it can): it must divide the GPUs,
// fit in a node and divide every TP-shardable layer of the model.
std::string TpRejection(const SearchSpace& space, const ModelSpec* model, int64_t t);

// The (ep, etp) pairs tried at tensor-parallel degree t (etp 0 read as t, each pair once), and why
// a pair cannot be used ("" when it can): ep divides the experts, ep x etp divides the GPUs, etp
// divides the expert FFN width.
std::vector<std::pair<int64_t, int64_t>> ExpertSplits(const SearchSpace& space, int64_t t);
std::string EpRejection(const SearchSpace& space, const ModelSpec* model, int64_t ep, int64_t etp);

// Why a context-parallel size cannot be used ("" when it can): causal load balancing cuts the
// sequence into 2 cp chunks, so 2 cp must divide it; a profile has no CP timings.
std::string CpRejection(const SearchSpace& space, const CostSource& src, int64_t cp);

// One point of the uniform family: cost table `table` (its t, b, recompute),
// p stages of v chunks each, d = gpus / (t cp p) replicas, m microbatches.
// A candidate of the uniform search: a layout (spec/layout.h; its sizes are the cost model's t = tp,
// p = pp, d = dp, b = microbatch_size, m = num_microbatches, v = interleave of docs/cost_model.md)
// with the cost table it is costed from. The ZeRO stage and the replication are settled by the
// evaluation, the recompute modules by the table.
struct Candidate : ParallelLayout {
  size_t table = 0;
  double bound = 0;  // lower bound on the iteration time (set by the ranking)
  // Block recompute: `table` is the recompute-none table, the first recompute_num_layers blocks of
  // every chunk are costed from `full_table` (recompute = kFull). 0: the table's own recompute.
  size_t full_table = 0;
  // The embedding and the loss count as a layer each in the split (Megatron's account-for flags):
  // p v divides blocks + 2; chunk 0 has one block fewer, the last chunk too.
  bool account = false;
  // Expert parallelism (the table's): ep x etp x edp = t x cp x d, edp the expert-data-parallel size.
  int64_t Edp() const { return tp * cp * dp / (ep * etp); }
};
// A candidate of table `table`: t x cp x p x d GPUs, microbatches of b, m of them, v chunks per device.
Candidate MakeCandidate(size_t table, int64_t t, int64_t b, int64_t p, int64_t d, int64_t m, int64_t v, Schedule s,
                        Recompute rc, int64_t cp, bool sp);

// Why values were left out, the first reason of each kind; named in the
// Infeasible message when nothing divides the problem.
struct Rejections {
  std::string tp, pp, batch, interleave, cp, ep, moe_overlap;
  std::string Summary() const;  // "; "-joined, "" when nothing was left out
};

// Whether the expert all-to-all overlap the search costs (--moe-overlap on, ep > 1) runs at depth p with v chunks
// on the table's recompute: Megatron-Core's EP overlap needs pp 1 or v > 1 and no full recompute. False notes why.
bool MoeOverlapRuns(const SearchOptions& o, const CostTable& table, int64_t p, int64_t v, Rejections* why);

// The uniform family over one cost table, in the order the search ranks ties:
// depth p (--pp or every divisor of gpus / t), schedule, interleave. Layouts
// that do not divide the problem are left out (noted in *why).
std::vector<Candidate> UniformCandidates(const SearchSpace& space, const SearchOptions& o, size_t table_index,
                                         const CostTable& table, Rejections* why);

}  // namespace planner
