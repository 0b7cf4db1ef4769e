#include "dp_solver/evaluate.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/units.h"
#include "dp_solver/dp_comm_cost.h"
#include "dp_solver/search.h"
#include "spec/layer_catalog.h"

namespace planner {

namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

// Whether the plan's comparison has a row for `d`.
bool HasRow(const std::vector<std::pair<std::string, double>>& rows, DpComm d) {
  return std::any_of(rows.begin(), rows.end(), [d](const auto& r) { return r.first == DpCommName(d); });
}

// One parameter set's data-parallel collectives: the gradient all-reduce and reduce-scatter and the
// parameter all-gather of `params` over `size` ranks `stride` apart (docs/cost_model.md section 3).
struct DpCollectives {
  double ar = 0, rs = 0, ag = 0;
};
// `calls`: the collectives each is issued as (buckets, FSDP's per-layer units): every call past the first
// adds the collective's latency (its time for one byte; a reduce-scatter or gather half an all-reduce's).
// MoE stages split the calls evenly between the dense and the expert parameters (DeviceDpSeconds).
DpCollectives Collectives(const ClusterSpec& c, const StateBytes& sb, double params, int64_t size, int64_t stride,
                          DpComm d, int64_t servers, int64_t positions, double calls = 1) {
  DpCollectives x;
  if (size <= 1 || !(params > 0)) return x;
  const std::vector<int64_t> group = GroupSpread(c, size, stride);
  // Gradients are reduced in their buffer's dtype (sb.grad_comm: fp32 for bf16 / fp8 / fp32, fp16 for fp16 by
  // default, --grad-dtype otherwise); parameters are gathered in the training dtype.
  // The all-reduce family's reduce-scatter and all-gather are each half its all-reduce; ps and byteps
  // synchronise ZeRO-0 gradients only (no rs / ag).
  // The `stride` sibling groups (the other TP / EP ranks' groups) of each of the `positions` pipeline
  // stages synchronise at the same flush and share ps / byteps's servers: stride x positions groups.
  const int64_t siblings = stride * std::max<int64_t>(1, positions);
  // The latency of a call: the all-reduce family's as NCCL pays it, steps inside a node at the node's alpha and
  // across nodes at the network's (the hierarchical line), whichever algorithm moves the bytes.
  const double extra = std::max(0.0, calls - 1) *
                       DpSyncSeconds(c, DpCommIsAllReduce(d) ? DpComm::kHierAllReduce : d, 1, group, servers, siblings);
  x.ar = DpSyncSeconds(c, d, params * sb.grad_comm, group, servers, siblings) + extra;
  if (DpCommIsAllReduce(d)) {
    x.rs = 0.5 * x.ar;
    x.ag = 0.5 * (DpSyncSeconds(c, d, params * sb.param_gather, group, servers, siblings) + extra);
  }
  return x;
}

}  // namespace

StateBytes MakeStateBytes(const CostSource& src, const SearchOptions& o) {
  StateBytes sb = ModelStateBytes(src.model, o.cost.grad_dtype, o.cost.bytes_per_param, o.cost.optimizer_state);
  sb.usable = src.cluster->UsableMemoryBytes();
  if (!(sb.fp8_weight_copy > 0)) return sb;  // not an FP8 model
  // The recipe's FP8 weight as this GPU's GEMMs read it (kernel-level costs; else a per-tensor copy with its transpose,
  // ModelStateBytes' 2).
  const Fp8Recipe recipe = KernelLevel(src) ? src.kernels->Recipe(src.engine->fp8_recipe) : Fp8Recipe{};
  // The copy is the engine's whatever --bytes-per-param counts (it sits beside the model state).
  if (o.cost.fp8_params) KeepFp8Params(recipe.weight_bytes, recipe.param_gather_bytes, o.cost.bytes_per_param > 0, &sb);
  else if (KernelLevel(src))
    sb.fp8_weight_copy = src.engine->fp8_weight_from_recipe ? recipe.weight_bytes : src.engine->fp8_weight_bytes;
  return sb;
}

double BucketParams(int64_t dp) { return std::max(40e6, 1e6 * static_cast<double>(dp)); }

double ExposedBucketed(double comm_s, double bucket_fraction, double window_s, bool overlap, double slowdown) {
  if (!overlap) return comm_s;
  const double last = comm_s * std::min(1.0, bucket_fraction);
  const double hidden = std::min(comm_s - last, window_s);
  return last + std::max(0.0, comm_s - last - window_s) + slowdown * std::max(0.0, hidden);
}

std::string ZeroEngineSetting(int64_t zero) {
  switch (zero) {
    case 0:
      return "ZeRO-0: Megatron without --use-distributed-optimizer (gradient all-reduce); DeepSpeed "
             "zero_optimization.stage 0; FSDP NO_SHARD";
    case 1:
      return "ZeRO-1: Megatron --use-distributed-optimizer (gradient reduce-scatter, parameter all-gather once per "
             "iteration); DeepSpeed zero_optimization.stage 1";
    case 2:
      return "ZeRO-2: DeepSpeed zero_optimization.stage 2; FSDP SHARD_GRAD_OP (gradient reduce-scatter per microbatch)";
    default:
      return "ZeRO-3: DeepSpeed zero_optimization.stage 3; FSDP FULL_SHARD (parameter all-gathers in forward and "
             "backward and gradient reduce-scatter per microbatch)";
  }
}

int64_t MaxZeroStage(int64_t max_zero_stage, int64_t p, int64_t d, bool fsdp_with_pp) {
  if (d <= 1) return 0;
  return std::min<int64_t>(max_zero_stage, p > 1 && !fsdp_with_pp ? 1 : 3);
}

int64_t InFlight(const Candidate& k, int64_t r) {
  switch (k.schedule) {
    case Schedule::kGpipe: return k.num_microbatches;
    case Schedule::kInterleaved:
      return std::min(k.num_microbatches * k.interleave, (k.pp - r - 1) * 2 + (k.interleave - 1) * k.pp + 1);
    case Schedule::kDualPipeV: return DualPipeVInFlight(k.pp, r, 0) + DualPipeVInFlight(k.pp, r, 1);
    default: return std::min(k.pp - r, k.num_microbatches);
  }
}

int64_t DualPipeVInFlight(int64_t p, int64_t r, int64_t chunk) { return chunk == 0 ? 2 * p - r : r + 1; }

double InterleavedPeakActivations(const std::vector<double>& chunk_stash, int64_t p, int64_t m, int64_t r) {
  const int64_t v = static_cast<int64_t>(chunk_stash.size()), period = p * v, total = m * v;
  std::vector<double> pre_f(Z(v + 1), 0.0), pre_b(Z(v + 1), 0.0);
  for (int64_t c = 0; c < v; ++c) {
    pre_f[Z(c + 1)] = pre_f[Z(c)] + chunk_stash[Z(c)];
    pre_b[Z(c + 1)] = pre_b[Z(c)] + chunk_stash[Z(v - 1 - c)];
  }
  // Stash of the first n operations of an order whose i-th runs chunk (i / p) % v (forward) or v - 1 - that (backward).
  auto sum = [&](const std::vector<double>& pre, int64_t n) {
    int64_t in = n % period, c = in / p;
    double partial = c < v ? (pre[Z(c + 1)] - pre[Z(c)]) * static_cast<double>(in % p) : 0.0;
    return static_cast<double>(n / period) * static_cast<double>(p) * pre[Z(v)] + static_cast<double>(p) * pre[Z(c)] +
           partial;
  };
  const int64_t warm = std::min((p - r - 1) * 2 + (v - 1) * p, total);
  if (warm >= total) return sum(pre_f, total);
  // Steady step j: F number warm + j, then B number j; alive after that F is A(j) = F_sum(warm + j + 1) - B_sum(j),
  // periodic in j with period p v. A(j+1) - A(j) changes only where j or warm + 1 + j is a multiple of p, so the
  // maximum is at such a j or at the last step.
  const int64_t steps = std::min(period, total - warm), n0 = warm + 1, off = (p - n0 % p) % p;
  auto alive = [&](int64_t j) { return sum(pre_f, n0 + j) - sum(pre_b, j); };
  double peak = alive(steps - 1);
  for (int64_t j = 0; j < steps; j += p) {
    peak = std::max(peak, alive(j));
    if (j + off < steps) peak = std::max(peak, alive(j + off));
  }
  return peak;
}

