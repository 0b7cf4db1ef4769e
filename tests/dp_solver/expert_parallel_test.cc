// Expert parallelism (docs/cost_model.md, "Expert parallelism"): the all-to-all's closed forms on
// one and two topology levels and with node-limited routing, an MoE row's costs at (ep, etp), the
// memory of an MoE stage with its ep / etp / edp sharding, the search's constraints and ordering,
// and the search's best against enumerating every (tp, ep, etp, pp) by hand. The MoE models are
// built here from a gpt: template with the Layer MoE fields set by hand (spec/layer.h).
#include <algorithm>
#include <cmath>
#include <string>

#include "dp_solver/candidates.h"
#include "dp_solver/evaluate.h"
#include "dp_solver/moe_cost.h"
#include "dp_solver/search.h"
#include "spec/engine_spec.h"
#include "tests/dp_solver/moe_model.h"
#include "tests/test_util.h"

namespace planner {
namespace {

using testing::kDt;
using testing::kH;
using testing::kSeq;
using testing::MoeModel;

ClusterSpec Cluster(const char* file) {
  ClusterSpec c;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath(std::string("configs/clusters/") + file), &c));
  return c;
}

size_t FirstMoeRow(const ModelSpec& m) {
  for (size_t i = 0; i < m.layers.size(); ++i) {
    if (m.layers[i].experts > 0) return i;
  }
  FAIL("no MoE layer");
  return 0;
}

CostTable Table(const ModelSpec& m, const ClusterSpec& c, TableShape shape, CostOptions o = {}) {
  CostSource src;
  src.model = &m;
  src.cluster = &c;
  CostTable t;
  REQUIRE_OK(BuildCostTable(src, shape, o, &t));
  return t;
}

TEST_CASE(
    "node-limited routing: the nodes a token reaches from the layer's route groups, and the MoE layer's dispatch + "
    "combine") {
  const ClusterSpec c = Cluster("dgx-h100.yaml");
  const std::vector<int64_t> spread = GroupSpread(c, 64, 1);
  // The layer's groups: 8 groups over 8 nodes with limit 4 reach 4 nodes; one node is one; with limit 2 over 16
  // nodes (a group spans 2) the token's 8 experts fall on 4 nodes holding 64 experts.
  Layer l;
  l.experts = 256;
  l.top_k = 8;
  l.attrs.ints["route_groups"] = 8;
  l.attrs.ints["route_group_limit"] = 4;
  CHECK(MoeNodeCopies(l, 8) == doctest::Approx(4).epsilon(1e-12));
  CHECK(MoeNodeCopies(l, 1) == 1);
  l.attrs.ints["route_group_limit"] = 2;
  double miss = 1;
  for (int i = 0; i < 8; ++i) miss *= (48.0 - i) / (64.0 - i);
  CHECK(MoeNodeCopies(l, 16) == doctest::Approx(4 * (1 - miss)).epsilon(1e-12));
  // A layer's dispatch + combine at EP64 over 8 nodes: each pass moves 2 all-to-alls of the rank's
  // s / (t cp) tokens' copies; the flex dispatcher sends each token once to each of its 4 nodes, the
  // alltoall dispatcher every copy; a capacity factor c moves c times the bytes.
  l.attrs.ints["route_group_limit"] = 4;
  CHECK(MoeNodeCopies(l, 8) == 4);
  l.moe_dispatch_bytes = 4096.0 * 8 * 7168 * 2;
  const MoeLayerCost m = MoeLayerCosts(c, l, MoeShape{1, 1, 1, 64, 1, 1.3, false, true});
  CHECK(m.token_factor == 1.3);
  // Inside the nodes flex sends a token once to each GPU it reaches: 4 of 8 groups, each spanning 8 GPUs of the 64,
  // so its 8 experts fall among 32 GPUs holding 128 of the 256 experts.
  double miss_gpu = 1;
  for (int i = 0; i < 8; ++i) miss_gpu *= (124.0 - i) / (128.0 - i);
  CHECK(MoeNodeCopies(l, 64) == doctest::Approx(32 * (1 - miss_gpu)).epsilon(1e-12));
  CHECK(m.a2a_pass_s ==
        doctest::Approx(2 * AllToAllSeconds(c, 1.3 * l.moe_dispatch_bytes, spread, {8, 4, true, MoeNodeCopies(l, 64)}))
            .epsilon(1e-12));
  CHECK(m.regroup_bytes == 0);  // flex's receiving rank permutes its tokens once (the layer's permute)
  const MoeLayerCost every = MoeLayerCosts(c, l, MoeShape{1, 1, 1, 64, 1, 1.3, false, false});
  CHECK(every.a2a_pass_s ==
        doctest::Approx(2 * AllToAllSeconds(c, 1.3 * l.moe_dispatch_bytes, spread, {8, 0})).epsilon(1e-12));
  CHECK(every.a2a_pass_s > 1.4 * m.a2a_pass_s);  // the network share: 8 copies against 4 (plus flex's NVLink hop)
  // The alltoall dispatcher sorts what a GPU received by its 4 local experts and back: read + write each.
  CHECK(every.regroup_bytes == doctest::Approx(4 * 1.3 * l.moe_dispatch_bytes).epsilon(1e-12));
  l.attrs.reals["capacity_factor"] = 1.25;
  const MoeLayerCost cap = MoeLayerCosts(c, l, MoeShape{1, 1, 1, 64, 1, 1.3, false, true});
  CHECK(cap.token_factor == 1);  // the layer's FLOPs already count the padded capacity
  CHECK(cap.a2a_pass_s ==
        doctest::Approx(2 * AllToAllSeconds(c, 1.25 * l.moe_dispatch_bytes, spread, {8, 4, true, MoeNodeCopies(l, 64)}))
            .epsilon(1e-12));
}

