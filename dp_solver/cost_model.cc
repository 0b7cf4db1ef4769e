#include "dp_solver/cost_model.h"

#include <algorithm>
#include <unordered_map>
#include <array>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/units.h"
#include "dp_solver/moe_cost.h"
#include "spec/layer_catalog.h"

namespace planner {

void CostTable::BuildPrefix() {
  size_t n = rows.size();
  for (auto* v : {&pre_time, &pre_params, &pre_stash, &pre_f, &pre_bi, &pre_bw, &pre_tp, &pre_ep, &pre_expert, &pre_cp,
                  &pre_tp_total, &pre_cp_total, &pre_ep_total})
    v->assign(n + 1, 0.0);
  tied_rows.clear();
  for (size_t i = 0; i < n; ++i) {
    const auto& r = rows[i];
    if (r.tied_to >= 0) tied_rows.push_back(static_cast<int64_t>(i));
    pre_f[i + 1] = pre_f[i] + r.forward_s;
    pre_bi[i + 1] = pre_bi[i] + r.backward_input_s;
    pre_bw[i + 1] = pre_bw[i] + r.backward_weight_s;
    pre_tp[i + 1] = pre_tp[i] + r.tp_comm_s;
    pre_ep[i + 1] = pre_ep[i] + r.ep_comm_s;
    pre_cp[i + 1] = pre_cp[i] + r.cp_comm_s;
    pre_tp_total[i + 1] = pre_tp_total[i] + std::max(r.tp_total_s, r.tp_comm_s);
    pre_cp_total[i + 1] = pre_cp_total[i] + std::max(r.cp_total_s, r.cp_comm_s);
    pre_ep_total[i + 1] = pre_ep_total[i] + std::max(r.ep_total_s, r.ep_comm_s);
    pre_expert[i + 1] = pre_expert[i] + r.expert_params;
    pre_time[i + 1] = pre_time[i] + r.forward_s + r.backward_input_s + r.backward_weight_s;
    pre_params[i + 1] = pre_params[i] + r.params;
    pre_stash[i + 1] = pre_stash[i] + r.stash_bytes;
  }
}

bool HasAttention(const ModelSpec* model) {
  if (model == nullptr) return false;
  return std::any_of(model->layers.begin(), model->layers.end(), [](const Layer& l) { return HasAttention(l.kind); });
}

uint32_t ApplicableRecomputeModules(const ModelSpec* model) {
  if (model == nullptr) return 0;
  uint32_t mask = HasAttention(model) ? kDefaultRecomputeModules : 0;
  for (const auto& l : model->layers) {
    for (int i = 1; i < kRecomputeModuleCount; ++i) {
      const RecomputeModuleCost& c = l.recompute_modules[static_cast<size_t>(i)];
      if (c.stash_bytes > 0 || c.gemm_flops > 0 || c.mem_bytes > 0) mask |= 1u << i;
    }
  }
  return mask;
}

int64_t ModelExperts(const ModelSpec* model) {
  if (model == nullptr) return 0;
  for (const auto& l : model->layers) {
    if (l.experts > 0) return l.experts;
  }
  return 0;
}

bool TpDegreeValid(const ModelSpec& model, int64_t t) {
  if (t == 1) return true;
  for (const auto& l : model.layers) {
    if (l.tp_shardable && l.tp_divisor > 0 && l.tp_divisor % t != 0) return false;
  }
  return true;
}

std::vector<int64_t> GroupSpread(const ClusterSpec& c, int64_t size, int64_t stride) {
  // Members of a group {0, stride, 2 stride, ...}: how many share one unit at each level.
  std::vector<int64_t> spread;
  int64_t remaining = size;
  for (size_t l = 0; l < c.levels.size(); ++l) {
    int64_t unit = c.GpusPerUnit(l);
    int64_t inner = l == 0 ? 1 : c.GpusPerUnit(l - 1);
    // Members inside one level-l unit, divided by those already inside one level-(l-1) unit.
    int64_t in_unit = std::max<int64_t>(1, std::min(size, unit / std::max<int64_t>(1, stride)));
    int64_t in_inner = l == 0 ? 1 : std::max<int64_t>(1, std::min(size, inner / std::max<int64_t>(1, stride)));
    // Rounded up: a group that does not tile its units (12 ranks on 8-GPU nodes) reaches one more unit, charged as
    // a full one (the fullest unit's share, as GroupSpreadAt charges uneven groups).
    int64_t c_l = std::max<int64_t>(1, (in_unit + in_inner - 1) / in_inner);
    c_l = std::min(c_l, remaining);
    spread.push_back(c_l);
    remaining = std::max<int64_t>(1, (remaining + c_l - 1) / c_l);
  }
  if (remaining > 1) spread.back() *= remaining;  // more members than the cluster holds: charge the top level
  return spread;
}

// Per level l, the most level-(l-1) units one level-l unit holds of the ranks first + k stride,
// 0 <= k < size, without listing them: in a unit, the ranks from k_lo to k_hi touch every inner unit
// between theirs when stride <= inner (no step skips one), else one inner unit each (O(units touched)).
std::vector<int64_t> GroupSpreadAt(const ClusterSpec& c, int64_t first, int64_t size, int64_t stride) {
  if (stride < 0) {  // the same ranks in increasing order
    first += (size - 1) * stride;
    stride = -stride;
  }
  std::vector<int64_t> spread;
  const int64_t last = first + (size - 1) * stride;
  for (size_t l = 0; l < c.levels.size(); ++l) {
    const int64_t unit = c.GpusPerUnit(l);
    const int64_t inner = l == 0 ? 1 : c.GpusPerUnit(l - 1);
    int64_t most = 1;
    if (size > 1 && stride > 0 && stride < unit) {
      for (int64_t u = first / unit; u <= last / unit; ++u) {
        const int64_t lo_rank = std::max(first, u * unit), hi_rank = std::min(last, (u + 1) * unit - 1);
        const int64_t k_lo = (lo_rank - first + stride - 1) / stride, k_hi = (hi_rank - first) / stride;
        if (k_hi < k_lo) continue;
        const int64_t n =
            stride <= inner ? (first + k_hi * stride) / inner - (first + k_lo * stride) / inner + 1 : k_hi - k_lo + 1;
        most = std::max(most, n);
      }
    }
    spread.push_back(most);
  }
  if (spread.empty()) spread.push_back(size);
  // Ranks beyond the outermost level: charge the top level.
  int64_t covered = 1;
  for (int64_t s : spread) covered *= s;
  if (covered < size) spread.back() *= (size + covered - 1) / covered;
  return spread;
}

void GroupUnits(const ClusterSpec& c, int64_t first, int64_t size, int64_t stride, std::vector<int64_t>* fullest,
                std::vector<int64_t>* fewest) {
  *fullest = GroupSpreadAt(c, first, size, stride);
  fewest->assign(fullest->size(), 0);
  for (size_t l = 1; l < fewest->size() && l < c.levels.size(); ++l) {
    const int64_t inner = std::max<int64_t>(1, c.GpusPerUnit(l - 1));
    int64_t least = size, run = 0, unit = -1;  // ranks ascend: one run of equal units at a time
    for (int64_t k = 0; k < size; ++k) {
      const int64_t u = (first + k * stride) / inner;
      if (u != unit && run > 0) least = std::min(least, run);
      run = u == unit ? run + 1 : 1;
      unit = u;
    }
    (*fewest)[l] = std::min(least, run);
  }
}

double MeasuredSeconds(const std::vector<std::pair<double, double>>& points, double bytes) {
  if (points.empty() || !(bytes > 0)) return 0;
  if (bytes <= points.front().first) return points.front().second;  // latency-bound: the smallest measured time
  if (bytes >= points.back().first) return points.back().second * bytes / points.back().first;  // bandwidth-bound
  size_t hi = 1;
  while (points[hi].first < bytes) ++hi;
  const auto& a = points[hi - 1];
  const auto& b = points[hi];
  if (!(a.first > 0 && a.second > 0 && b.second > 0) || b.first == a.first) return b.second;
  const double f = std::log(bytes / a.first) / std::log(b.first / a.first);
  return std::exp(std::log(a.second) + f * std::log(b.second / a.second));
}

double AllReduceSeconds(const ClusterSpec& c, double bytes, const std::vector<int64_t>& members, AllReduceUse use) {
  double t = 0, shard = bytes;
  for (size_t l = 0; l < members.size() && l < c.levels.size(); ++l) {
    double n = static_cast<double>(members[l]);
    const TopologyLevel& lv = c.levels[l];
    if (n > 1) {
      // A gradient all-reduce within the after-compute curve's sizes is timed on it (below its
      // smallest size it has no measurement there and takes the general curve); a tensor-parallel
      // one on the warm curve where the profile has one besides the cold.
      const MeasuredCurve* curve = &lv.measured_allreduce;
      if (use == AllReduceUse::kGradient && lv.measured_grad_allreduce.usable() &&
          shard >= lv.measured_grad_allreduce.points.front().first) {
        curve = &lv.measured_grad_allreduce;
      } else if (use == AllReduceUse::kTensorParallel && lv.measured_tp_allreduce.usable()) {
        curve = &lv.measured_tp_allreduce;
      }
      if (curve->usable()) {
        // The measured time at this size, moved to n ranks at the same bus bandwidth (nccl-tests:
        // busbw = size x 2(g-1)/g / time does not depend on the group size g of a ring).
        const double g = static_cast<double>(curve->group);
        t += MeasuredSeconds(curve->points, shard) * ((n - 1) / n) / ((g - 1) / g);
      } else {
        t += 2 * (n - 1) / n * shard / (lv.bandwidth_GBps * 1e9) + 2 * (n - 1) * lv.latency_us * 1e-6;
      }
    }
    shard /= std::max(1.0, n);
  }
  return t;
}

double ReduceScatterSeconds(const ClusterSpec& c, double bytes, const std::vector<int64_t>& members, AllReduceUse use) {
  return 0.5 * AllReduceSeconds(c, bytes, members, use);
}

double AllGatherSeconds(const ClusterSpec& c, double bytes, const std::vector<int64_t>& members, AllReduceUse use) {
  return 0.5 * AllReduceSeconds(c, bytes, members, use);
}

double AllToAllSeconds(const ClusterSpec& c, double bytes_per_rank, const std::vector<int64_t>& members,
                       const AllToAllRouting& routing) {
  double slots = 1;  // the product of the members per level: N when every unit is full
  for (size_t l = 0; l < members.size() && l < c.levels.size(); ++l)
    slots *= static_cast<double>(std::max<int64_t>(1, members[l]));
  const double total = routing.ranks > 0 ? std::min(slots, static_cast<double>(routing.ranks)) : slots;  // N
  // A deduplicating dispatcher: each token crosses a level above the node once per node it reaches, the node
  // level once per GPU.
  const auto share = [&](double copies) {
    return copies > 0 && routing.top_k > 0 ? std::min(1.0, copies / static_cast<double>(routing.top_k)) : 1.0;
  };
  const double limited = share(routing.node_copies), per_gpu = share(routing.rank_copies);
  double t = 0, network = 0, inside = 1;  // inside: U_{l-1}, the group's ranks in a full level-(l-1) unit
  for (size_t l = 0; l < members.size() && l < c.levels.size(); ++l) {
    const double n = static_cast<double>(std::max<int64_t>(1, members[l]));
    const TopologyLevel& lv = c.levels[l];
    if (n > 1 && bytes_per_rank > 0) {
      // The units fill in rank order: the last holds what is left of N (all of `inside` when they tile), unless the
      // caller listed the group's fewest per unit.
      const double emptiest = l >= 1 && l < routing.fewest.size() && routing.fewest[l] > 0
                                  ? std::min(inside, static_cast<double>(routing.fewest[l]))
                                  : std::clamp(total - (std::ceil(total / inside) - 1) * inside, 1.0, total);
      const double crossing = bytes_per_rank * (total - emptiest) / total * (l >= 1 ? limited : per_gpu);  // D_l
      double level_s = 0;
      if (!(crossing > 0)) {
        // Nothing leaves the level's units (the group lies within one of them): no transfer, no latency.
      } else if (lv.measured_alltoall.usable()) {
        // The curve's time at the size whose crossing share (g - 1)/g is D_l (busbw convention).
        const double g = static_cast<double>(lv.measured_alltoall.group);
        level_s = MeasuredSeconds(lv.measured_alltoall.points, crossing * g / (g - 1));
      } else {
        level_s = crossing / (lv.bandwidth_GBps * 1e9) + (n - 1) * lv.latency_us * 1e-6;
      }
      // Serial hops: the NVLink forward after the one network transfer, which crosses every level above the node.
      if (routing.node_copies > 0 && routing.serial_hops && l >= 1) network = std::max(network, level_s);
      else t = std::max(t, level_s);
    }
    inside *= n;
  }
  return t + network;
}

namespace {

// A profile curve's points in increasing size, with its group.
MeasuredCurve Measured(const CommCurve& c) {
  MeasuredCurve m{c.points, c.group_size};
  std::sort(m.points.begin(), m.points.end());
  return m;
}

// How a curve was measured, for the solver's notes.
std::string CurveConditions(const CommCurve& c) {
  if (!c.cold) return "";
  if (c.gap_s > 0) return fmt::format(" (cold caches, {:.3g} ms of compute before each)", c.gap_s * 1e3);
  return " (cold caches)";
}

}  // namespace

void ApplyCommCurves(const Profile& comm, const std::string& path, ClusterSpec* c, std::vector<std::string>* notes) {
  for (size_t l = 0; l < c->levels.size(); ++l) {
    TopologyLevel& lv = c->levels[l];
    const std::string measured = l == 0 ? "node" : (l == 1 ? "cluster" : "");
    const CommCurve* ar = measured.empty() ? nullptr : comm.FindComm("all_reduce", measured);
    const CommCurve* grad =
        measured.empty() ? nullptr : comm.FindComm("all_reduce", measured, Profile::Conditions::kAfterCompute);
    const CommCurve* warm =
        measured.empty() ? nullptr : comm.FindComm("all_reduce", measured, Profile::Conditions::kWarm);
    const CommCurve* p2p = measured.empty() ? nullptr : comm.FindComm("send_recv", measured);
    // Dispatch sends what the router just computed: the warm curve first, as tensor parallelism's.
    const CommCurve* a2a =
        measured.empty() ? nullptr : comm.FindComm("all_to_all", measured, Profile::Conditions::kWarm);
    if (a2a != nullptr && a2a->group_size > 1 && !a2a->points.empty()) lv.measured_alltoall = Measured(*a2a);
    const std::string a2a_note = lv.measured_alltoall.usable() ? fmt::format("; all-to-all measured ({}, {} {} ranks)",
                                                                             path, a2a->backend, a2a->group_size)
                                                               : std::string();
    if (ar == nullptr || !(ar->busbw_GBps > 0)) {
      // A curve whose fit has no bandwidth (times that do not grow with the size: a loaded machine's noise) is said
      // so, not passed off as unmeasured.
      const std::string why =
          ar == nullptr ? "not measured"
                        : fmt::format(
                              "the all-reduce curve in {} has no usable bandwidth: its times do not grow with "
                              "the size; profile again on an idle machine",
                              path);
      notes->push_back(fmt::format("level '{}': {} GB/s, {} us from the cluster file ({}){}", lv.name,
                                   lv.bandwidth_GBps, lv.latency_us, why, a2a_note));
      continue;
    }
    lv.bandwidth_GBps = ar->busbw_GBps;
    lv.latency_us = ar->alpha_s / (2.0 * static_cast<double>(std::max<int64_t>(1, ar->group_size - 1))) * 1e6;
    lv.measured_allreduce = Measured(*ar);
    std::string use_notes;  // the uses timed on other curves than the general one
    if (grad != nullptr && grad != ar && !grad->points.empty()) {
      lv.measured_grad_allreduce = Measured(*grad);
      use_notes = fmt::format("; gradient all-reduces from {} on the curve{}",
                              FormatBytes(lv.measured_grad_allreduce.points.front().first), CurveConditions(*grad));
    }
    if (warm != nullptr && warm != ar && !warm->cold && !warm->points.empty()) {
      lv.measured_tp_allreduce = Measured(*warm);
      use_notes += "; tensor-parallel all-reduces on the warm curve";
    }
    if (p2p != nullptr && p2p->busbw_GBps > 0) {
      lv.p2p_bandwidth_GBps = p2p->busbw_GBps;
      lv.measured_p2p = Measured(*p2p).points;
    }
    notes->push_back(fmt::format(
        "level '{}': measured ({}, {} {} ranks): all-reduce busbw {:.3g} GB/s, latency {:.3g} us{}{}{}", lv.name, path,
        ar->backend, ar->group_size, lv.bandwidth_GBps, lv.latency_us,
        p2p ? fmt::format(", send/recv {:.3g} GB/s", lv.p2p_bandwidth_GBps) : std::string(),
        lv.measured_allreduce.points.empty() ? std::string()
                                             : fmt::format("; times interpolated from {} measured sizes{}",
                                                           lv.measured_allreduce.points.size(), CurveConditions(*ar)) +
                                                   use_notes,
        a2a_note));
  }
}

double P2PSeconds(const ClusterSpec& c, double bytes, int64_t a, int64_t b) {
  if (a == b || bytes <= 0) return 0;
  for (size_t l = 0; l < c.levels.size(); ++l) {
    int64_t unit = c.GpusPerUnit(l);
    if (a / unit == b / unit) {
      if (!c.levels[l].measured_p2p.empty()) return MeasuredSeconds(c.levels[l].measured_p2p, bytes);
      return bytes / (c.levels[l].p2p_bandwidth_GBps * 1e9) + c.levels[l].latency_us * 1e-6;
    }
  }
  const auto& top = c.levels.back();
  if (!top.measured_p2p.empty()) return MeasuredSeconds(top.measured_p2p, bytes);
  return bytes / (top.p2p_bandwidth_GBps * 1e9) + top.latency_us * 1e-6;
}

std::string AttentionKernel(const KernelTable& kernels, const EngineSpec& engine) {
  if (kernels.HasKernel(engine.attention)) return engine.attention;
  for (const auto& k : engine.attention_fallback) {
    if (kernels.HasKernel(k)) return k;
  }
  return kernels.curves.empty() ? std::string() : kernels.curves.front().kernel;
}

Status CheckCostSource(const CostSource& src) {
  if (src.cluster == nullptr) return Status::InvalidArgument("costs need a cluster (--cluster)");
  if (src.profile != nullptr) return Status::OK();
  if (src.model == nullptr) return Status::InvalidArgument("costs need a model (--model) or a profile (--profile)");
  const ClusterSpec& c = *src.cluster;
  const std::string dtype = DTypeName(src.model->dtype);
  if (!(c.PeakFlops(src.model->dtype) > 0)) {
    return Status::InvalidArgument(fmt::format(
        "{}: cluster '{}' has no peak for dtype {} (the dtype of model '{}'); add gpu.peak_tflops.{} to it{}", c.path,
        c.name, dtype, src.model->name, dtype,
        src.model->dtype == DType::kFp8 ? ", or train in bf16 (this GPU may have no FP8 tensor cores)" : ""));
  }
  if (KernelLevel(src)) {
    const KernelTable& kt = *src.kernels;
    if (kt.Gemm(src.model->dtype) == nullptr || kt.Gemm(DType::kBf16) == nullptr) {
      return Status::InvalidArgument(fmt::format(
          "{}: kernel table '{}' has no GEMM figures for {}{}; add gemm.{} to it, or plan with --kernels none (the "
          "cluster's flat efficiency)",
          kt.path, kt.name, dtype, kt.Gemm(DType::kBf16) == nullptr ? " (nor bf16, which FP8 models use too)" : "",
          kt.Gemm(src.model->dtype) == nullptr ? dtype : "bf16"));
    }
    // A table that lists FP8 recipes and not the engine's (Hopper has no MXFP8 tensor cores): refused, not costed as
    // per-tensor scaling. A table listing none (a measured one) costs every recipe as per-tensor (Fp8Recipe{}).
    const std::string& recipe = src.engine != nullptr ? src.engine->fp8_recipe : std::string();
    if (src.model->dtype == DType::kFp8 && !recipe.empty() && !kt.fp8_recipes.empty() &&
        kt.fp8_recipes.count(recipe) == 0) {
      std::vector<std::string> has;
      for (const auto& kv : kt.fp8_recipes) has.push_back(kv.first);
      return Status::InvalidArgument(fmt::format(
          "{}: kernel table '{}' has no FP8 recipe '{}' (the recipe of engine '{}': its fp8_recipe or --fp8-recipe); "
          "it has {}: use one of them "
          "(--fp8-recipe, or an engine file's fp8_recipe), a kernel table with fp8_recipes.{} (--kernels), or "
          "--precision bf16",
          kt.path, kt.name, recipe, src.engine->name, fmt::join(has, ", "), recipe));
    }
  }
  return Status::OK();
}

namespace {

// What every row of one analytic table shares: the parallel sizes and the rates.
struct RowRates {
  double bd = 1, td = 1, cpd = 1;  // microbatch, tp, cp as doubles
  int64_t t = 1, cp = 1;
  bool sp = false;
  Recompute rc = Recompute::kNone;
  uint32_t modules = kDefaultRecomputeModules;  // selective recompute's (RecomputeBit mask)
  double peak_gemm = 0;   // FLOP/s of the GEMMs: the dtype's peak x its efficiency (fp8: the fp8 ones)
  double peak_other = 0;  // FLOP/s of the attention core (bf16 under fp8)
  double hbm = 0;         // bytes/s of memory-bound work
  std::vector<int64_t> tp_group;
  int64_t ep = 1, etp = 1;
  double moe_imbalance = 1;
  bool moe_overlap = false;
  bool moe_dedup = false, moe_flex_serial = true;
  double moe_hidden = 1;  // share of the all-to-all run beside compute with moe_overlap (the engine's; flat: 1)
  // Host seconds per local routed expert per layer-microbatch, forward and backward (the engine's moe_host; 0: the
  // expert block's host launches not modelled).
  double moe_host_fwd = 0, moe_host_bwd = 0;
  bool cp_overlap = true;         // ring attention's exchange hidden behind its steps (CostOptions::cp_overlap)
  bool cp_allgather = false;      // --cp-comm-type allgather (CostOptions::cp_comm)
  std::vector<int64_t> cp_group;  // the CP group's spread (ranks t apart; set for cp_allgather)
  // Kernel-level costs (nullptr kt: the flat model above).
  const KernelTable* kt = nullptr;
  std::string attention_kernel;                // the engine's flash-attention kernel on this table
  const GemmEfficiency* gemm_model = nullptr;  // the model precision's GEMM figures
  const GemmEfficiency* gemm_high = nullptr;   // bf16's, for GEMMs outside fp8_autocast
  double peak_model = 0, peak_high = 0;        // dense peaks (FLOP/s), x the engine's sustained GEMM share
  double recipe_gemm = 1;                      // the FP8 recipe's GEMM rate
  double cast_bytes = 0;                       // HBM bytes per element of an FP8 GEMM input cast (0: none costed)
  double weight_cast_bytes = 0;  // HBM bytes per weight element cast per microbatch (engines without a cached FP8 copy)
  double gemm_in_bytes = 2;      // bytes per operand element of the model precision's GEMMs (FP8: 1)
  double wgrad_out_bytes = 2;    // HBM bytes per weight-gradient element its GEMM moves (fused accumulation: 2 x grad)
  double grad_accum_bytes = 0;   // HBM bytes per parameter of the engine's separate accumulation pass per microbatch
  bool sac_saves_unread = true;  // the engine's selective checkpointing keeps outputs its backward never reads
  std::array<double, 2> loss_logit_bytes = {0,
                                            0};  // the engine's bytes per logit element at the loss's peak {tp 1, tp}
  double attention_share = 1;                    // the engine's sustained share of the attention tables
  double cp_ring_fwd = 1, cp_ring_bwd = 1;       // the engine's ring-attention step rates (cp > 1; EngineSpec)
  double cp_slowdown = 0;  // compute lost per second of the ring's hidden exchange (0 where cp_ring carries it)
  double tp_hidden = 0, slowdown = 0;  // TP collectives hidden; compute lost per hidden second
  double hbm_raw = 0;                  // HBM bytes/s of one fused kernel (GEMM operands, no elementwise factor)
};

// Rates of one layer's attention core (FLOP/s), forward and backward.
struct CoreRates {
  double fwd = 0, bwd = 0;
};

// Seconds of one pass of a layer for the microbatch on one GPU: work / (t or 1) / cp. `core_rate`:
// the attention core's FLOP/s (0: q.peak_other).
double PassSeconds(const RowRates& q, double shard, double gemm_flops, double core_flops, double bytes,
                   double core_rate = 0) {
  const double w = q.bd / (shard * q.cpd);
  return w * (std::max(0.0, gemm_flops) / q.peak_gemm + core_flops / (core_rate > 0 ? core_rate : q.peak_other) +
              bytes / q.hbm);
}

// Fill of the last wave of `ctas` thread blocks on `sms` multiprocessors.
double WaveFill(double ctas, double sms) {
  if (!(ctas > 0) || !(sms > 0)) return 1;
  return ctas / (std::ceil(ctas / sms) * sms);
}

// The attention core's rates on the kernel table (docs/cost_model.md section 2, "Kernel-level
// compute"): the engine's kernel at the layer's head dim, forward and backward; without context
// parallelism the causal curve at s; with cp ring steps, of which 1/cp are the causal diagonal at s/cp
// and the rest non-causal blocks at s/(2cp) (load-balanced chunks), blended by their equal work, at the
// engine's ring-step share of the kernel (cp_ring: the merges and accumulations between steps). The
// FlashAttention benchmarks ran 16k tokens per batch (thousands of thread blocks); a microbatch with
// fewer blocks (b x heads/t x s/(cp 128)) than multiprocessors fills the last wave only partly.
CoreRates AttentionRates(const Layer& l, const RowRates& q, double tp_shard) {
  CoreRates r;
  const KernelTable& kt = *q.kt;
  if (l.attrs.String("attention", "flash") != "flash" || q.attention_kernel.empty()) {
    r.fwd = r.bwd = q.peak_high * kt.GemmFraction(*q.gemm_high, l.attention_seq, l.attention_seq,
                                                  std::max(1.0, l.attention_head_dim));
    return r;
  }
  const double s = l.attention_seq / q.cpd, d = l.attention_head_dim;
  auto rate = [&](const char* pass) {
    // A sliding window of w keys: each query block runs over about w keys before it, the work of a causal kernel
    // over 2 w tokens (its queries' mean w), wherever the sequence was split (context parallelism gathers the keys:
    // Transformer Engine runs windows under CP with all-gather or all-to-all only). An assumption: no published
    // benchmark of the windowed kernels.
    // Packed samples: the varlen kernel's blocks run over one sample each, a causal kernel at the samples' mean
    // length (an assumption, as the window's; the tables start at 512 tokens, so shorter samples are costed there).
    // Both: the shorter.
    if (l.attention_window > 0 || l.attention_packed > 0) {
      double span = l.attention_seq;
      if (l.attention_window > 0) span = std::min(span, 2 * l.attention_window);
      if (l.attention_packed > 0) span = std::min(span, l.attention_packed);
      return kt.AttentionTflops(q.attention_kernel, pass, true, d, span);
    }
    const double causal = kt.AttentionTflops(q.attention_kernel, pass, true, d, s);
    if (q.cp <= 1) return causal;
    if (q.cp_allgather) {
      // Two kernels of s/2 queries (chunks r and 2cp - 1 - r) over the gathered keys before them: their
      // causal diagonal blocks, 1/(2cp) of the work, at s/2; the rest at the keys' mean length (l.attention_seq / 2).
      const double diag = kt.AttentionTflops(q.attention_kernel, pass, true, d, s / 2);
      const double open = kt.AttentionTflops(q.attention_kernel, pass, false, d, l.attention_seq / 2);
      return 1.0 / ((0.5 / q.cpd) / diag + (1.0 - 0.5 / q.cpd) / open);
    }
    return kt.RingStepTflops(q.attention_kernel, pass, d, s, q.cpd);
  };
  const double fill =
      WaveFill(q.bd * std::max(1.0, l.attention_heads / tp_shard) * std::ceil(s / 128), static_cast<double>(kt.sms));
  // The ring's step share (its merges and accumulations) is the ring's; all-gather CP has none.
  const bool ring = q.cp > 1 && !q.cp_allgather;
  r.fwd = rate("fwd") * 1e12 * q.attention_share * fill * (ring ? q.cp_ring_fwd : 1.0);
  r.bwd = rate("bwd") * 1e12 * q.attention_share * fill * (ring ? q.cp_ring_bwd : 1.0);
  return r;
}

// Seconds of one GEMM on one GPU at the table's efficiency for its shape (output m x n, reduction k),
// or of its operands' HBM traffic if that is longer (a small-K or small-M GEMM is memory-bound): inputs at the
// precision's bytes, the output at `out_bytes` per element (2: written in bf16; a fused gradient accumulation
// reads and writes its buffer).
double GemmSeconds(const RowRates& q, bool high, double m, double n, double k, double out_bytes) {
  const GemmEfficiency& g = high ? *q.gemm_high : *q.gemm_model;
  const double peak = high ? q.peak_high : q.peak_model * q.recipe_gemm;
  const double in_bytes = high ? 2.0 : q.gemm_in_bytes;
  const double compute = 2 * m * n * k / (peak * q.kt->GemmFraction(g, m, n, k));
  const double traffic = ((m * k + k * n) * in_bytes + out_bytes * m * n) / q.hbm_raw;
  return std::max(compute, traffic);
}

// One pass (0 forward, 1 input gradient, 2 weight gradient) of a layer's listed GEMMs on one GPU:
// seconds, *flops_per_sample their FLOPs per sample (whole layer), *cast_s the FP8 casts of their
// inputs (forward: the input; input gradient: the output gradient, which the weight gradient reuses).
double ListedGemmSeconds(const Layer& l, const RowRates& q, double shard, int pass, double* flops_per_sample,
                         double* cast_s, bool experts_only = false) {
  double seconds = 0;
  *flops_per_sample = 0;
  *cast_s = 0;
  const bool tp = l.tp_shardable && q.t > 1;
  for (const GemmShape& g : l.gemms) {
    if (experts_only && !g.expert) continue;
    if (pass == 2 && g.frozen) continue;  // a frozen weight (LoRA's base) takes no gradient
    *flops_per_sample += g.Flops();
    double m = q.bd * g.rows / q.cpd, n = g.n, k = g.k, count = 1;
    if (g.expert) {  // E/ep experts, each on its share of the EP group's token copies, n or k over ETP
      const double ep = static_cast<double>(q.ep), etp = static_cast<double>(q.etp);
      count = g.count / ep;
      m = q.bd * g.rows * ep * etp / (q.cpd * shard * g.count);
      if (g.split == GemmSplit::kColumn) n /= etp;
      if (g.split == GemmSplit::kRow) k /= etp;
    } else if (tp && g.split == GemmSplit::kColumn) {
      n /= q.td;
    } else if (tp && g.split == GemmSplit::kRow) {
      k /= q.td;
    }
    const double dims[3][3] = {{m, n, k}, {m, k, n}, {k, n, m}};
    const double* x = dims[pass];
    // The weight gradient's output: accumulated into the gradient buffer by an engine that fuses it.
    seconds += count * GemmSeconds(q, g.high_precision, x[0], x[1], x[2], pass == 2 ? q.wgrad_out_bytes : 2.0);
    if (q.cast_bytes > 0 && !g.high_precision && pass < 2)
      *cast_s += count * m * (pass == 0 ? k : n) * q.cast_bytes / q.hbm;
    if (q.weight_cast_bytes > 0 && !g.high_precision && pass == 0)
      *cast_s += count * k * n * q.weight_cast_bytes / q.hbm;
  }
  return seconds;
}

// A pass's compute on the kernel tables: the listed GEMMs at their shapes' rates, the GEMM FLOPs not
// listed at the precision's large-shape rate, the core at the attention rate, memory-bound bytes
// (x the engine's elementwise traffic) and FP8 casts at HBM's.
double KernelPassSeconds(const Layer& l, const RowRates& q, double shard, int pass, double gemm_flops,
                         double core_flops, double core_rate, double bytes) {
  double listed = 0, cast = 0;
  const double gemm_s = ListedGemmSeconds(l, q, shard, pass, &listed, &cast);
  const double w = q.bd / (shard * q.cpd);
  const double rest = std::max(0.0, gemm_flops - listed);
  return gemm_s + cast + w * (rest / q.peak_gemm + (core_flops > 0 ? core_flops / core_rate : 0) + bytes / q.hbm);
}

// Exposed ring-attention KV exchange of one layer (forward; backward moves KV and dKV: twice):
// cp - 1 steps of K, V of one chunk pair (cp_kv_bytes / cp per microbatch sample, / t for the
// rank's heads) over the CP group's widest level, each hidden behind one step of attention core.
// Backward moves twice the bytes per step (K, V forward and dK, dV back) behind the backward core,
// `core_ratio` x the forward's (flash 2.5, unfused 2).
// Ring attention's KV exchange of one pass whole, hidden or not: (cp - 1) steps (bytes_ratio: 2 in backward).
// All-gather context parallelism (--cp-comm-type allgather; Transformer Engine's
// AttnFuncWithCPAndKVAllGather, whose docstring says the exchange is exposed): the forward all-gathers the
// sequence's K and V for the rank's heads once per layer (two collectives); the backward (bytes_ratio 2) gathers
// them again and reduce-scatters dK and dV. Nothing hidden. The reorder and slice copies of the gathered K, V are not
// costed (with grouped-query attention a few bytes per token against the layer's activations).
double CpAllGatherSeconds(const ClusterSpec& c, const Layer& l, const RowRates& q, double shard, double bytes_ratio) {
  const double half = q.bd * l.cp_kv_bytes / shard / 2;  // K and V are gathered (dK, dV reduce-scattered) apart
  const double gather = 2 * AllGatherSeconds(c, half, q.cp_group);
  if (bytes_ratio < 2) return gather;
  return gather + 2 * ReduceScatterSeconds(c, half, q.cp_group);
}

double CpTotal(const ClusterSpec& c, const Layer& l, const RowRates& q, double shard, double bytes_ratio) {
  if (q.cp <= 1 || !(l.cp_kv_bytes > 0)) return 0;
  if (q.cp_allgather) return CpAllGatherSeconds(c, l, q, shard, bytes_ratio);
  const double step_bytes = q.bd * l.cp_kv_bytes / q.cpd / shard;
  return static_cast<double>(q.cp - 1) * bytes_ratio * P2PSeconds(c, step_bytes, 0, q.t * (q.cp - 1));
}

double CpExposed(const ClusterSpec& c, const Layer& l, const RowRates& q, double shard, double bytes_ratio,
                 double core_ratio, double core_rate) {
  if (q.cp <= 1 || !(l.cp_kv_bytes > 0)) return 0;
  if (q.cp_allgather) return CpAllGatherSeconds(c, l, q, shard, bytes_ratio);
  const double step_bytes = q.bd * l.cp_kv_bytes / q.cpd / shard;
  const double comm = bytes_ratio * P2PSeconds(c, step_bytes, 0, q.t * (q.cp - 1));
  if (!q.cp_overlap) return static_cast<double>(q.cp - 1) * comm;
  const double compute = core_ratio * q.bd * l.attention_core_fwd_flops / (shard * q.cpd * q.cpd) / core_rate;
  // The engine's compute slowdown on the part the ring hides (kernel-level costs; 0 in the flat model, and where the
  // engine's cp_ring shares were measured with the exchange beside the steps: cp_ring.with_exchange).
  return static_cast<double>(q.cp - 1) * (std::max(0.0, comm - compute) + q.cp_slowdown * std::min(comm, compute));
}

// Whether sequence parallelism splits this layer's tokens over the TP ranks: Megatron's SP regions
// are the transformer's (its norms, dropouts and residuals, and the tensor-parallel layers' inputs);
// a layer outside a transformer (a convolution, a plain linear or activation) is not split.
bool InSequenceParallelRegion(const Layer& l) {
  return l.tp_shardable || IsNorm(l.kind) || l.kind == LayerKind::kDropout;
}

// Whether selective recompute with `modules` drops module m's stash: moe's checkpoint holds
// moe_act's and shared_experts' (counted once, under moe).
bool DropsStash(uint32_t modules, RecomputeModule m) {
  if (!HasRecomputeModule(modules, m)) return false;
  return !((m == RecomputeModule::kMoeAct || m == RecomputeModule::kSharedExperts) &&
           HasRecomputeModule(modules, RecomputeModule::kMoe));
}

// What selective recompute with `modules` drops beyond core_attn's default (negative: core_attn
// not recomputed, its part kept): {stash, of it TP-replicated, of it routed experts'}.
std::array<double, 3> ModuleStashDrop(const Layer& l, uint32_t modules) {
  std::array<double, 3> d{0, 0, 0};
  if (!HasRecomputeModule(modules, RecomputeModule::kCoreAttn)) d[0] -= l.recompute_modules[0].stash_bytes;
  for (int i = 1; i < kRecomputeModuleCount; ++i) {
    if (!DropsStash(modules, static_cast<RecomputeModule>(i))) continue;
    const RecomputeModuleCost& c = l.recompute_modules[static_cast<size_t>(i)];
    d[0] += c.stash_bytes;
    d[1] += c.stash_tp_replicated;
    d[2] += c.expert_stash_bytes;
  }
  return d;
}

// Bytes of one layer's stash on one GPU (docs/cost_model.md section 5).
double StashBytes(const Layer& l, const RowRates& q, double tp_shard) {
  const bool sp = q.sp && InSequenceParallelRegion(l);
  const double seq_shard = (sp ? q.td : 1.0) * q.cpd;  // SP splits the replicated regions, CP every token
  const Recompute rc = q.rc;
  double stash = rc == Recompute::kFull ? l.stash_bytes_full
                                        : (rc == Recompute::kSelective ? l.stash_bytes_selective : l.stash_bytes);
  double tp_replicated = l.stash_bytes_tp_replicated;
  if (rc == Recompute::kSelective && q.modules != kDefaultRecomputeModules) {
    const std::array<double, 3> drop = ModuleStashDrop(l, q.modules);
    stash -= drop[0];
    tp_replicated -= drop[1];
    // A compiled graph's partitioner drops the saved outputs no backward reads (op_sac's w2 output).
    if (!q.sac_saves_unread && HasRecomputeModule(q.modules, RecomputeModule::kOpSac)) {
      const double unread = l.recompute_modules[static_cast<size_t>(RecomputeModule::kOpSac)].unread_bytes;
      stash -= unread;
      tp_replicated -= unread;
    }
  }
  // Full recompute keeps each layer's input whole on every TP rank (Korthikanti Table 2: 2sbh,
  // /t with SP); the lm_head is not recomputed and keeps its input, replicated without SP.
  if ((rc == Recompute::kFull && l.kind != LayerKind::kLoss) || l.kind == LayerKind::kLmHead)
    return q.bd * stash / seq_shard;
  // The loss is not recomputed either: its fp32 logits stay split over the TP ranks as without
  // recompute (vocab-parallel cross-entropy, 4sbV/t; Korthikanti 4.3).
  const double replicated = std::min(stash, tp_replicated);
  // Kept whole under SP (LoRA's gathered adapter inputs); without SP they are the base's kept input, counted above.
  const double whole = q.sp && q.t > 1 && rc != Recompute::kFull ? l.stash_bytes_sp_whole / q.cpd : 0;
  return q.bd * (replicated / seq_shard + (stash - replicated) / (tp_shard * q.cpd) + whole);
}

// Selective recompute's MoE modules beyond the balanced FLOPs AnalyticRow costs: the busiest EP
// rank's extra tokens in the re-run expert GEMMs, and moe's re-run regroup, all-to-alls and expert TP collectives.
void AddMoeModuleRecompute(const Layer& l, const RowRates& q, const MoeLayerCost& m, double shard, double a2a_f,
                           LayerCostRow* r) {
  const double extra = m.token_factor - 1;
  double expert_gemm = 0;
  for (int i = 1; i < kRecomputeModuleCount; ++i) {
    if (HasRecomputeModule(q.modules, static_cast<RecomputeModule>(i)))
      expert_gemm += l.recompute_modules[static_cast<size_t>(i)].expert_gemm_flops;
  }
  r->backward_input_s += PassSeconds(q, shard, extra * expert_gemm, 0, 0);
  if (!HasRecomputeModule(q.modules, RecomputeModule::kMoe)) return;
  r->backward_input_s += m.regroup_bytes / q.hbm + a2a_f + m.etp_pass_s;
  r->ep_comm_s += a2a_f;
  r->ep_total_s += m.a2a_pass_s;
  r->tp_comm_s += m.etp_pass_s;
  r->tp_total_s += m.etp_pass_s;
}

// The routed experts' forward GEMMs on one GPU, balanced: at their shapes' rates with their input casts on a kernel
// table, else at the precision's GEMM rate.
double ExpertForwardSeconds(const Layer& l, const RowRates& q, double shard) {
  if (q.kt == nullptr || q.gemm_model == nullptr) return PassSeconds(q, shard, l.expert_fwd_flops, 0, 0);
  double flops = 0, cast = 0;
  const double s = ListedGemmSeconds(l, q, shard, 0, &flops, &cast, true);
  return s + cast;
}

// The routed-expert block waiting for the host (docs/cost_model.md "The MoE expert block's host time"): the engine
// launches each local expert's GEMMs (and FP8 quantization) one by one. Forward: the dispatcher syncs the host once per
// layer, so the launches after it are covered only by the GPU work they start (the all-to-alls, the regroup and the
// expert GEMMs); backward has no sync, so the host may run ahead by the layer's whole backward. Returns the waits
// {forward, backward} in seconds (0 where the GPU's work is longer).
std::array<double, 2> MoeHostWait(const Layer& l, const RowRates& q, double shard, double forward_window,
                                  double backward_s) {
  if (!(q.moe_host_fwd > 0 || q.moe_host_bwd > 0)) return {0, 0};
  const double local = static_cast<double>(l.experts) / static_cast<double>(std::max<int64_t>(1, q.ep));
  const double gpu_f = ExpertForwardSeconds(l, q, shard) + forward_window;
  return {std::max(0.0, local * q.moe_host_fwd - gpu_f), std::max(0.0, local * q.moe_host_bwd - backward_s)};
}

// An MoE layer's expert parallelism on top of its row costed as a layer of its totals (which hold the
// balanced expert FLOPs / (t cp) and stash): the busiest EP rank's extra tokens (imbalance), the
// dispatch and combine all-to-alls of each pass (exposed, or less what the pass's compute hides with
// --moe-overlap), the expert TP all-gather / reduce-scatter, full recompute's forward again, and the
// expert parameters / (ep etp) in place of / t (docs/cost_model.md, "Expert parallelism").
void AddMoeCosts(const ClusterSpec& c, const Layer& l, const RowRates& q, double tp_shard, double shard,
                 LayerCostRow* r) {
  if (l.experts <= 0) return;
  // Full recompute's re-run forward, already in the row's backward (its own host sync: no cover for the backward's
  // launches).
  const double rerun_forward = q.rc == Recompute::kFull ? r->forward_s : 0;
  const MoeLayerCost m = MoeLayerCosts(
      c, l, MoeShape{q.bd, q.td, q.cpd, q.ep, q.etp, q.moe_imbalance, q.moe_overlap, q.moe_dedup, q.moe_flex_serial});
  const double extra = m.token_factor - 1, core = l.attention_core_fwd_flops;
  const double regroup = m.regroup_bytes / q.hbm;  // the received copies sorted by local expert and back
  const double f_extra = PassSeconds(q, shard, extra * l.expert_fwd_flops, 0, 0) + regroup;
  const double bi_extra = PassSeconds(q, shard, extra * l.expert_bwd_input_flops, 0, 0);
  const double bw_extra = PassSeconds(q, shard, extra * l.expert_bwd_weight_flops, 0, 0);
  const double f_compute = PassSeconds(q, shard, l.fwd_flops - core, core, l.fwd_mem_bytes) + f_extra;
  const double b_compute =
      PassSeconds(q, shard, l.bwd_input_flops - 2 * core + l.bwd_weight_flops, 2 * core, l.bwd_mem_bytes) + bi_extra +
      bw_extra + regroup;
  const double a2a_f = MoeExposed(m.a2a_pass_s, f_compute, q.moe_overlap, q.moe_hidden),
               a2a_b = MoeExposed(m.a2a_pass_s, b_compute, q.moe_overlap, q.moe_hidden);
  r->forward_s += f_extra + a2a_f + m.etp_pass_s;
  r->backward_input_s += bi_extra + regroup + a2a_b + m.etp_pass_s;
  r->backward_weight_s += bw_extra;
  // The forward's window after the host sync: the dispatch all-to-all whole (half the pass's: the host launches the
  // experts while it runs, hidden or not; the combine is launched after them; assumed for flex too, whose counts
  // DeepEP / HybridEP read from host lists), the regroup and the busiest rank's extra tokens, the expert TP
  // all-gather (its reduce-scatter is launched after the experts). The backward's: the layer's backward less full
  // recompute's re-run forward.
  const std::array<double, 2> wait = MoeHostWait(l, q, shard, f_extra + 0.5 * m.a2a_pass_s + 0.5 * m.etp_pass_s,
                                                 r->backward_input_s + r->backward_weight_s - rerun_forward);
  // A re-run forward (full recompute, or selective recompute's moe module) syncs and launches again.
  const bool rerun = q.rc == Recompute::kFull ||
                     (q.rc == Recompute::kSelective && HasRecomputeModule(q.modules, RecomputeModule::kMoe));
  const double rerun_wait = rerun ? wait[0] : 0;
  r->forward_s += wait[0];
  r->backward_input_s += wait[1] + rerun_wait;
  r->moe_host_wait_s = wait[0] + wait[1] + rerun_wait;
  r->ep_comm_s = a2a_f + a2a_b;
  r->ep_total_s = 2 * m.a2a_pass_s;
  r->tp_comm_s += 2 * m.etp_pass_s;
  r->tp_total_s += 2 * m.etp_pass_s;
  if (q.rc == Recompute::kFull) {  // the forward re-run, its all-to-alls and expert TP collectives with it
    r->backward_input_s += f_extra + a2a_f + m.etp_pass_s;
    r->ep_comm_s += a2a_f;
    r->ep_total_s += m.a2a_pass_s;
    r->tp_comm_s += m.etp_pass_s;
    r->tp_total_s += m.etp_pass_s;
  } else {
    const double expert_drop = q.rc == Recompute::kSelective ? ModuleStashDrop(l, q.modules)[2] : 0;
    r->stash_bytes += extra * q.bd * (l.expert_stash_bytes - expert_drop) / (tp_shard * q.cpd);
  }
  if (q.rc == Recompute::kSelective) AddMoeModuleRecompute(l, q, m, shard, a2a_f, r);
  r->params = (l.params - l.expert_params) / tp_shard + m.params;
  r->expert_params = m.params;
}

// Selective recompute's backward work: each module's re-run forward (core_attn: the attention core
// and its softmax / dropout; the others their GEMMs at the GEMM rate, their memory-bound work and the
// TP all-reduces of the regions they re-run, `ar` each). Adds those collectives to *tp_comm_s.
double ModuleRecomputeSeconds(const Layer& l, const RowRates& q, double shard, double ar, double core_rate,
                              double* tp_comm_s) {
  double seconds = 0;
  if (HasRecomputeModule(q.modules, RecomputeModule::kCoreAttn)) {
    seconds += PassSeconds(q, shard, 0, l.selective_recompute_flops, l.selective_recompute_mem_bytes, core_rate);
  }
  for (int i = 1; i < kRecomputeModuleCount; ++i) {
    if (!HasRecomputeModule(q.modules, static_cast<RecomputeModule>(i))) continue;
    const RecomputeModuleCost& c = l.recompute_modules[static_cast<size_t>(i)];
    if (c.gemm_flops == 0 && c.core_flops == 0 && c.mem_bytes == 0) continue;
    seconds += PassSeconds(q, shard, c.gemm_flops, c.core_flops, c.mem_bytes) + c.tp_collectives * ar;
    *tp_comm_s += c.tp_collectives * ar;
  }
  return seconds;
}

// LoRA's adapters' own TP collectives {forward, backward} (docs/cost_model.md "LoRA"): under sequence parallelism
// all-gathers and reduce-scatters (each an all-gather's time), without it forward all-gathers and backward
// all-reduces; 0 at tp 1.
std::array<double, 2> AdapterCollectiveSeconds(const ClusterSpec& c, const Layer& l, const RowRates& q) {
  std::array<double, 2> s{0, 0};
  if (q.t <= 1 || !l.tp_shardable) return s;
  const double k = q.bd / q.cpd;
  if (q.sp) {
    if (l.adapter_sp_fwd_bytes > 0) s[0] = AllGatherSeconds(c, k * l.adapter_sp_fwd_bytes, q.tp_group);
    if (l.adapter_sp_bwd_bytes > 0) s[1] = AllGatherSeconds(c, k * l.adapter_sp_bwd_bytes, q.tp_group);
  } else {
    if (l.adapter_fwd_bytes > 0) s[0] = AllGatherSeconds(c, k * l.adapter_fwd_bytes, q.tp_group);
    if (l.adapter_bwd_allreduce_bytes > 0) s[1] = AllReduceSeconds(c, k * l.adapter_bwd_allreduce_bytes, q.tp_group);
  }
  return s;
}

// One analytic row (docs/cost_model.md section 2).
LayerCostRow AnalyticRow(const ClusterSpec& c, const Layer& l, const RowRates& q) {
  LayerCostRow r;
  const double tp_shard = (l.tp_shardable && q.t > 1) ? q.td : 1.0;
  const double shard =
      q.sp && InSequenceParallelRegion(l) ? q.td : tp_shard;  // SP: the norm / dropout regions work on s/t tokens
  const double core = l.attention_core_fwd_flops;
  const bool flash = l.attrs.String("attention", "flash") == "flash";
  const double core_ratio = flash ? 2.5 : 2.0;  // backward core / forward core
  CoreRates rates{q.peak_other, q.peak_other};
  double forward_compute = 0;
  if (q.kt == nullptr) {
    forward_compute = PassSeconds(q, shard, l.fwd_flops - core, core, l.fwd_mem_bytes);
    r.backward_input_s = PassSeconds(q, shard, l.bwd_input_flops - 2 * core, 2 * core, l.bwd_mem_bytes * 0.5);
    r.backward_weight_s = PassSeconds(q, shard, l.bwd_weight_flops, 0, l.bwd_mem_bytes * 0.5);
  } else {
    if (core > 0) rates = AttentionRates(l, q, tp_shard);
    forward_compute = KernelPassSeconds(l, q, shard, 0, l.fwd_flops - core, core, rates.fwd, l.fwd_mem_bytes);
    r.backward_input_s = KernelPassSeconds(l, q, shard, 1, l.bwd_input_flops - core_ratio * core, core_ratio * core,
                                           rates.bwd, l.bwd_mem_bytes * 0.5);
    r.backward_weight_s = KernelPassSeconds(l, q, shard, 2, l.bwd_weight_flops, 0, 0, l.bwd_mem_bytes * 0.5);
  }
  r.forward_s = forward_compute;
  // Megatron: the forward's all-reduces (g) and as many in backward (f); with SP each is a
  // reduce-scatter plus an all-gather of the same ring volume. Full recompute re-runs the forward
  // and its collectives.
  double ar = 0;
  if (q.t > 1 && l.tp_shardable && l.tp_allreduces_fwd > 0) {
    const double bytes = q.bd * l.tp_allreduce_bytes / q.cpd;
    ar = q.sp ? ReduceScatterSeconds(c, bytes, q.tp_group) + AllGatherSeconds(c, bytes, q.tp_group)
              : AllReduceSeconds(c, bytes, q.tp_group);
  }
  // TP communication overlap (kernel-level costs with --tp-comm-overlap): the engine's hidden share
  // of each collective costs only the compute it slows.
  ar *= (1 - q.tp_hidden) + q.tp_hidden * q.slowdown;
  const double n_fwd = l.tp_allreduces_fwd;
  const double cp_fwd = CpExposed(c, l, q, tp_shard, 1, 1, rates.fwd);
  const double cp_bwd = CpExposed(c, l, q, tp_shard, 2, core_ratio, rates.bwd);
  // LoRA's adapters: their own TP collectives (docs/cost_model.md "LoRA"), exposed.
  // Not overlapped: kept apart from the hidden share below.
  const std::array<double, 2> adapter = AdapterCollectiveSeconds(c, l, q);
  double adapter_s = adapter[0] + adapter[1];
  r.forward_s += n_fwd * ar + cp_fwd + adapter[0];
  r.backward_input_s += n_fwd * ar + cp_bwd + adapter[1];
  r.tp_comm_s = 2 * n_fwd * ar + adapter_s;
  r.cp_comm_s = cp_fwd + cp_bwd;
  const double cp_whole_fwd = CpTotal(c, l, q, tp_shard, 1);
  r.cp_total_s = cp_whole_fwd + CpTotal(c, l, q, tp_shard, 2);
  if (q.rc == Recompute::kFull && RecomputedInFull(l.kind)) {
    r.backward_input_s += forward_compute + n_fwd * ar + cp_fwd + adapter[0];
    r.tp_comm_s += n_fwd * ar + adapter[0];
    adapter_s += adapter[0];
    r.cp_comm_s += cp_fwd;
    r.cp_total_s += cp_whole_fwd;
  } else if (q.rc == Recompute::kSelective) {
    r.backward_input_s += ModuleRecomputeSeconds(l, q, shard, n_fwd > 0 ? ar : 0, rates.fwd, &r.tp_comm_s);
    // core_attn's re-run forward is the attention function's whole forward: its CP exchange again.
    if (HasRecomputeModule(q.modules, RecomputeModule::kCoreAttn) && l.attention_core_fwd_flops > 0) {
      r.backward_input_s += cp_fwd;
      r.cp_comm_s += cp_fwd;
      r.cp_total_s += cp_whole_fwd;
    }
  }
  // Every TP collective above but the adapters' was scaled by the same hidden share: the whole is the exposed over it.
  const double tp_factor = (1 - q.tp_hidden) + q.tp_hidden * q.slowdown;
  const double scaled = r.tp_comm_s - adapter_s;
  r.tp_total_s = (tp_factor > 0 ? scaled / tp_factor : scaled) + adapter_s;
  r.params = l.params / tp_shard;
  r.stash_bytes = StashBytes(l, q, tp_shard);
  r.out_bytes = q.bd * l.out_bytes / q.cpd;
  // The loss's stash is its fp32 softmax, 4 bytes per logit element on this GPU: the rest of the engine's figure is
  // live beside it at the loss's peak (the bf16 logits, an fp32 copy, the gradients).
  const double loss_bytes = q.loss_logit_bytes[q.t > 1 ? 1 : 0];
  if (l.kind == LayerKind::kLoss && loss_bytes > 4) r.work_bytes = (loss_bytes / 4 - 1) * r.stash_bytes;
  AddMoeCosts(c, l, q, tp_shard, shard, &r);
  // The engine's separate accumulation of this microbatch's gradients (DeepSpeed's BF16_Optimizer update_hp_grads):
  // memory-bound over the layer's parameters on this GPU, once per microbatch, after its backward.
  if (q.grad_accum_bytes > 0 && q.hbm_raw > 0)
    r.backward_weight_s += std::max(0.0, r.params - l.frozen_params / tp_shard) * q.grad_accum_bytes / q.hbm_raw;
  return r;
}

// The kernel-level rates of a table (docs/cost_model.md section 2, "Kernel-level compute"): the
// kernel table's GEMM and attention figures x the engine's sustained shares, HBM x the table's memory
// efficiency / the engine's elementwise traffic, the FP8 recipe's GEMM rate and cast bytes, the
// engine's TP overlap and compute slowdown.
void KernelRates(const CostSource& src, const ModelSpec& m, const CostOptions& o, RowRates* q) {
  const ClusterSpec& c = *src.cluster;
  const KernelTable& kt = *src.kernels;
  const EngineSpec& e = *src.engine;
  q->kt = &kt;
  q->attention_kernel = AttentionKernel(kt, e);
  q->gemm_model = kt.Gemm(m.dtype);
  q->gemm_high = kt.Gemm(DType::kBf16);
  // A power cap lowers the SM clock (compute-bound kernels), not the memory clock (docs/cost_model.md "Power caps").
  const double clock = kt.ClockUnderCap(c.power_cap_W);
  q->peak_model = c.PeakFlops(m.dtype) * e.SustainedGemm(m.dtype) * clock;
  q->peak_high = c.PeakFlops(DType::kBf16) * e.sustained_gemm * clock;
  if (m.dtype == DType::kFp8) {
    const Fp8Recipe recipe = kt.Recipe(e.fp8_recipe);
    q->recipe_gemm = recipe.gemm;
    q->gemm_in_bytes = 1;
    // Read the bf16 input (again per amax pass), write its FP8 copy and the transposed copy the other
    // GEMM reads; the engine fuses a share of the casts into the producing kernel.
    q->cast_bytes = (1 - e.fp8_cast_fused) * (2.0 * (1 + recipe.amax_passes) + 2.0);
    // An engine that keeps no FP8 weight copy (torchao float8: memory.fp8_weight_bytes 0) casts every weight
    // in each microbatch's forward, it and its transpose, from its bf16 copy: no producer to fuse into.
    // Transformer Engine casts once per iteration into its cached copy: amortised over the microbatches, not
    // costed.
    if (!e.CachesFp8Weights()) q->weight_cast_bytes = 2.0 * (1 + recipe.amax_passes) + 2.0;
  }
  q->peak_gemm = q->peak_model * q->recipe_gemm * q->gemm_model->ceiling;
  q->peak_other = q->peak_high * q->gemm_high->ceiling;
  q->hbm_raw = c.hbm_bandwidth_GBps * 1e9 * kt.memory_efficiency * e.sustained_memory;
  // Fused gradient accumulation: the weight-gradient GEMM reads and writes the gradient buffer (beta 1).
  const DType grad_dtype = o.grad_dtype.value_or(DefaultGradDType(m.dtype));  // the gradients accumulate in it
  if (e.wgrad_accumulation_fused) q->wgrad_out_bytes = 2.0 * DTypeBytes(grad_dtype);
  q->hbm = q->hbm_raw / e.elementwise_traffic;
  // The engine's separate accumulation pass, by the gradients' dtype.
  if (auto it = e.grad_accumulation_bytes.find(DTypeName(grad_dtype)); it != e.grad_accumulation_bytes.end())
    q->grad_accum_bytes = it->second;
  q->attention_share = e.sustained_attention * clock;
  q->cp_ring_fwd = e.cp_ring_fwd;
  q->cp_ring_bwd = e.cp_ring_bwd;
  // TP communication overlap runs on sequence parallelism's all-gather / reduce-scatter (Megatron's validate_args
  // requires --sequence-parallel for --tp-comm-overlap; torchtitan's async TP fuses SP's collectives): none without SP.
  q->tp_hidden = o.tp_comm_overlap && q->sp ? e.tp_comm_overlap_hidden : 0;
  q->slowdown = o.compute_slowdown;
  q->cp_slowdown = e.cp_ring_with_exchange ? 0 : o.compute_slowdown;
}

// Analytic rows: FLOPs / (peak x efficiency) + bytes / (HBM x efficiency) (kernel-level: each operation
// class at its own rate), TP collectives on the level holding the TP group, recompute added to backward.
void AnalyticRows(const CostSource& src, const TableShape& shape, const CostOptions& o, CostTable* table) {
  const ModelSpec& m = *src.model;
  const ClusterSpec& c = *src.cluster;
  RowRates q;
  q.t = shape.tp;
  q.cp = shape.cp;
  // SP splits a transformer's regions only: a model without attention has none (its dropouts and
  // norms sit between convolutions or plain linears, which SP does not split).
  q.sp = shape.sp && shape.tp > 1 && HasAttention(&m);
  q.rc = shape.recompute;
  q.modules = shape.recompute_modules;
  q.bd = static_cast<double>(shape.microbatch);
  q.td = static_cast<double>(q.t);
  q.cpd = static_cast<double>(q.cp);
  q.tp_group = GroupSpread(c, q.t, 1);
  q.peak_gemm = c.PeakFlops(m.dtype) * c.Efficiency(m.dtype);
  q.peak_other = m.dtype == DType::kFp8 ? c.PeakFlops(DType::kBf16) * c.Efficiency(DType::kBf16) : q.peak_gemm;
  q.hbm = c.hbm_bandwidth_GBps * 1e9 * c.hbm_efficiency;
  q.ep = shape.ep;
  q.etp = shape.etp;
  q.moe_imbalance = o.moe_imbalance;
  q.moe_overlap = o.moe_overlap;
  q.moe_dedup = o.moe_dedup;
  if (src.engine != nullptr) {  // flat or kernel-level: the engine's EP overlap share and flex hops
    q.moe_hidden = src.engine->moe_a2a_hidden;
    q.moe_flex_serial = src.engine->moe_flex_serial;
    const std::array<double, 2> host = src.engine->MoeHostSecondsPerExpert(m.dtype);
    q.moe_host_fwd = host[0] * c.host_op_scale;  // the engine's launches timed on an x86 host, scaled to this one
    q.moe_host_bwd = host[1] * c.host_op_scale;
  }
  q.cp_overlap = o.cp_overlap;
  q.cp_allgather = o.cp_comm == CpCommType::kAllGather && q.cp > 1;
  if (q.cp_allgather) q.cp_group = GroupSpread(c, q.cp, q.t);
  if (KernelLevel(src)) KernelRates(src, m, o, &q);
  // The engine's memory, with its kernel table or without (the flat efficiency).
  if (src.engine != nullptr) {
    q.loss_logit_bytes = src.engine->loss_logit_bytes;
    q.sac_saves_unread = src.engine->sac_saves_unread;
  }
  int64_t embedding = -1;  // the last embedding row: the one a tied lm_head after it shares
  // Equal layers cost the same at one (b, t, recompute, ...) point: a row is computed once per layer
  // signature (with the figures it is costed from, so a layer edited without its signature is not merged).
  std::unordered_map<std::string, LayerCostRow> seen;
  for (const auto& l : m.layers) {
    std::string key;  // the signature, then the figures' bytes (no decimal formatting on this path)
    if (!l.signature.empty()) {
      key = l.signature;
      const double figures[] = {
          static_cast<double>(l.kind),    l.fwd_flops,    l.bwd_input_flops, l.params, l.stash_bytes,
          static_cast<double>(l.experts), l.fwd_mem_bytes};
      key.append(reinterpret_cast<const char*>(figures), sizeof figures);
    }
    auto it = key.empty() ? seen.end() : seen.find(key);
    LayerCostRow r = it != seen.end() ? it->second : AnalyticRow(c, l, q);
    if (!key.empty() && it == seen.end()) seen.emplace(key, r);
    if (l.kind == LayerKind::kEmbedding) embedding = static_cast<int64_t>(table->rows.size());
    if (l.params_tied && embedding >= 0) r.tied_to = embedding;
    table->rows.push_back(r);
    table->names.push_back(l.name);
  }
}

// Measured rows: the profile's timings at (b, t) (the nearest microbatch size,
// scaled linearly), its TP all-reduces costed as the analytic ones.
Status ProfileRows(const Profile& p, const ClusterSpec& c, int64_t b, int64_t t, Recompute rc, CostTable* table) {
  const double bd = static_cast<double>(b);
  const std::vector<int64_t> tp_group = GroupSpread(c, t, 1);
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const auto& l = p.layers[i];
    ProfileTiming pt;
    if (!p.TimingAt(i, b, t, &pt)) {
      return Status::NotFound(fmt::format(
          "{}: layer '{}' has no timing at tp={}; {}", p.path, l.name, t,
          t == 1 ? "profile the model without --tp" : fmt::format("profile it with --tp {} or plan with --tp 1", t)));
    }
    LayerCostRow r;
    r.forward_s = pt.forward_s;
    if (pt.backward_input_s >= 0 && pt.backward_weight_s >= 0) {
      r.backward_input_s = pt.backward_input_s;
      r.backward_weight_s = pt.backward_weight_s;
    } else {
      // Not measured separately: split evenly (GEMM layers: dX and dW cost the same).
      r.backward_input_s = r.backward_weight_s = pt.backward_s / 2;
    }
    if (rc == Recompute::kFull) r.backward_input_s += pt.forward_s;
    double scale = bd / static_cast<double>(p.reference_microbatch);
    // Profiles time the TP shard's compute; its all-reduces come from the
    // collective figures of the level that holds the TP group (as analytic).
    if (t > 1 && l.tp_allreduces > 0) {
      double ar = AllReduceSeconds(c, scale * l.tp_allreduce_bytes, tp_group);
      double n_fwd = static_cast<double>(l.tp_allreduces);
      r.forward_s += n_fwd * ar;
      r.backward_input_s += n_fwd * ar * (rc == Recompute::kFull ? 2 : 1);
      r.tp_comm_s = n_fwd * ar * (rc == Recompute::kFull ? 3 : 2);
    }
    r.params = l.params_bytes / 4.0;  // profile sizes are bytes of fp32 parameters
    r.stash_bytes = scale * (rc == Recompute::kFull ? l.output_bytes : l.stash_bytes);
    r.out_bytes = scale * l.output_bytes;
    table->rows.push_back(r);
    table->names.push_back(l.name);
  }
  return Status::OK();
}

}  // namespace