std::vector<int64_t> AccountedPartition(int64_t rows, int64_t first_block, int64_t blocks, int64_t k) {
  std::vector<int64_t> cuts;
  if (k < 1 || (blocks + 2) % k != 0 || first_block < 1 || first_block + blocks >= rows) return cuts;
  const int64_t u = (blocks + 2) / k;
  // Chunk q starts at block q u - 1 (unit 0 of chunk 0 is the embedding): row first_block + q u - 1.
  for (int64_t q = 0; q < k; ++q) cuts.push_back(q == 0 ? 0 : first_block + q * u - 1);
  cuts.push_back(rows);
  for (size_t i = 1; i < cuts.size(); ++i) {
    if (cuts[i] <= cuts[i - 1]) return {};
  }
  return cuts;
}

namespace {

// A gpt model's transformer-block rows, then its MTP modules: [begin, end); {0, 0} when it has none.
std::pair<int64_t, int64_t> BlockRows(const ModelSpec& model) {
  int64_t begin = 0, end = 0;
  for (size_t i = 0; i < model.layers.size(); ++i) {
    if (!IsBlock(model.layers[i].kind) && model.layers[i].kind != LayerKind::kMtp) continue;
    if (end == 0) begin = static_cast<int64_t>(i);
    end = static_cast<int64_t>(i) + 1;
  }
  return {begin, end};
}

}  // namespace

std::vector<int64_t> PartitionCutPoints(const ModelSpec& model) {
  std::vector<int64_t> at;
  if (!model.is_gpt) return at;
  const auto [begin, end] = BlockRows(model);
  if (end == 0) return at;
  const auto n = static_cast<int64_t>(model.layers.size());
  if (begin > 0) at.push_back(0);
  for (int64_t i = begin; i <= end; ++i) at.push_back(i);
  if (end < n) at.push_back(n);
  return at;
}

Evaluator::Evaluator(const CostSource& src, const SearchOptions& o, int64_t global_batch)
    : src_(src), o_(o), batch_(global_batch), sb_(MakeStateBytes(src, o)) {
  // The architectures tried, hier first so that it stays the choice on a tie (one-level groups:
  // ring = hier), then ring, tree, ps, byteps. Default: every one the cluster can run
  // (DefaultDpComms): the three all-reduces, and ps and byteps where the cluster has CPU machines.
  // ps is dedicated (servers_ CPU machines) or, with --ps-placement colocated, co-located (Servers(ps) = 0).
  const std::vector<DpComm> asked = o.dp_comms.empty() ? DefaultDpComms(*src.cluster) : o.dp_comms;
  servers_ = o.ps_servers >= 0 ? o.ps_servers : src.cluster->cpu_machines.count;
  for (DpComm d : {DpComm::kHierAllReduce, DpComm::kRingAllReduce, DpComm::kTreeAllReduce, DpComm::kParameterServer,
                   DpComm::kBytePS}) {
    if (d == DpComm::kParameterServer && servers_ < 1 && !o.ps_colocated)
      continue;  // a PS needs a server (named: an error before this)
    if (std::find(asked.begin(), asked.end(), d) != asked.end()) comms_.push_back(d);
  }
  if (src.model == nullptr || !src.model->is_gpt) return;
  std::tie(block_begin_, block_end_) = BlockRows(*src.model);
  cut_points_ = PartitionCutPoints(*src.model);
}

size_t Evaluator::AddTable(CostTable table) {
  tables_.push_back(std::move(table));
  return tables_.size() - 1;
}

const std::vector<int64_t>& Evaluator::Partition(size_t table, int64_t k, bool account) {
  static const std::vector<int64_t> kNone;
  if (!o_.forced_cuts.empty()) return static_cast<int64_t>(o_.forced_cuts.size()) == k + 1 ? o_.forced_cuts : kNone;
  auto key = std::make_tuple(table, k, account);
  auto it = partitions_.find(key);
  if (it != partitions_.end()) return it->second;
  const int64_t rows = static_cast<int64_t>(tables_[table].rows.size());
  return partitions_
      .emplace(key, account ? AccountedPartition(rows, block_begin_, block_end_ - block_begin_, k)
                            : BalancedPartition(tables_[table], k, cut_points_))
      .first->second;
}

std::pair<int64_t, int64_t> Evaluator::RecomputedRows(const Candidate& k, int64_t a, int64_t e) const {
  const int64_t lo = std::max(a, block_begin_), hi = std::min(e, block_end_);
  if (k.recompute_num_layers <= 0 || lo >= hi) return {a, a};
  return {lo, std::min(hi, lo + k.recompute_num_layers)};
}

double Evaluator::BlockDelta(const Candidate& k, std::vector<double> CostTable::*column, int64_t a, int64_t e) const {
  if (k.recompute_num_layers <= 0) return 0;
  const auto [ra, rb] = RecomputedRows(k, a, e);
  const std::vector<double>& full = tables_[k.full_table].*column;
  const std::vector<double>& none = tables_[k.table].*column;
  return (full[Z(rb)] - full[Z(ra)]) - (none[Z(rb)] - none[Z(ra)]);
}

double Evaluator::ChunkStash(const Candidate& k, int64_t a, int64_t e) const {
  return tables_[k.table].Stash(a, e) + BlockDelta(k, &CostTable::pre_stash, a, e);
}

Status Evaluator::Evaluate(const Candidate& k, Evaluation* x) {
  x->cuts = &Partition(k.table, k.pp * k.interleave, k.account);
  if (x->cuts->empty()) {
    return Status::Internal(fmt::format("no partition of {} layers into {} stages (tp={} pp={} interleave={})",
                                        tables_[k.table].rows.size(), k.pp * k.interleave, k.tp, k.pp, k.interleave));
  }
  StageTimes(k, x);
  DeviceLoads(k, x);
  SettleMemory(k, x);  // the ZeRO stage and its data-parallel times
  return Status::OK();
}

// Per virtual stage: F, B, W from the table's prefix sums, and the send to the next stage.
void Evaluator::StageTimes(const Candidate& k, Evaluation* x) const {
  const CostTable& table = tables_[k.table];
  const ClusterSpec& c = *src_.cluster;
  const int64_t p = k.pp, t = k.tp, d = k.dp, q_count = p * k.interleave;
  const auto& cuts = *x->cuts;
  x->sim.assign(Z(q_count), SimStage{});
  x->send.assign(Z(q_count), 0.0);
  for (int64_t q = 0; q < q_count; ++q) {
    int64_t a = cuts[Z(q)], e = cuts[Z(q + 1)];
    SimStage& y = x->sim[Z(q)];
    y.forward_s = table.pre_f[Z(e)] - table.pre_f[Z(a)] + BlockDelta(k, &CostTable::pre_f, a, e);
    y.backward_input_s = table.pre_bi[Z(e)] - table.pre_bi[Z(a)] + BlockDelta(k, &CostTable::pre_bi, a, e);
    y.backward_weight_s = table.pre_bw[Z(e)] - table.pre_bw[Z(a)] + BlockDelta(k, &CostTable::pre_bw, a, e);
    if (q + 1 < q_count) {
      double bytes = table.rows[Z(e - 1)].out_bytes;
      if (o_.cost.scatter_gather && t > 1) bytes /= static_cast<double>(t);
      // Megatron's rank order tp-cp-dp-pp: pipeline neighbours are t cp d apart. DualPipeV's stages p - 1
      // and p share a device: no transfer.
      const int64_t pa = StagePosition(k.schedule, q, p), pb = StagePosition(k.schedule, q + 1, p);
      x->send[Z(q)] = pa == pb ? 0.0 : P2PSeconds(c, bytes, pa * t * k.cp * d, pb * t * k.cp * d);
    }
  }
  for (int64_t q = 0; q < q_count; ++q) {
    double sq = x->send[Z(q)];
    // Exposed: the sender is busy for the transfer (activation after F, gradient after B).
    if (o_.cost.p2p_overlap) x->sim[Z(q)].send_s = sq;
    else x->sim[Z(q)].exposed_send_s = sq;
  }
}