TEST_CASE("flex inside a node: one copy per GPU reached; alltoall: the received copies regrouped by local expert") {
  const ClusterSpec c = Cluster("dgx-h100.yaml");
  const std::vector<int64_t> node = GroupSpread(c, 8, 1);
  REQUIRE(node.at(0) == 8);  // one node: the NVLink level alone
  // Megatron-LM's moe_perf DeepSeek proxy: 32 experts top 8 in 8 groups of which 4, EP 8: a group is one GPU's 4
  // experts, so a token reaches exactly 4 GPUs; flex moves half the alltoall dispatcher's NVLink bytes.
  Layer ds;
  ds.experts = 32;
  ds.top_k = 8;
  ds.attrs.ints["route_groups"] = 8;
  ds.attrs.ints["route_group_limit"] = 4;
  ds.moe_dispatch_bytes = 4096.0 * 8 * 7168 * 2;
  CHECK(MoeNodeCopies(ds, 8) == doctest::Approx(4).epsilon(1e-12));
  const MoeLayerCost flex = MoeLayerCosts(c, ds, MoeShape{1, 1, 1, 8, 1, 1, false, true});
  const MoeLayerCost a2a = MoeLayerCosts(c, ds, MoeShape{1, 1, 1, 8, 1, 1, false, false});
  const double level0 = c.levels[0].bandwidth_GBps * 1e9, lat = 7 * c.levels[0].latency_us * 1e-6;
  CHECK(a2a.a2a_pass_s == doctest::Approx(2 * (ds.moe_dispatch_bytes * 7 / 8 / level0 + lat)).epsilon(1e-12));
  CHECK(flex.a2a_pass_s == doctest::Approx(2 * (ds.moe_dispatch_bytes * 7 / 8 * 4 / 8 / level0 + lat)).epsilon(1e-12));
  // Permutation 2 of the alltoall dispatcher: 4 local experts, sort after dispatch and unsort before combine.
  CHECK(a2a.regroup_bytes == doctest::Approx(4 * ds.moe_dispatch_bytes).epsilon(1e-12));
  CHECK(flex.regroup_bytes == 0);
  // The Mixtral proxy: 8 experts top 2 on 8 GPUs, one each: a token's 2 experts are 2 GPUs, nothing to deduplicate,
  // and one local expert has nothing to regroup.
  Layer mx;
  mx.experts = 8;
  mx.top_k = 2;
  mx.moe_dispatch_bytes = 4096.0 * 2 * 4096 * 2;
  CHECK(MoeNodeCopies(mx, 8) == doctest::Approx(2).epsilon(1e-12));
  CHECK(MoeLayerCosts(c, mx, MoeShape{1, 1, 1, 8, 1, 1, false, true}).a2a_pass_s ==
        doctest::Approx(MoeLayerCosts(c, mx, MoeShape{1, 1, 1, 8, 1, 1, false, false}).a2a_pass_s).epsilon(1e-12));
  CHECK(MoeLayerCosts(c, mx, MoeShape{1, 1, 1, 8, 1, 1, false, false}).regroup_bytes == 0);
  // With expert TP the regroup sorts the etp x gathered copies; imbalance scales them as the bytes sent.
  CHECK(MoeLayerCosts(c, ds, MoeShape{1, 1, 1, 4, 2, 1.5, false, false}).regroup_bytes ==
        doctest::Approx(4 * 2 * 1.5 * ds.moe_dispatch_bytes).epsilon(1e-12));
}