Status BuildCostTable(const CostSource& src, int64_t b, int64_t t, Recompute rc, const CostOptions& o, CostTable* out) {
  return BuildCostTable(src, TableShape{b, t, 1, false, rc}, o, out);
}

namespace {

// The expert sizes a table can be costed at: ep and etp at least 1, ep dividing the experts, an
// MoE model at tp > 1 with sequence parallelism; a profile (no experts in it) at ep = etp = 1.
Status CheckExpertShape(const CostSource& src, const TableShape& shape) {
  if (shape.ep < 1 || shape.etp < 1)
    return Status::InvalidArgument(fmt::format("ep={} etp={}: expert parallel sizes start at 1", shape.ep, shape.etp));
  const int64_t experts = src.profile == nullptr ? ModelExperts(src.model) : 0;
  if (experts == 0 && (shape.ep > 1 || shape.etp > 1)) {
    return Status::InvalidArgument(
        fmt::format("--ep {} --etp {}: the model has no MoE layers (no experts to split); use --ep 1 --etp 1", shape.ep,
                    shape.etp));
  }
  if (experts > 0 && experts % shape.ep != 0) {
    return Status::InvalidArgument(
        fmt::format("--ep {}: does not divide the {} experts of {}; choose an --ep dividing {}", shape.ep, experts,
                    src.model->name, experts));
  }
  if (experts > 0 && shape.tp > 1 && !shape.sp) {
    return Status::InvalidArgument(
        fmt::format("tp={} without sequence parallelism: Megatron-Core's MoE layers need --sequence-parallel with tp > "
                    "1; use --sp on or --tp 1",
                    shape.tp));
  }
  return Status::OK();
}

}  // namespace