// Per device: parameters, the largest stash of its chunks, peak activations, working buffers, backward time.
void Evaluator::DeviceLoads(const Candidate& k, Evaluation* x) const {
  const CostTable& table = tables_[k.table];
  const int64_t p = k.pp, t = k.tp, q_count = p * k.interleave;
  const auto& cuts = *x->cuts;
  for (auto* v : {&x->params, &x->stash, &x->acts, &x->work, &x->forward_s, &x->backward_s, &x->peak, &x->allreduce_s,
                  &x->largest_layer_params, &x->expert_params, &x->param_layers}) {
    v->assign(Z(p), 0);
  }
  for (int64_t q = 0; q < q_count; ++q) {
    size_t r = Z(StagePosition(k.schedule, q, p));
    int64_t a = cuts[Z(q)], e = cuts[Z(q + 1)];
    x->params[r] += table.Params(a, e);
    x->expert_params[r] += table.ExpertParams(a, e);
    x->stash[r] = std::max(x->stash[r], ChunkStash(k, a, e));
    x->forward_s[r] += x->sim[Z(q)].forward_s;
    x->backward_s[r] += x->sim[Z(q)].backward_input_s + x->sim[Z(q)].backward_weight_s;
    for (int64_t i = a; i < e; ++i) {
      x->largest_layer_params[r] = std::max(x->largest_layer_params[r], table.rows[Z(i)].params);
      if (table.rows[Z(i)].params > 0) x->param_layers[r] += 1;
      double ob = table.rows[Z(i)].out_bytes / static_cast<double>(t);
      x->work[r] = std::max({x->work[r], 2 * ob, table.rows[Z(i)].work_bytes});
    }
  }
  std::vector<double> chunk_stash(Z(k.interleave));
  for (int64_t r = 0; r < p; ++r) {
    if (k.schedule == Schedule::kDualPipeV) {  // each chunk's in-flight count times its own stash (both peak together)
      for (int64_t c = 0; c < 2; ++c) {
        const int64_t q = ChunkStage(k.schedule, c, r, p);
        x->acts[Z(r)] += static_cast<double>(DualPipeVInFlight(p, r, c)) * ChunkStash(k, cuts[Z(q)], cuts[Z(q + 1)]);
      }
      continue;
    }
    if (k.schedule != Schedule::kInterleaved) {
      x->acts[Z(r)] = static_cast<double>(InFlight(k, r)) * x->stash[Z(r)];
      continue;
    }
    for (int64_t c = 0; c < k.interleave; ++c)
      chunk_stash[Z(c)] = ChunkStash(k, cuts[Z(c * p + r)], cuts[Z(c * p + r + 1)]);
    x->acts[Z(r)] = InterleavedPeakActivations(chunk_stash, p, k.num_microbatches, r);
  }
}

bool Evaluator::ZeroAllowed(int64_t z) const {
  // ZeRO >= 1 reduce-scatters and gathers: the all-reduce family's collectives (ps / byteps sync ZeRO-0 only).
  if (z >= 1 && std::none_of(comms_.begin(), comms_.end(), DpCommIsAllReduce)) return false;
  return o_.zero.empty() || std::find(o_.zero.begin(), o_.zero.end(), z) != o_.zero.end();
}

// Model-state bytes on device r at ZeRO stage z: the dense parameters sharded over the d x cp ranks
// that hold the same weights, the routed experts' over the expert-data-parallel group (MoE folding).
double Evaluator::StatesBytes(const Candidate& k, int64_t z, size_t r, const Evaluation& x) const {
  const double expert = x.expert_params[r], dense = x.params[r] - expert;
  const int64_t shard = k.dp * k.cp / x.replicate;  // HSDP: the dense state's shard group
  if (FsdpUnderPp(z, k.pp, o_.cost.fsdp_with_pp)) {
    // Whole: the 16-bit parameters and the gradients accumulated across the microbatches in the gradient buffer's
    // dtype (FSDP2 turns gradient sync off for all but the last microbatch and upcasts each unsharded gradient to its
    // reduce dtype to accumulate it: FSDPParam.to_accumulated_grad_if_needed; torchtitan reduces in fp32, 4 B);
    // sharded: the fp32 parameters and optimizer state, and the fp32 gradient the reduce-scatter leaves. Per parameter
    // of the model, LoRA's trainable share in it (sb_.grad carries it already, but not under --bytes-per-param).
    const double grad = (sb_.grad_dtype ? DTypeBytes(*sb_.grad_dtype) : 4.0) * sb_.trainable;
    const double whole = sb_.weight + grad + sb_.fp8_weight_copy, sharded = sb_.optimizer + 4 * sb_.trainable;
    return dense * (whole + sharded / static_cast<double>(shard)) +
           expert * (whole + sharded / static_cast<double>(k.Edp()));
  }
  return dense * StateBytesPerParam(sb_, z, shard) + (expert > 0 ? expert * StateBytesPerParam(sb_, z, k.Edp()) : 0.0);
}

// Peak bytes per device at ZeRO stage z (StatesBytes, activations, working buffers).
double Evaluator::PeakBytes(const Candidate& k, int64_t z, Evaluation* x) const {
  x->peak_bytes = 0;
  for (int64_t r = 0; r < k.pp; ++r) {
    double states = StatesBytes(k, z, Z(r), *x);
    // ZeRO-3 / FSDP holds the layer it computes gathered whole and, where its gathers are prefetched
    // (overlap.param_prefetch, --overlap-param-gather on), the next one too.
    if (z == 3 && k.dp * k.cp > 1 && !FsdpUnderPp(z, k.pp, o_.cost.fsdp_with_pp))
      states += (o_.cost.overlap_param_prefetch ? 2 : 1) * x->largest_layer_params[Z(r)] * sb_.weight;
    // The optimizer step's fp32 copy of a 16-bit gradient buffer (its shard from ZeRO-1 on), after
    // the flush has freed the activations: it raises the peak only where it outgrows them.
    const double expert = x->expert_params[Z(r)], dense = x->params[Z(r)] - expert;
    const double step_copy = sb_.step_grad_copy * (z >= 1 ? dense / static_cast<double>(k.dp * k.cp / x->replicate) +
                                                                expert / static_cast<double>(k.Edp())
                                                          : dense + expert);
    x->peak[Z(r)] = states + std::max(x->acts[Z(r)] + x->work[Z(r)], step_copy);
    x->peak_bytes = std::max(x->peak_bytes, x->peak[Z(r)]);
  }
  return x->peak_bytes;
}

size_t Evaluator::CollectiveHash::operator()(const CollectiveKey& k) const {
  uint64_t a = 0, b = 0;
  std::memcpy(&a, &k.params, sizeof a);
  std::memcpy(&b, &k.calls, sizeof b);
  uint64_t h = a * 0x9E3779B97F4A7C15ull;
  for (uint64_t v : {b, static_cast<uint64_t>(k.size), static_cast<uint64_t>(k.stride),
                     static_cast<uint64_t>(k.positions), static_cast<uint64_t>(k.d)})
    h = (h ^ (v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2))) * 0xBF58476D1CE4E5B9ull;
  return static_cast<size_t>(h ^ (h >> 31));
}

std::array<double, 3> Evaluator::MemoCollectives(double params, int64_t size, int64_t stride, DpComm d,
                                                 int64_t positions, double calls) const {
  const CollectiveKey key{params, calls, size, stride, positions, static_cast<int>(d)};
  CollectiveSlot& slot = collectives_[CollectiveHash()(key) & (collectives_.size() - 1)];
  if (slot.key == key) return slot.value;
  const DpCollectives x = Collectives(*src_.cluster, sb_, params, size, stride, d, Servers(d), positions, calls);
  slot.key = key;
  slot.value = {x.ar, x.rs, x.ag};
  return slot.value;
}