TEST_CASE("the nodes a token reaches: the route limit, else the expected distinct nodes of top_k uniform experts") {
  Layer l;
  l.experts = 128;
  l.top_k = 8;
  // Qwen3-30B-A3B over 2 nodes: P(one node misses all 8) = C(64, 8) / C(128, 8).
  double miss = 1;
  for (int i = 0; i < 8; ++i) miss *= (64.0 - i) / (128.0 - i);
  CHECK(MoeNodeCopies(l, 2) == doctest::Approx(2 * (1 - miss)).epsilon(1e-12));
  CHECK(MoeNodeCopies(l, 1) == 1);
  // Brute force over all C(8, 2) = 28 draws of top 2 of 8 experts on 4 nodes (2 experts each).
  l.experts = 8;
  l.top_k = 2;
  int distinct = 0;
  for (int a = 0; a < 8; ++a)
    for (int b = a + 1; b < 8; ++b) distinct += a / 2 == b / 2 ? 1 : 2;
  CHECK(MoeNodeCopies(l, 4) == doctest::Approx(distinct / 28.0).epsilon(1e-12));
  // One expert per node and top_k = experts: every node.
  l.top_k = 8;
  CHECK(MoeNodeCopies(l, 8) == doctest::Approx(8).epsilon(1e-12));
  // Route groups: DeepSeek-V3's 4 of 8 groups over 8 nodes (a group a node): exactly 4.
  l.experts = 256;
  l.attrs.ints["route_groups"] = 8;
  l.attrs.ints["route_group_limit"] = 4;
  CHECK(MoeNodeCopies(l, 8) == doctest::Approx(4).epsilon(1e-12));
  // Over 4 nodes (2 groups a node): the distinct nodes of 4 groups drawn from 8, 4 (1 - C(6, 4) / C(8, 4)), below
  // the unlimited routing's expectation.
  CHECK(MoeNodeCopies(l, 4) == doctest::Approx(4 * (1 - 15.0 / 70)).epsilon(1e-12));
  l.attrs.ints["route_groups"] = 0;
  const double unlimited4 = MoeNodeCopies(l, 4);
  l.attrs.ints["route_groups"] = 8;
  CHECK(MoeNodeCopies(l, 4) < unlimited4);
  // Over 16 nodes (a group spans 2): the token's 8 experts on its 4 groups' 8 nodes, 128 experts there.
  double miss16 = 1;
  for (int i = 0; i < 8; ++i) miss16 *= (112.0 - i) / (128.0 - i);
  CHECK(MoeNodeCopies(l, 16) == doctest::Approx(8 * (1 - miss16)).epsilon(1e-12));
  // A limit of every group: no limit.
  l.attrs.ints["route_group_limit"] = 8;
  CHECK(MoeNodeCopies(l, 4) == doctest::Approx(unlimited4).epsilon(1e-12));
}

TEST_CASE("EP groups that straddle nodes: the slowest group's all-to-all, its emptiest node sending the most") {
  // EP 6 on 8-GPU nodes: the groups at ranks 0-5 and 18-23 stay in a node, 6-11 splits 2 + 4 and 12-17 4 + 2; all
  // run in step, so the layer pays the straddling group's network share, 4 of 6 shares from the 2-rank side.
  const ModelSpec m = MoeModel(4, 12, 2, 1408, 1);
  const ClusterSpec c = Cluster("dgx-h100.yaml");
  const size_t row = FirstMoeRow(m);
  const Layer& l = m.layers[row];
  const double per_rank = l.moe_dispatch_bytes;  // b = 1, t = 1
  std::vector<int64_t> spread, fewest;
  GroupUnits(c, 6, 6, 1, &spread, &fewest);
  REQUIRE(spread.size() >= 2);
  CHECK(spread[0] == 4);
  CHECK(spread[1] == 2);
  CHECK(fewest[1] == 2);
  const double straddling = AllToAllSeconds(c, per_rank, spread, {l.top_k, 0, true, 0, 6, fewest});
  const double inside = AllToAllSeconds(c, per_rank, GroupSpread(c, 6, 1), {l.top_k, 0, true, 0, 6});
  CHECK(straddling > inside);
  const CostTable at = Table(m, c, {1, 1, 1, false, Recompute::kNone, 6, 1});
  CHECK(at.rows[row].ep_comm_s == doctest::Approx(4 * straddling).epsilon(1e-12));  // 2 passes x (dispatch + combine)
  // EP 4 tiles the nodes: every group inside one, as GroupSpread from rank 0 says.
  const CostTable four = Table(m, c, {1, 1, 1, false, Recompute::kNone, 4, 1});
  CHECK(four.rows[row].ep_comm_s ==
        doctest::Approx(4 * AllToAllSeconds(c, per_rank, GroupSpread(c, 4, 1), {l.top_k, 0})).epsilon(1e-12));
}