Status BuildCostTable(const CostSource& src, const TableShape& shape, const CostOptions& o, CostTable* out) {
  PLANNER_RETURN_IF_ERROR(CheckCostSource(src));
  PLANNER_RETURN_IF_ERROR(CheckExpertShape(src, shape));
  CostTable table;
  table.microbatch = shape.microbatch;
  table.tp = shape.tp;
  table.recompute = shape.recompute;
  table.recompute_modules =
      shape.recompute == Recompute::kSelective ? shape.recompute_modules : kDefaultRecomputeModules;
  table.ep = shape.ep;
  table.etp = shape.etp;
  if (src.profile == nullptr) {
    table.cp = shape.cp;
    table.sp = shape.sp && shape.tp > 1;
    AnalyticRows(src, shape, o, &table);
  } else {
    if (shape.cp != 1 || (shape.sp && shape.tp > 1)) {
      return Status::InvalidArgument(fmt::format(
          "{}: a measured profile has no timings with sequence or context parallelism; plan it with --cp 1 --sp off",
          src.profile->path));
    }
    PLANNER_RETURN_IF_ERROR(
        ProfileRows(*src.profile, *src.cluster, shape.microbatch, shape.tp, shape.recompute, &table));
  }
  table.BuildPrefix();
  *out = std::move(table);
  return Status::OK();
}

}  // namespace planner