std::vector<int64_t> Evaluator::Replicates(const Candidate& k, int64_t z) const {
  const int64_t g = k.dp * k.cp;
  const bool forced = !o_.dp_replicate.empty();
  const bool one = !forced || std::find(o_.dp_replicate.begin(), o_.dp_replicate.end(), 1) != o_.dp_replicate.end();
  if (z < 1) return {1};
  if ((o_.hsdp_zero & (1u << z)) == 0 || g < 4) return one ? std::vector<int64_t>{1} : std::vector<int64_t>{};
  std::vector<int64_t> out;
  if (forced) {
    for (int64_t r : o_.dp_replicate) {
      if (r == 1 || (r > 1 && g % r == 0 && g / r >= 2)) out.push_back(r);
    }
    return out;
  }
  out.push_back(1);
  // The largest shard group inside one node: t x shard GPUs of consecutive ranks (rank order tp-cp-dp).
  const int64_t node = src_.cluster->GpusPerUnit(0);
  for (int64_t s = std::min(g / 2, node / k.tp); s >= 2; --s) {
    if (g % s == 0) {
      out.push_back(g / s);
      break;
    }
  }
  return out;
}

std::vector<PlanComm> Evaluator::CommunicationByKind(const Candidate& k, const Evaluation& x) const {
  const CostTable& t = tables_[k.table];
  const double m = static_cast<double>(k.num_microbatches);
  std::vector<PlanComm> best;
  double best_exposed = -1;
  for (int64_t r = 0; r < k.pp; ++r) {
    std::vector<PlanComm> v = {
        {"tensor_parallel", 0, 0}, {"context_parallel", 0, 0}, {"expert_all_to_all", 0, 0}, {"pipeline_p2p", 0, 0}};
    for (int64_t q = 0; q < k.pp * k.interleave; ++q) {
      if (StagePosition(k.schedule, q, k.pp) != r) continue;
      const int64_t a = (*x.cuts)[Z(q)], e = (*x.cuts)[Z(q + 1)];
      v[0].total_s += m * (t.pre_tp_total[Z(e)] - t.pre_tp_total[Z(a)]);
      v[0].exposed_s += m * (t.pre_tp[Z(e)] - t.pre_tp[Z(a)]);
      v[1].total_s += m * (t.pre_cp_total[Z(e)] - t.pre_cp_total[Z(a)]);
      v[1].exposed_s += m * (t.pre_cp[Z(e)] - t.pre_cp[Z(a)]);
      v[2].total_s += m * (t.pre_ep_total[Z(e)] - t.pre_ep_total[Z(a)]);
      v[2].exposed_s += m * (t.pre_ep[Z(e)] - t.pre_ep[Z(a)]);
      v[3].total_s += 2 * m * x.send[Z(q)];  // the activation forward, its gradient back
    }
    v[3].exposed_s = o_.cost.p2p_overlap ? 0 : v[3].total_s;
    // This device's own exposure (x.dp_s is the slowest device's, which may not be this one).
    double dp_total = 0;
    const double dp_exposed = x.zero >= 0 ? DeviceDpSeconds(k, x, x.zero, Z(r), x.dp_comm, &dp_total) : x.dp_s;
    v.push_back({"data_parallel", x.allreduce_s[Z(r)], dp_exposed});
    double exposed = 0;
    for (const auto& c : v) exposed += c.exposed_s;
    if (exposed > best_exposed) {
      best_exposed = exposed;
      best = v;
    }
  }
  std::vector<PlanComm> out;
  for (const auto& c : best) {
    if (c.total_s > 0) out.push_back(c);
  }
  return out;
}

// The fastest allowed ZeRO stage whose peak fits in usable memory (ties: the lowest; zero = -1:
// none fits, the peaks then the highest stage tried's).
void Evaluator::SettleMemory(const Candidate& k, Evaluation* x) const {
  x->zero = -1;
  x->zero_max = MaxZeroStage(o_.max_zero_stage, k.pp, k.dp * k.cp, o_.cost.fsdp_with_pp);
  double best = INFINITY;
  int64_t last_tried = -1;
  int64_t best_replicate = 1;
  // ZeRO-1 over one rank is ZeRO-0: where the optimizer state or FP8 parameters restrict the stages to ZeRO-1 / 3
  // (Megatron-Core's precision-aware optimizer and --fp8-param-gather, which run under the distributed optimizer at
  // dp 1 too), a layout without data parallelism keeps it at ZeRO-0's cost rather than being dropped.
  const bool one_rank_zero1 =
      k.dp * k.cp <= 1 && ZeroAllowed(1) && (o_.cost.optimizer_state != OptimizerState::kFp32 || o_.cost.fp8_params);
  for (int64_t z = 0; z <= x->zero_max; ++z) {
    if (!ZeroAllowed(z) && !(z == 0 && one_rank_zero1)) continue;
    if (k.pp > 1 && (z == 1 || z == 2) && o_.cost.fsdp_with_pp) continue;  // FSDP under PP: ZeRO-3 only
    for (int64_t rep : Replicates(k, z)) {
      x->replicate = rep;
      last_tried = z;
      if (PeakBytes(k, z, x) > sb_.usable) continue;
      DataParallelTimes(k, z, x);
      if (x->dp_s + x->optimizer_s < best * (1 - 1e-12)) {
        best = x->dp_s + x->optimizer_s;
        x->zero = z;
        best_replicate = rep;
      }
    }
  }
  x->replicate = x->zero >= 0 ? best_replicate : 1;
  if (x->zero >= 0) {
    PeakBytes(k, x->zero, x);
    DataParallelTimes(k, x->zero, x);
    return;
  }
  // None fits: the peaks of the highest stage tried; zero_max = -1 when --zero allowed none here.
  PeakBytes(k, std::max<int64_t>(last_tried, 0), x);
  x->zero_max = last_tried;
  x->dp_s = x->optimizer_s = 0;
}