TEST_CASE(
    "an MoE row: expert parameters / (ep etp), dispatch + combine in forward and backward, full recompute's third, "
    "imbalance, overlap, ETP") {
  const ModelSpec m = MoeModel(4, 16, 2, 1408, 1);
  const ClusterSpec c = Cluster("dgx-h100.yaml");
  const size_t row = FirstMoeRow(m);
  const Layer& l = m.layers[row];
  const int64_t b = 2, t = 2;
  const CostTable base = Table(m, c, {b, t, 1, true, Recompute::kNone, 1, 1});
  const double hbm = c.hbm_bandwidth_GBps * 1e9 * c.hbm_efficiency;  // the flat model's memory-bound rate
  for (int64_t ep : {2, 4, 8, 16}) {
    const CostTable at = Table(m, c, {b, t, 1, true, Recompute::kNone, ep, 1});
    const double per_rank = b * l.moe_dispatch_bytes / t;  // each rank's s/t tokens (SP), top_k copies
    const double a2a = AllToAllSeconds(c, per_rank, GroupSpread(c, ep, 1), {l.top_k, 0});
    // The received copies regrouped by local expert (16 / ep of them; ep 1 too): gone at one expert per GPU.
    const double regroup_gone = ep == 16 ? 4 * per_rank / hbm : 0;
    CHECK(at.rows[row].ep_comm_s == doctest::Approx(4 * a2a).epsilon(1e-12));  // 2 passes x (dispatch + combine)
    CHECK(at.rows[row].forward_s - base.rows[row].forward_s == doctest::Approx(2 * a2a - regroup_gone).epsilon(1e-9));
    CHECK(at.rows[row].backward_input_s - base.rows[row].backward_input_s ==
          doctest::Approx(2 * a2a - regroup_gone).epsilon(1e-9));
    CHECK(at.rows[row].backward_weight_s == doctest::Approx(base.rows[row].backward_weight_s).epsilon(1e-12));
    CHECK(at.rows[row].expert_params == doctest::Approx(l.expert_params / static_cast<double>(ep)).epsilon(1e-12));
    CHECK(at.rows[row].params ==
          doctest::Approx((l.params - l.expert_params) / t + l.expert_params / static_cast<double>(ep)).epsilon(1e-12));
    CHECK(at.rows[0].forward_s ==
          doctest::Approx(base.rows[0].forward_s).epsilon(1e-15));  // the embedding has no experts
    const CostTable full = Table(m, c, {b, t, 1, true, Recompute::kFull, ep, 1});
    CHECK(full.rows[row].ep_comm_s == doctest::Approx(6 * a2a).epsilon(1e-12));
  }
  // Imbalance: the busiest rank computes 1.5x the mean expert work and keeps 1.5x the expert stash.
  CostOptions o;
  o.moe_imbalance = 1.5;
  const CostTable bal = Table(m, c, {b, t, 1, true, Recompute::kNone, 4, 1}),
                  imb = Table(m, c, {b, t, 1, true, Recompute::kNone, 4, 1}, o);
  const double rate = c.PeakFlops(DType::kBf16) * c.Efficiency(DType::kBf16);
  const double extra_f = 0.5 * b * l.expert_fwd_flops / t / rate;
  const double extra_regroup = 0.5 * 4 * b * l.moe_dispatch_bytes / t / hbm;  // the busiest rank sorts 1.5x the copies
  CHECK(
      imb.rows[row].forward_s - bal.rows[row].forward_s ==
      doctest::Approx(extra_f + extra_regroup + (imb.rows[row].ep_comm_s - bal.rows[row].ep_comm_s) / 2).epsilon(1e-9));
  CHECK(imb.rows[row].ep_comm_s > bal.rows[row].ep_comm_s);  // the busiest rank receives 1.5x the bytes
  CHECK(imb.rows[row].stash_bytes - bal.rows[row].stash_bytes ==
        doctest::Approx(0.5 * b * l.expert_stash_bytes / t).epsilon(1e-9));
  // At ep = 1 every rank computes its own tokens: no imbalance.
  CHECK(Table(m, c, {b, t, 1, true, Recompute::kNone, 1, 1}, o).rows[row].forward_s ==
        doctest::Approx(base.rows[row].forward_s).epsilon(1e-15));
  // Overlap: ep = 2 inside a node is hidden behind the compute; what remains is the compute the
  // communication's 20 of 132 SMs take away, 20/132 of the all-to-all.
  CostOptions ov;
  ov.moe_overlap = true;
  const CostTable hidden = Table(m, c, {b, t, 1, true, Recompute::kNone, 2, 1}, ov),
                  shown = Table(m, c, {b, t, 1, true, Recompute::kNone, 2, 1});
  CHECK(hidden.rows[row].ep_comm_s == doctest::Approx(shown.rows[row].ep_comm_s * 20.0 / 132).epsilon(1e-12));
  CHECK(MoeExposed(3, 1, true) == 2);                                // the all-to-all outlasts the compute
  CHECK(MoeExposed(3, 5, true) == doctest::Approx(3 * 20.0 / 132));  // hidden, but its 20 of 132 SMs slow the compute
  CHECK(MoeExposed(3, 3.3, true) ==
        doctest::Approx(3 * 20.0 / 132));  // 3.3 s of compute at 112/132 speed ends 0.4545 s after the 3 s
  CHECK(MoeExposed(3, 2.5, true) == doctest::Approx(0.5));  // below T_c (1 - share) of compute, T_c - T_p sets it
  CHECK(MoeExposed(3, 5, false) == 3);
  // The engine's hidden share h: only h T_c runs beside the compute, the rest is exposed whole.
  CHECK(MoeExposed(3, 5, true, 0.37) == doctest::Approx(3 * 0.63 + 20.0 / 132 * 3 * 0.37).epsilon(1e-12));
  CHECK(MoeExposed(3, 0.5, true, 0.37) == doctest::Approx(3 * 0.63 + (3 * 0.37 - 0.5)).epsilon(1e-12));
  CHECK(MoeExposed(3, 5, true, 0) == 3);                              // nothing beside the compute
  CHECK(MoeExposed(3, 5, true, 1) == MoeExposed(3, 5, true));         // the default: all of it
  CHECK(MoeExposed(3, 5, true, 0.5) < MoeExposed(3, 5, true, 0.25));  // more hidden, less exposed
  // Expert TP (etp = t = 2): all-gather and reduce-scatter of the etp x received tokens per pass, in the TP time.
  const CostTable etp = Table(m, c, {b, t, 1, true, Recompute::kNone, 4, 2}),
                  etp1 = Table(m, c, {b, t, 1, true, Recompute::kNone, 4, 1});
  const double per_rank = b * l.moe_dispatch_bytes / t, group_bytes = 2 * per_rank;
  const std::vector<int64_t> g2 = GroupSpread(c, 2, 1);
  const double etp_pass = AllGatherSeconds(c, group_bytes, g2) + ReduceScatterSeconds(c, group_bytes, g2);
  CHECK(etp.rows[row].tp_comm_s - etp1.rows[row].tp_comm_s == doctest::Approx(2 * etp_pass).epsilon(1e-9));
  CHECK(etp.rows[row].expert_params == doctest::Approx(l.expert_params / 8).epsilon(1e-12));
  // EP ranks sit etp apart: ep 4 at etp 2 spans 8 consecutive GPUs.
  CHECK(etp.rows[row].ep_comm_s ==
        doctest::Approx(4 * AllToAllSeconds(c, per_rank, GroupSpread(c, 4, 2), {2, 0})).epsilon(1e-12));
}