// Device r's exposed data-parallel seconds at ZeRO stage z (docs/cost_model.md section 3); *total_s
// gets the whole communication. The group holding the same dense weights is d x cp ranks t apart
// (rank order tp-cp-dp-pp: CP ranks replicate the weights, so gradients reduce over both); the
// routed experts' is the expert-data-parallel group, edp ranks ep x etp apart (MoE parallel folding).
double Evaluator::DeviceDpSeconds(const Candidate& k, const Evaluation& x, int64_t z, size_t r, DpComm d,
                                  double* total_s) const {
  const int64_t g = k.dp * k.cp, shard = z >= 1 ? g / x.replicate : g;
  *total_s = 0;
  const double expert = x.expert_params[r];
  // Calls: Megatron's buckets of BucketParams(g), or FSDP's one unit per layer (ZeRO-3, per microbatch and pass).
  const bool per_layer = z == 3 && !FsdpUnderPp(z, k.pp, o_.cost.fsdp_with_pp);
  // LoRA: the buckets hold the trainable parameters alone; ZeRO-1/2 gather those after the step, ZeRO-3 every weight.
  const double calls = per_layer ? x.param_layers[r] : std::ceil(x.params[r] * sb_.trainable / BucketParams(g));
  const auto dense_a = MemoCollectives(x.params[r] - expert, shard, k.tp, d, k.pp, expert > 0 ? calls / 2 : calls);
  const auto expert_a = MemoCollectives(expert, k.Edp(), k.ep * k.etp, d, k.pp, std::max(1.0, calls / 2));
  const DpCollectives dense_c{dense_a[0], dense_a[1], dense_a[2]}, expert_c{expert_a[0], expert_a[1], expert_a[2]};
  // HSDP: each shard's gradient all-reduced over the replicas (ranks t x shard apart), with every reduce-scatter.
  const auto cross_a = z >= 1 && x.replicate > 1
                           ? MemoCollectives((x.params[r] - expert) / shard, x.replicate, k.tp * shard, d, k.pp, 1)
                           : std::array<double, 3>{0, 0, 0};
  const DpCollectives cross{cross_a[0], cross_a[1], cross_a[2]};
  // ZeRO-1/2 gather what the step updated: LoRA's adapters alone, kept in bf16 under FP8 parameters too.
  const double adapters = sb_.trainable * (sb_.fp8_params && sb_.trainable < 1 ? 2.0 / sb_.param_gather : 1.0);
  const double ar = dense_c.ar + expert_c.ar + cross.ar, rs = dense_c.rs + expert_c.rs + cross.ar,
               ag = (dense_c.ag + expert_c.ag) *
                    (per_layer || FsdpUnderPp(z, k.pp, o_.cost.fsdp_with_pp) ? 1.0 : adapters);
  if (!(ar > 0)) return 0;
  // The share of the synced parameters the last bucket holds (LoRA: the adapters fit in one, exposed whole).
  const double synced = per_layer ? x.params[r] : x.params[r] * sb_.trainable;
  const double bucket = BucketParams(g) / synced, m = static_cast<double>(k.num_microbatches);
  const bool og = (o_.cost.overlap_grad_reduce || o_.cost.dp_overlap) && (k.pp == 1 || o_.cost.overlap_grad_reduce_pp),
             opg = o_.cost.ParamGatherOverlapped(z);
  const double fwd = x.forward_s[r], bwd = x.backward_s[r], sd = o_.cost.compute_slowdown;
  // FSDP under PP: one gather at the first forward, one reduce-scatter at the last backward (ZeRO-1's traffic).
  switch (FsdpUnderPp(z, k.pp, o_.cost.fsdp_with_pp) ? 1 : z) {
    case 0: *total_s = ar; return ExposedBucketed(ar, bucket, bwd, og, sd);
    case 1:
      *total_s = rs + ag;
      return ExposedBucketed(rs, bucket, bwd, og, sd) + ExposedBucketed(ag, bucket, fwd, opg, sd);
    case 2:  // gradients reduce-scattered after every microbatch's backward; parameters gathered once after the step
      *total_s = m * rs + ag;
      return m * ExposedBucketed(rs, bucket, bwd, og, sd) + ExposedBucketed(ag, bucket, fwd, opg, sd);
    default:  // parameters gathered for every microbatch's forward and backward, gradients reduce-scattered after it;
              // the backward's gather and reduce-scatter share its window (and the links); what is left after it
              // is the reduce-scatter's last bucket, half the fraction of AG + RS (AG = RS)
      *total_s = m * (2 * ag + rs);
      return m * (ExposedBucketed(ag, bucket, fwd, opg, sd) +
                  (og && opg ? ExposedBucketed(ag + rs, bucket / 2, bwd, true, sd)
                             : ExposedBucketed(ag, bucket, bwd, opg, sd) + ExposedBucketed(rs, bucket, bwd, og, sd)));
  }
}

// Exposed data-parallel communication and optimizer step at ZeRO stage z: the slowest device's, under
// the fastest architecture tried (ZeRO >= 1: the all-reduce family only).
void Evaluator::DataParallelTimes(const Candidate& k, int64_t z, Evaluation* x) const {
  const ClusterSpec& c = *src_.cluster;
  x->dp_s = 0;
  x->optimizer_s = 0;
  x->dp_comm = DpComm::kHierAllReduce;
  const double shard = z >= 1 ? static_cast<double>(k.dp * k.cp / x->replicate) : 1.0,
               expert_shard = z >= 1 ? static_cast<double>(k.Edp()) : 1.0;
  for (int64_t r = 0; r < k.pp; ++r) {
    const size_t ru = Z(r);
    const double stepped =
        sb_.trainable * ((x->params[ru] - x->expert_params[ru]) / shard + x->expert_params[ru] / expert_shard);
    x->optimizer_s = std::max(x->optimizer_s, stepped * o_.cost.OptimizerStepBytesPerParam() /
                                                  (c.hbm_bandwidth_GBps * 1e9 * c.hbm_efficiency));
  }
  std::vector<double> totals(Z(k.pp), 0.0);
  double best = INFINITY;
  for (DpComm d : comms_) {
    if (z >= 1 && !DpCommIsAllReduce(d)) continue;
    double dp = 0;
    for (int64_t r = 0; r < k.pp; ++r) dp = std::max(dp, DeviceDpSeconds(k, *x, z, Z(r), d, &totals[Z(r)]));
    if (dp < best * (1 - 1e-12)) {
      best = dp;
      x->dp_s = dp;
      x->dp_comm = d;
      std::copy(totals.begin(), totals.end(), x->allreduce_s.begin());
    }
  }
}

// Each architecture's raw (not overlapped) per-iteration seconds on the busiest device at x's ZeRO
// stage, for the plan's comparison: every one the cluster can run and every one tried (ZeRO >= 1: the
// all-reduce family), kAllDpComms order; empty when nothing is synchronised.
std::vector<std::pair<std::string, double>> Evaluator::DpCommComparison(const Candidate& k, const Evaluation& x) const {
  std::vector<std::pair<std::string, double>> out;
  const std::vector<DpComm> runnable = RunnableDpComms(*src_.cluster);
  double busiest = 0, total = 0;
  for (DpComm d : kAllDpComms) {
    const bool tried = std::find(comms_.begin(), comms_.end(), d) != comms_.end();
    if ((!tried && std::find(runnable.begin(), runnable.end(), d) == runnable.end()) ||
        (x.zero >= 1 && !DpCommIsAllReduce(d)))
      continue;
    if (d == DpComm::kParameterServer && !tried && servers_ < 1) continue;
    double most = 0;
    for (int64_t r = 0; r < k.pp; ++r) {
      DeviceDpSeconds(k, x, x.zero, Z(r), d, &total);
      most = std::max(most, total);
    }
    busiest = std::max(busiest, most);
    out.emplace_back(DpCommName(d), most);
  }
  if (!(busiest > 0)) out.clear();
  return out;
}

Status Evaluator::Simulate(const Candidate& k, const Evaluation& x, SimResult* res, double cutoff_s) const {
  if (UniformMakespan(k.schedule, x.sim, k.pp, k.num_microbatches, res)) return Status::OK();
  Status s = SimulateSchedule(k.schedule, x.sim, k.pp, k.num_microbatches, false, res, cutoff_s);
  if (s.ok()) return s;
  // Candidates meet the schedules' preconditions: a failure here is a bug.
  return Status::Internal(fmt::format("simulating tp={} pp={} dp={} microbatch={} {} interleave={}: {}", k.tp, k.pp,
                                      k.dp, k.microbatch_size, ScheduleName(k.schedule), k.interleave, s.message()));
}

PlanStage Evaluator::UniformStage(const Candidate& k, const Evaluation& x, int64_t q) const {
  const CostTable& table = tables_[k.table];
  const int64_t t = k.tp, p = k.pp, d = k.dp;
  const auto& cuts = *x.cuts;
  PlanStage ps;
  int64_t a = cuts[Z(q)], e = cuts[Z(q + 1)];
  size_t r = Z(StagePosition(k.schedule, q, p));
  ps.first_layer = a;
  ps.last_layer = e - 1;
  ps.first_layer_name = table.names[Z(a)];
  ps.last_layer_name = table.names[Z(e - 1)];
  ps.replicas = d;
  ps.tp = t;
  ps.chunk = q / p;
  ps.device_offset = static_cast<int64_t>(r) * t * k.cp * d;
  for (int64_t j = 0; j < t * k.cp * d && j < 4096; ++j) ps.devices.push_back(ps.device_offset + j);
  const auto& y = x.sim[Z(q)];
  ps.forward_s = y.forward_s;
  ps.backward_input_s = y.backward_input_s;
  ps.backward_weight_s = y.backward_weight_s;
  ps.tp_comm_s = table.pre_tp[Z(e)] - table.pre_tp[Z(a)] + BlockDelta(k, &CostTable::pre_tp, a, e);
  ps.ep_comm_s = table.pre_ep[Z(e)] - table.pre_ep[Z(a)] + BlockDelta(k, &CostTable::pre_ep, a, e);
  ps.p2p_s = x.send[Z(q)];
  ps.dp_allreduce_s = x.allreduce_s[r];
  ps.in_flight = k.schedule == Schedule::kDualPipeV ? DualPipeVInFlight(p, static_cast<int64_t>(r), q / p)
                                                    : InFlight(k, static_cast<int64_t>(r));
  const double expert = x.expert_params[r], w = sb_.weight + sb_.fp8_weight_copy;
  const bool sharded = x.zero == 3 && !FsdpUnderPp(x.zero, k.pp, o_.cost.fsdp_with_pp);  // weights sharded
  ps.weights_bytes = (x.params[r] - expert) * w / (sharded ? static_cast<double>(d * k.cp / x.replicate) : 1.0) +
                     expert * w / (sharded ? static_cast<double>(k.Edp()) : 1.0);
  ps.optimizer_bytes = StatesBytes(k, x.zero, r, x) - ps.weights_bytes;
  ps.activations_bytes = x.acts[r];
  ps.peak_memory_bytes = x.peak[r];
  return ps;
}