TEST_CASE("the expert block waits for the host: launches x host seconds past the GPU work that covers them") {
  const ModelSpec m = MoeModel(4, 16, 2, 1408, 1);
  const ClusterSpec c = Cluster("dgx-h100.yaml");
  const size_t row = FirstMoeRow(m);
  const Layer& l = m.layers[row];
  EngineSpec none;
  REQUIRE_OK(LoadEngineSpec("megatron-core", &none));
  none.moe_host_launch_s = 0;  // not modelled: the rows as before
  EngineSpec slow = none;
  slow.moe_host_launch_s = 1e-3;  // a host far slower than the GPU: the whole launch time shows
  slow.moe_host_launches["bf16"] = {2, 4};
  auto table = [&](const EngineSpec& e, int64_t ep, Recompute rc, uint32_t modules = kDefaultRecomputeModules) {
    CostSource src;
    src.model = &m;
    src.cluster = &c;
    src.engine = &e;  // no kernel table: the flat rates, the engine's MoE figures
    CostTable t;
    TableShape shape{2, 1, 1, false, rc, ep, 1};
    shape.recompute_modules = modules;
    REQUIRE_OK(BuildCostTable(src, shape, CostOptions{}, &t));
    return t;
  };
  const double rate = c.PeakFlops(DType::kBf16) * c.Efficiency(DType::kBf16);
  const double hbm = c.hbm_bandwidth_GBps * 1e9 * c.hbm_efficiency;
  double last_wait = 1e30;
  for (int64_t ep : {2, 4, 8}) {
    const CostTable base = table(none, ep, Recompute::kNone), host = table(slow, ep, Recompute::kNone);
    const double local = 16.0 / static_cast<double>(ep);
    CHECK(base.rows[row].moe_host_wait_s == 0);
    // Forward: the local experts' 2 launches each, less the GPU work after the host sync (the expert GEMMs, the
    // dispatch all-to-all, the regroup): between the launches less the whole forward and the launches less the GEMMs.
    const double wait_f = host.rows[row].forward_s - base.rows[row].forward_s;
    const double gemm_f = 2 * l.expert_fwd_flops / rate;
    CHECK(wait_f > 0);
    CHECK(wait_f <= local * 2e-3 - gemm_f + 1e-12);
    CHECK(wait_f >= local * 2e-3 - base.rows[row].forward_s - 1e-12);
    // Its closed form: the expert GEMMs, the regroup, the dispatch (half the pass's all-to-all) and the expert TP
    // all-gather (half its pass; none at etp 1) are the GPU work the launches after the sync start.
    const MoeLayerCost moe = MoeLayerCosts(c, l, MoeShape{2, 1, 1, ep, 1, 1, false, false, true});
    CHECK(wait_f == doctest::Approx(local * 2e-3 -
                                    (gemm_f + moe.regroup_bytes / hbm + 0.5 * moe.a2a_pass_s + 0.5 * moe.etp_pass_s))
                        .epsilon(1e-9));
    // Backward: no host sync, the whole backward of the layer covers its 4 launches per expert.
    const double wait_b = host.rows[row].backward_input_s - base.rows[row].backward_input_s;
    CHECK(wait_b ==
          doctest::Approx(local * 4e-3 - base.rows[row].backward_input_s - base.rows[row].backward_weight_s).scale(0));
    CHECK(host.rows[row].backward_weight_s == base.rows[row].backward_weight_s);
    CHECK(host.rows[row].moe_host_wait_s == doctest::Approx(wait_f + wait_b).scale(0));
    CHECK(host.rows[0].forward_s == base.rows[0].forward_s);  // the embedding has no experts
    // Fewer experts per GPU (more EP): less to launch, less waiting.
    CHECK(wait_f + wait_b < last_wait);
    last_wait = wait_f + wait_b;
    // Full recompute re-runs the forward: its sync, its wait, again in backward; the re-run forward covers none of
    // the backward's launches (the backward waits as without recompute).
    const CostTable full_base = table(none, ep, Recompute::kFull), full = table(slow, ep, Recompute::kFull);
    const double full_wait_f = full.rows[row].forward_s - full_base.rows[row].forward_s;
    CHECK(full_wait_f == doctest::Approx(wait_f).scale(0));
    CHECK(full.rows[row].backward_input_s - full_base.rows[row].backward_input_s ==
          doctest::Approx(wait_f + wait_b).scale(0).epsilon(1e-9));
    CHECK(full.rows[row].moe_host_wait_s == doctest::Approx(2 * wait_f + wait_b).scale(0));
    // Selective recompute of the moe module re-runs the dispatcher: its forward wait again; without it, none.
    const uint32_t moe_module = kDefaultRecomputeModules | RecomputeBit(RecomputeModule::kMoe);
    const CostTable sel_base = table(none, ep, Recompute::kSelective, moe_module),
                    sel = table(slow, ep, Recompute::kSelective, moe_module);
    CHECK(sel.rows[row].forward_s - sel_base.rows[row].forward_s == doctest::Approx(wait_f).scale(0));
    const double sel_b = sel.rows[row].backward_input_s - sel_base.rows[row].backward_input_s;
    CHECK(sel.rows[row].moe_host_wait_s == doctest::Approx(wait_f + sel_b).scale(0));
    const CostTable attn_base = table(none, ep, Recompute::kSelective), attn = table(slow, ep, Recompute::kSelective);
    const double attn_b = attn.rows[row].backward_input_s - attn_base.rows[row].backward_input_s;
    CHECK(attn.rows[row].moe_host_wait_s == doctest::Approx(wait_f + attn_b).scale(0));
    // The moe module's re-run adds a forward's wait (milliseconds here) against microseconds of re-run GPU work.
    CHECK(sel_b > attn_b + 0.5 * wait_f);
  }
  // A fast host: the GPU's work covers every launch, nothing changes.
  EngineSpec fast = slow;
  fast.moe_host_launch_s = 1e-9;
  const CostTable base = table(none, 4, Recompute::kNone), quick = table(fast, 4, Recompute::kNone);
  CHECK(quick.rows[row].forward_s == base.rows[row].forward_s);
  CHECK(quick.rows[row].backward_input_s == base.rows[row].backward_input_s);
  CHECK(quick.rows[row].moe_host_wait_s == 0);
}