namespace {

// How an FP8 model's GEMMs are costed: the kernel table's FP8 rates by shape x the engine's FP8 share, or the
// cluster's flat FP8 efficiency.
std::string Fp8Note(const CostSource& src) {
  if (KernelLevel(src))
    return fmt::format(
        "FP8 (Megatron --fp8-format hybrid, Transformer Engine, {} scaling): GEMMs at the kernel table's FP8 rates "
        "by shape (peak {:.0f} TFLOP/s) x the engine's FP8 share {:.2f}, attention core and the rest in bf16; MFU "
        "against the bf16 peak",
        src.engine->fp8_recipe, src.cluster->PeakFlops(DType::kFp8) / 1e12, src.engine->SustainedGemm(DType::kFp8));
  return fmt::format(
      "FP8 (Megatron --fp8-format hybrid, Transformer Engine): GEMMs at {:.0f} TFLOP/s x {:.2f}, attention core and "
      "the rest in bf16; MFU against the bf16 peak",
      src.cluster->PeakFlops(DType::kFp8) / 1e12, src.cluster->Efficiency(DType::kFp8));
}

// The engine settings a uniform plan stands for.
void PlanNotes(const Candidate& k, int64_t zero, const CostOptions& o, std::vector<std::string>* notes) {
  // Over one data-parallel rank the precision-aware optimizer and FP8 parameters still run under Megatron's
  // distributed optimizer (it shards nothing there: ZeRO-0's cost), which the export writes.
  if (zero == 0 && k.dp * k.cp <= 1 && (o.optimizer_state != OptimizerState::kFp32 || o.fp8_params))
    notes->push_back(
        "ZeRO-0 over one data-parallel rank: Megatron --use-distributed-optimizer all the same (the precision-aware "
        "optimizer and --fp8-param-gather run under it; it shards nothing here)");
  else notes->push_back(ZeroEngineSetting(zero));
  if (k.sequence_parallel && k.tp > 1)
    notes->push_back(
        "Megatron --sequence-parallel: TP all-reduces as reduce-scatter + all-gather, norm and dropout activations / "
        "tp");
  if (k.recompute_num_layers > 0) {
    notes->push_back(fmt::format(
        "block recompute: the first {} transformer blocks of every pipeline chunk recomputed, the rest keep their "
        "activations (Megatron --recompute-granularity full --recompute-method block --recompute-num-layers {})",
        k.recompute_num_layers, k.recompute_num_layers));
  }
  if (k.account) {
    notes->push_back(
        "the embedding and the loss counted as a layer each in the pipeline split (Megatron "
        "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split): the first and last chunks "
        "hold one block fewer");
  }
  if (k.cp > 1) {
    const bool allgather = o.cp_comm == CpCommType::kAllGather;
    notes->push_back(fmt::format(
        "Megatron --context-parallel-size {}{}: {}causal load balancing ({} chunks), rank order tp-cp-dp-pp", k.cp,
        allgather ? " --cp-comm-type allgather" : "",
        allgather ? "K and V all-gathered once per layer and pass, dK and dV reduce-scattered, exposed; one attention "
                    "kernel per local query chunk, no merges; "
                  : "ring attention, ",
        2 * k.cp));
  }
  if (k.ep > 1 || k.etp > 1) {
    notes->push_back(fmt::format(
        "Megatron-Core MoE parallel folding: each stage's tp x cp x dp = {} GPUs re-read as etp {} x ep {} "
        "x edp {} for the expert layers; "
        "token dispatch and combine {}, load imbalance {:.3g}{}, "
        "all-to-all {}; expert optimizer states sharded over the EDP group",
        k.tp * k.cp * k.dp, k.etp, k.ep, k.Edp(),
        o.moe_dedup ? "sent once to each node a token reaches and forwarded there (--moe-token-dispatcher-type "
                      "flex, DeepEP)"
                    : "as all-to-all over the EP group, one copy per routed expert "
                      "(--moe-token-dispatcher-type alltoall)",
        o.moe_imbalance,
        o.moe_imbalance == 1 && k.ep > 1
            ? " (balanced routing, as Megatron --moe-router-force-load-balancing runs it; Qwen3-235B's published "
              "dropless throughput at EP 8 fits 1.84: --moe-imbalance, docs/cost_model.md)"
            : "",
        o.moe_overlap ? "overlapped with the layer's compute (Megatron --overlap-moe-expert-parallel-comm)"
                      : "exposed"));
  }
  if (k.dp * k.cp > 1) {
    notes->push_back(fmt::format(
        "gradient reduce {}, parameter gather {} (Megatron --overlap-grad-reduce / --overlap-param-gather, "
        "buckets of max(40M, 1M x dp) parameters)",
        !(o.overlap_grad_reduce || o.dp_overlap) ? "not overlapped"
        : k.pp > 1 && !o.overlap_grad_reduce_pp
            ? "after the pipeline drains, not overlapped (the engine's pipelined runs reduce after the "
              "last microbatch)"
            : "overlapped with backward",
        zero == 0                       ? "none (ZeRO-0: every replica holds whole parameters)"
        : o.ParamGatherOverlapped(zero) ? "overlapped with forward"
        : zero == 3 ? "not overlapped (ZeRO-3's gathers not prefetched: the engine's overlap.param_prefetch "
                      "false or --overlap-param-gather off)"
                    : "not overlapped (gathered inside the step: the engine's overlap.param_gather false or "
                      "--overlap-param-gather off)"));
  }
}

}  // namespace

Plan Evaluator::UniformPlan(const Candidate& k, const Evaluation& x, const SimResult& res) const {
  const double iter = res.makespan_s + x.dp_s + x.optimizer_s;
  Plan pl;
  pl.mode = PlanMode::kAuto;
  pl.gpus = o_.gpus;
  pl.gpus_used = k.tp * k.cp * k.pp * k.dp;
  pl.global_batch = batch_;
  pl.tp = k.tp;
  pl.cp = k.cp;
  pl.sequence_parallel = k.sequence_parallel && k.tp > 1;
  pl.ep = k.ep;
  pl.etp = k.etp;
  if (k.ep > 1) {  // the MoE options the layout was costed with (inputs.*), beside the note that says them
    pl.moe_dispatcher = o_.cost.moe_dedup ? MoeDispatcher::kFlex : MoeDispatcher::kAllToAll;
    pl.moe_overlap = o_.cost.moe_overlap;
    pl.moe_imbalance = o_.cost.moe_imbalance;
  }
  pl.pp = k.pp;
  pl.dp = k.dp;
  pl.microbatch_size = k.microbatch_size;
  pl.num_microbatches = k.num_microbatches;
  pl.schedule = k.schedule;
  pl.interleave = k.interleave;
  pl.recompute = k.recompute;
  pl.recompute_num_layers = k.recompute_num_layers;
  pl.recompute_modules = tables_[k.table].recompute_modules;
  const uint32_t idle =
      k.recompute == Recompute::kSelective ? pl.recompute_modules & ~ApplicableRecomputeModules(src_.model) : 0;
  if (idle != 0 && src_.model != nullptr) {
    pl.notes.push_back(
        fmt::format("recompute modules {} change nothing on model {} (no layer they apply to); Megatron-Core ignores "
                    "them there too",
                    fmt::join(RecomputeModuleList(idle), ", "), src_.model->name));
  }
  pl.account_embedding_loss = k.account;
  pl.zero_stage = static_cast<ZeroStage>(x.zero);  // 0..3: the fastest stage that fits (x.zero >= 0 here)
  pl.dp_replicate = x.replicate;
  PlanNotes(k, x.zero, o_.cost, &pl.notes);
  if (src_.model != nullptr && src_.model->dtype == DType::kFp8) pl.notes.push_back(Fp8Note(src_));
  pl.p2p_overlap = o_.cost.p2p_overlap;
  pl.grad_dtype = sb_.grad_dtype;
  pl.optimizer_state = sb_.optimizer_state;
  pl.fp8_param_gather = sb_.fp8_params;
  pl.usable_memory_bytes = sb_.usable;
  for (int64_t q = 0; q < k.pp * k.interleave; ++q) pl.stages.push_back(UniformStage(k, x, q));
  for (int64_t q = 0; q < k.pp; ++q) {
    if (q > 0) pl.config += '-';
    pl.config += std::to_string(k.dp);
  }
  pl.predicted.iteration_s = iter;
  pl.predicted.pipeline_s = res.makespan_s;
  pl.predicted.dp_allreduce_s = x.dp_s;
  pl.predicted.optimizer_s = x.optimizer_s;
  pl.predicted.dp_comm_seconds = DpCommComparison(k, x);
  pl.predicted.communication = CommunicationByKind(k, x);
  pl.dp_comm = x.dp_comm;
  pl.dp_servers = DpCommUsesServers(x.dp_comm) ? Servers(x.dp_comm) : 0;
  pl.ps_colocated = o_.ps_colocated && (x.dp_comm == DpComm::kParameterServer ||
                                        HasRow(pl.predicted.dp_comm_seconds, DpComm::kParameterServer));
  if (pl.ps_colocated && x.dp_comm == DpComm::kParameterServer && !pl.predicted.dp_comm_seconds.empty()) {
    pl.notes.push_back(
        "gradients synchronised by ps co-located with the workers (a server on every GPU machine, the model sharded "
        "over them; "
        "ZeRO-0; docs/cost_model.md, \"Data-parallel communication architectures\")");
  } else if (DpCommUsesServers(x.dp_comm) && !pl.predicted.dp_comm_seconds.empty()) {
    pl.notes.push_back(fmt::format(
        "gradients synchronised by {} over {} CPU machine(s) of the cluster file (ZeRO-0; docs/cost_model.md, "
        "\"Data-parallel communication architectures\")",
        DpCommName(x.dp_comm), pl.dp_servers));
  }
  pl.predicted.bubble_fraction = res.bubble_fraction;
  pl.predicted.samples_per_second = static_cast<double>(batch_) / iter;
  pl.predicted.peak_memory_bytes = x.peak_bytes;
  FillFlops(k.recompute, &pl);
  if (k.recompute_num_layers > 0) BlockRecomputeFlops(k, x, &pl);
  return pl;
}

// Block recompute's hardware FLOPs: the model's without recompute plus one forward of each recomputed
// block (what full recompute adds, by the share of blocks recomputed).
void Evaluator::BlockRecomputeFlops(const Candidate& k, const Evaluation& x, Plan* pl) const {
  const ModelSpec* model = src_.model;
  const double blocks = static_cast<double>(block_end_ - block_begin_);
  if (model == nullptr || !(blocks > 0) || !(pl->predicted.iteration_s > 0) || !(pl->predicted.tflops_per_gpu > 0))
    return;
  double recomputed = 0;
  for (int64_t q = 0; q < k.pp * k.interleave; ++q) {
    const auto [ra, rb] = RecomputedRows(k, (*x.cuts)[Z(q)], (*x.cuts)[Z(q + 1)]);
    recomputed += static_cast<double>(rb - ra);
  }
  const double batch = static_cast<double>(pl->global_batch);
  double extra = 0;
  for (int64_t i = block_begin_; i < block_end_; ++i) extra += batch * model->layers[Z(i)].fwd_flops;
  const double hw = model->IterationFlops(batch, false) + extra * recomputed / blocks;
  const double scale =
      hw / (pl->predicted.tflops_per_gpu * 1e12 * static_cast<double>(pl->gpus_used) * pl->predicted.iteration_s);
  pl->predicted.tflops_per_gpu *= scale;
  pl->predicted.hfu *= scale;
}

ReplicatedOptions Evaluator::ReplicatedOptionsFor(const CostTable& table) const {
  const int64_t workers = o_.gpus / table.tp;
  ReplicatedOptions ro;
  ro.workers = workers;
  ro.tp = table.tp;
  ro.worker_unit = 1;
  while (workers / ro.worker_unit > o_.max_replicated_units || workers % ro.worker_unit != 0) ++ro.worker_unit;
  ro.grad_bytes_per_param = sb_.grad_comm;
  ro.step_copy_bytes_per_param = sb_.step_grad_copy;
  ro.state_bytes_per_param = sb_.total;
  ro.weight_bytes_per_param = sb_.weight;
  ro.usable_bytes = sb_.usable;
  ro.p2p_overlap = true;
  ro.scatter_gather = o_.cost.scatter_gather;
  ro.optimizer_bytes_per_param = o_.cost.OptimizerStepBytesPerParam() * sb_.trainable;  // LoRA: the adapters step
  ro.trainable = sb_.trainable;
  ro.vertical_sync = o_.vertical_sync;
  ro.servers = servers_;
  ro.ps_colocated = o_.ps_colocated;
  if (!o_.replication.empty()) {
    ro.forced = o_.replication;
    ro.worker_unit = 1;
  }
  return ro;
}

namespace {

PlanStage ReplicatedStagePlan(const CostTable& table, const StateBytes& sb, const ReplicatedStage& st, int64_t t,
                              int64_t m) {
  PlanStage ps;
  ps.first_layer = st.first;
  ps.last_layer = st.end - 1;
  ps.first_layer_name = table.names[Z(st.first)];
  ps.last_layer_name = table.names[Z(st.end - 1)];
  ps.replicas = st.replicas;
  ps.tp = t;
  ps.device_offset = st.offset * t;
  for (int64_t j = 0; j < st.replicas * t && j < 4096; ++j) ps.devices.push_back(ps.device_offset + j);
  ps.forward_s = table.pre_f[Z(st.end)] - table.pre_f[Z(st.first)];
  ps.backward_input_s = table.pre_bi[Z(st.end)] - table.pre_bi[Z(st.first)];
  ps.backward_weight_s = table.pre_bw[Z(st.end)] - table.pre_bw[Z(st.first)];
  ps.tp_comm_s = table.pre_tp[Z(st.end)] - table.pre_tp[Z(st.first)];
  ps.p2p_s = st.send_s / 2;
  ps.dp_allreduce_s = st.allreduce_s * static_cast<double>(m) / static_cast<double>(st.replicas);
  ps.in_flight = st.in_flight;
  double params = table.Params(st.first, st.end);
  // Weight versions of the trainable parameters alone (a frozen weight never changes: one copy).
  ps.weights_bytes = params * sb.weight * (1 + sb.trainable * static_cast<double>(st.weight_versions - 1));
  ps.optimizer_bytes = params * (sb.total - sb.weight);
  ps.activations_bytes = static_cast<double>(st.in_flight) * table.Stash(st.first, st.end);
  ps.peak_memory_bytes = st.peak_memory_bytes;
  return ps;
}

// A per-stage replication plan's comparison: each architecture's per-iteration sync of the busiest
// stage, as the stage's dp_allreduce_s (m / r all-reduces of one replica's group per iteration);
// every one the cluster can run and the one used, kAllDpComms order; empty when no stage is replicated.
std::vector<std::pair<std::string, double>> ReplicatedDpComparison(const CostTable& table, const ClusterSpec& c,
                                                                   const ReplicatedOptions& ro,
                                                                   const ReplicatedResult& rr, int64_t m) {
  std::vector<std::pair<std::string, double>> out;
  const std::vector<DpComm> runnable = RunnableDpComms(c);
  double busiest = 0;
  for (DpComm d : kAllDpComms) {
    const int64_t servers = DpServersFor(d, ro.servers, ro.ps_colocated);
    if ((d != ro.dp_comm && std::find(runnable.begin(), runnable.end(), d) == runnable.end()) ||
        (d == DpComm::kParameterServer && servers < 1 && !ro.ps_colocated))
      continue;
    double most = 0;
    for (const auto& st : rr.stages) {
      if (st.replicas < 2) continue;
      const double bytes = table.Params(st.first, st.end) * ro.grad_bytes_per_param;
      const double s =
          DpSyncSeconds(c, d, bytes, GroupSpreadAt(c, st.offset * ro.tp, st.replicas, ro.tp), servers, ro.tp);
      most = std::max(most, s * static_cast<double>(m) / static_cast<double>(st.replicas));
    }
    busiest = std::max(busiest, most);
    out.emplace_back(DpCommName(d), most);
  }
  if (!(busiest > 0)) out.clear();
  return out;
}

}  // namespace