TEST_CASE("a cluster's host_op_scale times the engine's host launches: a Grace host waits as a slower launch would") {
  const ModelSpec m = MoeModel(4, 16, 2, 1408, 1);
  const ClusterSpec x86 = Cluster("dgx-h100.yaml");
  CHECK(x86.host_op_scale == 1);  // absent: an x86 DGX host, the engines' reference
  ClusterSpec grace = x86;
  grace.host_op_scale = 2.75;
  const size_t row = FirstMoeRow(m);
  EngineSpec e;
  REQUIRE_OK(LoadEngineSpec("megatron-core", &e));
  e.moe_host_launch_s = 0.4e-3;  // slow enough that the launches show on both hosts
  e.moe_host_launches["bf16"] = {2, 4};
  EngineSpec scaled = e;
  scaled.moe_host_launch_s = 2.75 * 0.4e-3;
  auto table = [&](const ClusterSpec& c, const EngineSpec& eng) {
    CostSource src;
    src.model = &m;
    src.cluster = &c;
    src.engine = &eng;
    CostTable t;
    REQUIRE_OK(BuildCostTable(src, TableShape{2, 1, 1, false, Recompute::kNone, 4, 1}, CostOptions{}, &t));
    return t;
  };
  const CostTable on_x86 = table(x86, e), on_grace = table(grace, e), slower = table(x86, scaled);
  CHECK(on_x86.rows[row].moe_host_wait_s > 0);
  CHECK(on_grace.rows[row].moe_host_wait_s > on_x86.rows[row].moe_host_wait_s);
  CHECK(on_grace.rows[row].moe_host_wait_s == doctest::Approx(slower.rows[row].moe_host_wait_s).epsilon(1e-12));
  CHECK(on_grace.rows[row].forward_s == doctest::Approx(slower.rows[row].forward_s).epsilon(1e-12));
  CHECK(on_grace.rows[0].forward_s == on_x86.rows[0].forward_s);  // nothing but the expert block's launches moves
  // The built-in GB200 NVL72 file carries Grace's figure (TransformerEngine #2053: 37.08 / 13.48 us).
  CHECK(Cluster("gb200-nvl72.yaml").host_op_scale == doctest::Approx(2.75));
  CHECK(Cluster("b200.yaml").host_op_scale == 1);
}

TEST_CASE("memory of an MoE stage: dense states sharded over dp x cp, expert states over edp = t cp dp / (ep etp)") {
  const ModelSpec m = MoeModel(4, 16, 2, 1408, 1, 64);
  const ClusterSpec c = Cluster("dgx-h100.yaml");
  CostSource src;
  src.model = &m;
  src.cluster = &c;
  SearchOptions o;
  o.gpus = 32;
  o.dp_comms = {DpComm::kHierAllReduce};  // the per-level rings the closed forms below are written with
  for (auto [t, ep, etp] : {std::tuple{2, 4, 1}, {2, 8, 2}, {1, 16, 1}, {4, 2, 4}}) {
    Evaluator ev(src, o, 64);
    const size_t ti = ev.AddTable(Table(m, c, {1, t, 1, t > 1, Recompute::kNone, ep, etp}));
    Candidate k = MakeCandidate(ti, t, 1, 2, 16 / t, 64 / (16 / t), 1, Schedule::k1F1B, Recompute::kNone, 1, t > 1);
    k.ep = ep;
    k.etp = etp;
    Evaluation x;
    REQUIRE_OK(ev.Evaluate(k, &x));
    REQUIRE(x.zero == 1);  // ZeRO-1 (the distributed optimizer) is the fastest with pipelining and dp > 1
    const StateBytes& sb = ev.state_bytes();
    const double g = sb.total - sb.weight - sb.optimizer;
    const int64_t d = 16 / t, edp = t * d / (ep * etp);
    CHECK(k.Edp() == edp);
    const CostTable& table = ev.tables()[ti];
    for (size_t r = 0; r < 2; ++r) {
      const auto& cuts = *x.cuts;
      const double expert = table.ExpertParams(cuts[r], cuts[r + 1]), all = table.Params(cuts[r], cuts[r + 1]);
      CHECK(x.expert_params[r] == doctest::Approx(expert).epsilon(1e-12));
      const double states = (all - expert) * (sb.weight + g + sb.optimizer / static_cast<double>(d)) +
                            expert * (sb.weight + g + sb.optimizer / static_cast<double>(edp));
      CHECK(x.peak[r] - x.acts[r] - x.work[r] == doctest::Approx(states).epsilon(1e-9));
      // Gradients: dense reduce-scattered and gathered over the d ranks t apart, experts over the edp ranks ep etp apart.
      const std::vector<int64_t> dense_g = GroupSpread(c, d, t), expert_g = GroupSpread(c, edp, ep * etp);
      double comm = ReduceScatterSeconds(c, (all - expert) * sb.grad_comm, dense_g, AllReduceUse::kGradient) +
                    AllGatherSeconds(c, (all - expert) * sb.weight, dense_g, AllReduceUse::kGradient);
      if (edp > 1) {
        comm += ReduceScatterSeconds(c, expert * sb.grad_comm, expert_g, AllReduceUse::kGradient) +
                AllGatherSeconds(c, expert * sb.weight, expert_g, AllReduceUse::kGradient);
      }
      CHECK(x.allreduce_s[r] == doctest::Approx(comm).epsilon(1e-12));
      // By hand from the layers: the MoE blocks' experts / (ep etp), the rest / t.
      double hand_expert = 0;
      for (int64_t i = cuts[r]; i < cuts[r + 1]; ++i)
        hand_expert += m.layers[static_cast<size_t>(i)].expert_params / static_cast<double>(ep * etp);
      CHECK(expert == doctest::Approx(hand_expert).epsilon(1e-12));
    }
  }
}

SearchOptions Small(int64_t gpus) {
  SearchOptions o;
  o.gpus = gpus;
  o.top_k = 1;
  o.microbatch = {1, 2};
  o.schedules = {Schedule::k1F1B};
  o.recompute = {Recompute::kNone, Recompute::kFull};
  o.cp = {1};
  return o;
}