// PipeDream's asynchronous 1F1B: no flush, so in steady state an iteration of
// m microbatches takes m bottleneck steps; the fill (one microbatch through
// every stage and back) is paid once per run, not per iteration.
Plan Evaluator::ReplicatedPlan(const CostTable& table, const ReplicatedOptions& ro, const ReplicatedResult& rr) const {
  const int64_t n = o_.gpus, t = table.tp, b = table.microbatch, m = batch_ / b;
  double fill = 0, busy = 0;
  for (const auto& st : rr.stages) {
    fill += st.compute_s + st.send_s;
    busy += static_cast<double>(m) * (st.compute_s + st.allreduce_s) * static_cast<double>(t);
  }
  const double iter = static_cast<double>(m) * rr.bottleneck_s;
  Plan pl;
  pl.mode = PlanMode::kAuto;
  pl.gpus = n;
  pl.gpus_used = n;
  pl.global_batch = batch_;
  pl.tp = t;
  pl.sequence_parallel = table.sp;
  pl.pp = static_cast<int64_t>(rr.stages.size());
  pl.dp = 1;
  pl.microbatch_size = b;
  pl.num_microbatches = m;
  pl.schedule = Schedule::kPipeDream;
  pl.interleave = 1;
  pl.recompute = Recompute::kNone;
  pl.zero_stage = ZeroStage::kNone;
  pl.p2p_overlap = true;
  pl.grad_dtype = sb_.grad_dtype;
  pl.optimizer_state = sb_.optimizer_state;
  pl.usable_memory_bytes = sb_.usable;
  pl.dp_comm = ro.dp_comm;
  pl.dp_servers = DpCommUsesServers(ro.dp_comm) ? DpServersFor(ro.dp_comm, ro.servers, ro.ps_colocated) : 0;
  pl.ps_colocated = ro.ps_colocated && (ro.dp_comm == DpComm::kParameterServer ||
                                        HasRow(pl.predicted.dp_comm_seconds, DpComm::kParameterServer));
  pl.predicted.dp_comm_seconds = ReplicatedDpComparison(table, *src_.cluster, ro, rr, m);
  double peak = 0;
  for (const auto& st : rr.stages) {
    pl.stages.push_back(ReplicatedStagePlan(table, sb_, st, t, m));
    peak = std::max(peak, st.peak_memory_bytes);
    if (!pl.config.empty()) pl.config += '-';
    pl.config += std::to_string(st.replicas);
  }
  pl.predicted.iteration_s = iter;
  pl.predicted.pipeline_s = iter;
  pl.predicted.bubble_fraction = std::max(0.0, 1.0 - busy / (static_cast<double>(n) * iter));
  pl.predicted.samples_per_second = static_cast<double>(batch_) / iter;
  pl.predicted.peak_memory_bytes = peak;
  pl.notes.push_back(
      fmt::format("asynchronous (PipeDream): weights up to {} microbatch(es) stale; bottleneck {} per microbatch; "
                  "pipeline fill {} once per run (not in the iteration time)",
                  rr.stages.front().in_flight - 1, FormatSeconds(rr.bottleneck_s), FormatSeconds(fill)));
  if (ro.worker_unit > 1) pl.notes.push_back(fmt::format("replicas searched in units of {} workers", ro.worker_unit));
  if (ro.dp_comm != DpComm::kHierAllReduce) {
    pl.notes.push_back(fmt::format("replicas synchronise gradients by {} (--dp-comm){}", DpCommName(ro.dp_comm),
                                   pl.ps_colocated && ro.dp_comm == DpComm::kParameterServer
                                       ? " co-located with the workers"
                                   : pl.dp_servers > 0 ? fmt::format(" over {} CPU machine(s)", pl.dp_servers)
                                                       : ""));
  }
  FillFlops(Recompute::kNone, &pl);
  return pl;
}

// Parameters, model and hardware FLOPs, MFU, HFU and tokens per second (docs/cost_model.md section 5).
// Model FLOPs: ModelSpec::ModelFlops (no recompute of any kind); hardware FLOPs: what runs, with
// full recompute's extra forward or selective recompute's attention core.
void Evaluator::FillFlops(Recompute rc, Plan* pl) const {
  const ModelSpec* model = src_.model;
  if (!model) return;
  const double iter = pl->predicted.iteration_s, gpus = static_cast<double>(pl->gpus_used);
  const double batch = static_cast<double>(pl->global_batch);
  double hw = model->IterationFlops(batch, rc == Recompute::kFull);
  if (rc == Recompute::kSelective) {  // each module's re-run FLOPs (docs/cost_model.md section 5)
    for (const auto& l : model->layers) {
      if (HasRecomputeModule(pl->recompute_modules, RecomputeModule::kCoreAttn))
        hw += batch * l.selective_recompute_flops;
      for (int i = 1; i < kRecomputeModuleCount; ++i) {
        const RecomputeModuleCost& c = l.recompute_modules[static_cast<size_t>(i)];
        if (HasRecomputeModule(pl->recompute_modules, static_cast<RecomputeModule>(i)))
          hw += batch * (c.gemm_flops + c.core_flops);
      }
    }
  }
  const double mf = model->ModelFlops(batch);
  pl->model_parameters = model->TotalParams();
  pl->model_active_parameters = model->ActiveParams();
  pl->mtp_parameters = model->MtpParams();
  pl->predicted.model_flops_per_iteration = mf;
  pl->predicted.tflops_per_gpu = hw / (gpus * iter) / 1e12;
  pl->predicted.model_tflops_per_gpu = mf / (gpus * iter) / 1e12;
  const int64_t seq = SequenceLength(*model);
  pl->predicted.tokens_per_second_per_gpu = seq > 0 ? batch * static_cast<double>(seq) / iter / gpus : 0;
  // FP8 runs are reported against the bf16 peak (Llama 3's "BF16 MFU"), as NeMo and Megatron do.
  const DType peak_dtype = model->dtype == DType::kFp8 ? DType::kBf16 : model->dtype;
  const double peak = src_.cluster->PeakFlops(peak_dtype);
  if (!(peak > 0)) {  // times from a profile need no peak; the MFU does
    const std::string dtype = DTypeName(peak_dtype);
    pl->notes.push_back(
        fmt::format("MFU unknown: {}: cluster '{}' has no peak for dtype {}; add gpu.peak_tflops.{} to it",
                    src_.cluster->path, src_.cluster->name, dtype, dtype));
    return;
  }
  pl->predicted.mfu = mf / (gpus * peak * iter);
  pl->predicted.hfu = hw / (gpus * peak * iter);
}

int64_t SequenceLength(const ModelSpec& model) {
  if (model.is_gpt) return model.gpt.seq;
  for (const auto& l : model.layers) {
    if (l.kind == LayerKind::kEmbedding && !l.in_shape.empty()) return l.in_shape[0];
  }
  return 0;
}

}  // namespace planner