TEST_CASE(
    "the search's constraints: --ep must divide the experts and fold into a stage's GPUs; a dense model takes ep 1; "
    "MoE needs SP with TP") {
  const ModelSpec moe = MoeModel(4, 8, 2, 1408, 1), dense = MoeModel(4, 8, 2, 1408, 4);
  const ClusterSpec c = Cluster("dgx-h100.yaml");
  CostSource src;
  src.cluster = &c;
  src.model = &moe;
  Plan plan;
  SearchOptions o = Small(16);
  o.ep = {3};
  Status s = SolveAuto(src, o, &plan);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("--ep 3") != std::string::npos);
  CHECK(s.message().find("divisor of 8 (1, 2, 4, 8)") != std::string::npos);
  o = Small(16);
  o.ep = {8};
  o.pp = {4};  // 4 GPUs per stage cannot hold an EP group of 8
  s = SolveAuto(src, o, &plan);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("--ep 8") != std::string::npos);
  CHECK(s.message().find("choose --ep (x --etp) dividing 4") != std::string::npos);
  o = Small(16);
  o.tp = {2};
  o.sequence_parallel = {0};
  s = SolveAuto(src, o, &plan);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("sequence parallelism") != std::string::npos);
  src.model = &dense;
  o = Small(16);
  o.ep = {2};
  s = SolveAuto(src, o, &plan);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("no MoE layers") != std::string::npos);
  o = Small(16);
  REQUIRE_OK(SolveAuto(src, o, &plan));  // dense: ep = etp = 1
  CHECK(plan.ep == 1);
  CHECK(plan.etp == 1);
}

TEST_CASE("ordering: a forced layout with more expert parallelism holds less memory and moves more all-to-all") {
  const ModelSpec m = MoeModel(4, 64, 4, 1408, 1, 64);
  const ClusterSpec c = Cluster("dgx-h100.yaml");
  CostSource src;
  src.model = &m;
  src.cluster = &c;
  double last_mem = INFINITY, last_a2a = 0;
  for (int64_t ep : {1, 2, 4, 8, 16, 32}) {
    SearchOptions o = Small(32);
    o.tp = {1};
    o.pp = {1};
    o.ep = {ep};
    o.etp = {1};
    o.zero = {1};
    o.microbatch = {1};
    o.recompute = {Recompute::kNone};
    Plan plan;
    REQUIRE_OK(SolveAuto(src, o, &plan));
    REQUIRE(plan.ep == ep);
    CHECK(plan.predicted.peak_memory_bytes < last_mem);
    if (ep == 1) CHECK(plan.stages[0].ep_comm_s == 0);
    else CHECK(plan.stages[0].ep_comm_s > last_a2a);
    last_mem = plan.predicted.peak_memory_bytes;
    last_a2a = plan.stages[0].ep_comm_s;
  }
}

TEST_CASE("ordering: more expert parallelism holds less memory and moves more all-to-all") {
  const ModelSpec m = MoeModel(4, 64, 4, 1408, 0);
  const ClusterSpec c = Cluster("dgx-h100.yaml");
  const size_t row = FirstMoeRow(m);
  double last_params = INFINITY, last_a2a = 0;
  for (int64_t ep : {2, 4, 8, 16, 32, 64}) {  // 16 and up leave the node
    const CostTable t = Table(m, c, {1, 1, 1, false, Recompute::kNone, ep, 1});
    CHECK(t.rows[row].params < last_params);
    CHECK(t.rows[row].ep_comm_s > last_a2a);
    last_params = t.rows[row].params;
    last_a2a = t.rows[row].ep_comm_s;
  }
}

TEST_CASE("brute force: the search's best MoE plan equals the best of every (tp, ep, etp, pp) solved alone") {
  const ModelSpec m = MoeModel(4, 8, 2, 1408, 1, 32);
  ClusterSpec c = Cluster("dgx-h100.yaml");
  c.usable_memory_GiB = 2;  // memory binds: the best plan needs EP (ep 2 here)
  CostSource src;
  src.model = &m;
  src.cluster = &c;
  const int64_t n = 16;
  Plan best;
  SearchOptions free_o = Small(n);
  REQUIRE_OK(SolveAuto(src, free_o, &best));
  double hand = INFINITY;
  int64_t feasible = 0;
  for (int64_t t : {1, 2, 4, 8})
    for (int64_t ep : {1, 2, 4, 8})
      for (int64_t etp : {int64_t{1}, t})
        for (int64_t p : {1, 2, 4, 8}) {
          if ((n / p) % (ep * etp) != 0 || (n / p) % t != 0) continue;
          SearchOptions o = Small(n);
          o.tp = {t};
          o.ep = {ep};
          o.etp = {etp};
          o.pp = {p};
          Plan one;
          Status s = SolveAuto(src, o, &one);
          if (!s.ok()) continue;
          ++feasible;
          CHECK(one.tp == t);
          CHECK(one.ep == ep);
          CHECK(one.etp == etp);
          CHECK(one.pp == p);
          hand = std::min(hand, one.predicted.iteration_s);
        }
  REQUIRE(feasible > 4);
  CHECK(best.ep > 1);  // memory made expert parallelism win
  CHECK(best.predicted.iteration_s == doctest::Approx(hand).epsilon(1e-12));
}

}  // namespace
}  // namespace planner
