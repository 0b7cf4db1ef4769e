// Block recompute (Megatron --recompute-method block: the first N transformer
// blocks of each pipeline chunk recomputed, the rest keep their activations)
// and Megatron's pipeline split with the embedding and the loss counted as a
// layer each (--account-for-embedding-in-pipeline-split / -loss-): closed forms
// over the cost tables' rows, the search's choice of the smallest N that fits,
// and the uneven first and last chunks. docs/cost_model.md sections 4 and 5.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "dp_solver/candidates.h"
#include "dp_solver/evaluate.h"
#include "dp_solver/search.h"
#include "tests/test_util.h"

namespace planner {
namespace {

struct GptFixture {
  ModelSpec model;
  ClusterSpec cluster;
  GptFixture(int64_t layers, int64_t batch) {
    const std::string text = "format_version: 1\nname: blk\ndtype: bf16\nglobal_batch: " + std::to_string(batch) +
                             "\ngpt: {layers: " + std::to_string(layers) +
                             ", hidden: 4096, heads: 32, seq: 4096, vocab: 32000}\n";
    REQUIRE_OK(ParseModelSpec("blk.yaml", text, &model));
    REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-h100.yaml"), &cluster));
  }
  CostSource Source() const {
    CostSource s;
    s.model = &model;
    s.cluster = &cluster;
    return s;
  }
};

size_t Z(int64_t i) { return static_cast<size_t>(i); }

// One stage's forward, backward-input and stash summed row by row: the first n block rows of [a, e)
// from `full`, every other row from `none` (the definition, without prefix sums).
struct RowSums {
  double f = 0, bi = 0, stash = 0;
};
RowSums ByRows(const CostTable& none, const CostTable& full, const ModelSpec& m, int64_t a, int64_t e, int64_t n) {
  RowSums s;
  int64_t taken = 0;
  for (int64_t i = a; i < e; ++i) {
    const bool rc = m.layers[Z(i)].kind == LayerKind::kTransformerBlock && taken < n;
    if (rc) ++taken;
    const LayerCostRow& r = (rc ? full : none).rows[Z(i)];
    s.f += r.forward_s;
    s.bi += r.backward_input_s;
    s.stash += r.stash_bytes;
  }
  return s;
}

TEST_CASE(
    "block recompute: stage times and stash are the none rows with the first N blocks' full rows; N = 0 is none, N = "
    "all is full") {
  GptFixture fx(8, 64);
  SearchOptions o;
  o.gpus = 16;
  Evaluator ev(fx.Source(), o, 64);
  CostTable none, full;
  REQUIRE_OK(BuildCostTable(fx.Source(), TableShape{1, 8, 1, true, Recompute::kNone}, o.cost, &none));
  REQUIRE_OK(BuildCostTable(fx.Source(), TableShape{1, 8, 1, true, Recompute::kFull}, o.cost, &full));
  const size_t tn = ev.AddTable(none), tf = ev.AddTable(full);
  Candidate k = MakeCandidate(tn, 8, 1, 2, 1, 64, 1, Schedule::k1F1B, Recompute::kFull, 1, true);
  k.full_table = tf;
  Evaluation x;
  REQUIRE_OK(ev.Evaluate(k, &x));
  const int64_t blocks0 = (*x.cuts)[1] - 1;  // stage 0: the embedding row, then blocks
  REQUIRE(blocks0 >= 2);
  double last_bi = 0, last_acts = INFINITY;
  for (int64_t n = 0; n <= blocks0 + 1; ++n) {
    CAPTURE(n);
    k.recompute_num_layers = n;
    REQUIRE_OK(ev.Evaluate(k, &x));
    const auto cuts = *x.cuts;
    for (int64_t q = 0; q < 2; ++q) {
      const RowSums want = ByRows(ev.tables()[tn], ev.tables()[tf], fx.model, cuts[Z(q)], cuts[Z(q + 1)], n);
      CHECK(x.sim[Z(q)].forward_s == doctest::Approx(want.f).epsilon(1e-12));
      CHECK(x.sim[Z(q)].backward_input_s == doctest::Approx(want.bi).epsilon(1e-12));
      CHECK(x.stash[Z(q)] == doctest::Approx(want.stash).epsilon(1e-12));
      CHECK(x.acts[Z(q)] ==
            doctest::Approx(static_cast<double>(std::min<int64_t>(2 - q, 64)) * want.stash).epsilon(1e-12));
      if (n == 0) CHECK(want.stash == doctest::Approx(ev.tables()[tn].Stash(cuts[Z(q)], cuts[Z(q + 1)])));
    }
    // Monotone: more recomputed blocks, more backward time, less activation memory (until every block is).
    CHECK(x.sim[0].backward_input_s >= last_bi);
    CHECK(x.acts[0] <= last_acts);
    if (n > 0 && n <= blocks0) CHECK(x.sim[0].backward_input_s > last_bi);
    if (n > 0 && n <= blocks0) CHECK(x.acts[0] < last_acts);
    last_bi = x.sim[0].backward_input_s;
    last_acts = x.acts[0];
    // N covering every block of the stage: each block row is the full table's.
    if (n >= blocks0) {
      const RowSums all = ByRows(ev.tables()[tn], ev.tables()[tf], fx.model, 0, cuts[1], blocks0);
      CHECK(x.stash[0] == doctest::Approx(all.stash));
    }
  }
}

TEST_CASE("the search takes the smallest N that fits, where recompute none does not") {
  GptFixture fx(8, 64);
  SearchOptions o;
  o.gpus = 16;
  o.tp = {8};
  o.pp = {2};
  o.microbatch = {1};
  o.cp = {1};
  o.sequence_parallel = {1};
  o.schedules = {Schedule::k1F1B};
  o.recompute = {Recompute::kNone, Recompute::kFull};
  o.recompute_block = 1;
  o.zero = {0};
  // The peaks at N = 0..4 at this layout, from the evaluator.
  Evaluator ev(fx.Source(), o, 64);
  CostTable none, full;
  REQUIRE_OK(BuildCostTable(fx.Source(), TableShape{1, 8, 1, true, Recompute::kNone}, o.cost, &none));
  REQUIRE_OK(BuildCostTable(fx.Source(), TableShape{1, 8, 1, true, Recompute::kFull}, o.cost, &full));
  const size_t tn = ev.AddTable(none), tf = ev.AddTable(full);
  Candidate k = MakeCandidate(tn, 8, 1, 2, 1, 64, 1, Schedule::k1F1B, Recompute::kFull, 1, true);
  k.full_table = tf;
  std::vector<double> peak;
  Evaluation x;
  for (int64_t n = 0; n <= 4; ++n) {
    k.recompute_num_layers = n;
    REQUIRE_OK(ev.Evaluate(k, &x));
    peak.push_back(x.peak_bytes);
  }
  for (int64_t want : {1, 2, 3}) {
    CAPTURE(want);
    // Usable memory between the peaks at want and want - 1: N = want fits, want - 1 does not.
    fx.cluster.usable_memory_GiB = 0.5 * (peak[Z(want)] + peak[Z(want - 1)]) / (1024.0 * 1024 * 1024);
    Plan p;
    REQUIRE_OK(SolveAuto(fx.Source(), o, &p));
    CHECK(p.recompute == Recompute::kFull);
    CHECK(p.recompute_num_layers == want);
    CHECK(p.predicted.peak_memory_bytes == doctest::Approx(peak[Z(want)]));
    // Hardware FLOPs: no recompute's plus one forward of each recomputed block (min(N, blocks) per stage).
    double recomputed = 0, block_fwd = 0;
    for (const auto& st : p.stages) {
      int64_t blocks = 0;
      for (int64_t i = st.first_layer; i <= st.last_layer; ++i)
        blocks += fx.model.layers[Z(i)].kind == LayerKind::kTransformerBlock;
      recomputed += static_cast<double>(std::min(blocks, want));
    }
    for (const auto& l : fx.model.layers)
      if (l.kind == LayerKind::kTransformerBlock) block_fwd += 64 * l.fwd_flops;
    const double hw = fx.model.IterationFlops(64, false) + block_fwd * recomputed / 8;
    CHECK(p.predicted.tflops_per_gpu * 1e12 * 16 * p.predicted.iteration_s == doctest::Approx(hw).epsilon(1e-9));
    // Block recompute of fewer layers is faster than full recompute of every layer.
    CHECK(p.runners_up.size() >= 1);
    bool full_seen = false;
    for (const auto& r : p.runners_up) {
      if (r.recompute == Recompute::kFull && r.recompute_num_layers == 0) {
        full_seen = true;
        CHECK(r.iteration_s > p.predicted.iteration_s);
      }
    }
    CHECK(full_seen);
  }
  // Memory for recompute none: none wins, no block plan is made.
  fx.cluster.usable_memory_GiB = 1.01 * peak[0] / (1024.0 * 1024 * 1024);
  Plan p;
  REQUIRE_OK(SolveAuto(fx.Source(), o, &p));
  CHECK(p.recompute == Recompute::kNone);
  CHECK(p.recompute_num_layers == 0);
}

TEST_CASE(
    "Megatron's embedding-and-loss split: chunks of (blocks + 2) / (p v) units, the first and last one block fewer") {
  // 8 rows before/after: embedding, blocks 1..6, final norm, lm_head, loss (10 rows); k = 4 chunks, u = 2.
  CHECK(AccountedPartition(10, 1, 6, 4) == std::vector<int64_t>{0, 2, 4, 6, 10});
  // u = 1: chunk 0 is the embedding alone (Megatron builds 0 layers there), the last holds the head rows alone.
  CHECK(AccountedPartition(10, 1, 6, 8) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 10});
  CHECK(AccountedPartition(10, 1, 6, 3).empty());  // 3 does not divide 8
  CHECK(AccountedPartition(10, 1, 6, 2) == std::vector<int64_t>{0, 4, 10});
  // Llama 3 405B's 126 blocks at p = 16, v = 2: 128 / 32 = 4 units per chunk.
  const std::vector<int64_t> llama = AccountedPartition(130, 1, 126, 32);
  REQUIRE(llama.size() == 33);
  CHECK(llama[1] - llama[0] == 4);    // embedding + 3 blocks
  CHECK(llama[2] - llama[1] == 4);    // 4 blocks
  CHECK(llama[32] - llama[31] == 6);  // 3 blocks + final norm, lm_head, loss

  GptFixture fx(6, 64);  // p v = 4 does not divide 6 but divides 6 + 2
  SearchOptions o;
  o.gpus = 16;
  o.tp = {8};
  o.pp = {2};
  o.microbatch = {1};
  o.cp = {1};
  o.schedules = {Schedule::kInterleaved};
  o.interleave = {2};
  o.recompute = {Recompute::kNone};
  Plan p;
  REQUIRE_OK(SolveAuto(fx.Source(), o, &p));
  CHECK(p.interleave == 2);
  CHECK(p.account_embedding_loss);
  REQUIRE(p.stages.size() == 4);
  const int64_t want_first[] = {0, 2, 4, 6}, want_last[] = {1, 3, 5, 9};
  for (size_t q = 0; q < 4; ++q) {
    CAPTURE(q);
    CHECK(p.stages[q].first_layer == want_first[q]);
    CHECK(p.stages[q].last_layer == want_last[q]);
  }
  // p v = 10 divides neither 6 nor 6 + 2: left out.
  o.interleave = {5};
  Plan none;
  CHECK(SolveAuto(fx.Source(), o, &none).code() == StatusCode::kInfeasible);
}

TEST_CASE(
    "1F1B with p dividing blocks + 2, not blocks: the balanced split and Megatron's account-for split are both "
    "candidates") {
  GptFixture fx(6, 64);
  SearchOptions o;
  o.gpus = 32;
  o.pp = {4};
  SearchSpace sp = MakeSearchSpace(fx.Source(), o, 64);
  sp.schedules = {Schedule::k1F1B};
  Evaluator ev(fx.Source(), o, 64);
  CostTable none;
  REQUIRE_OK(BuildCostTable(fx.Source(), TableShape{1, 8, 1, true, Recompute::kNone}, o.cost, &none));
  const size_t tn = ev.AddTable(none);
  Rejections why;
  const std::vector<Candidate> cands = UniformCandidates(sp, o, tn, ev.tables()[tn], &why);
  REQUIRE(cands.size() == 2);
  CHECK(!cands[0].account);
  CHECK(cands[1].account);
  Evaluation x;
  REQUIRE_OK(ev.Evaluate(cands[1], &x));
  CHECK(*x.cuts == std::vector<int64_t>{0, 2, 4, 6, 10});  // embedding + 1 block, 2, 2, 1 block + norm, lm_head, loss
  // p dividing the blocks: only the balanced split.
  GptFixture eight(8, 64);
  SearchSpace sp8 = MakeSearchSpace(eight.Source(), o, 64);
  sp8.schedules = {Schedule::k1F1B};
  Evaluator ev8(eight.Source(), o, 64);
  CostTable t8;
  REQUIRE_OK(BuildCostTable(eight.Source(), TableShape{1, 8, 1, true, Recompute::kNone}, o.cost, &t8));
  const size_t i8 = ev8.AddTable(t8);
  CHECK(UniformCandidates(sp8, o, i8, ev8.tables()[i8], &why).size() == 1);
}

}  // namespace
}  // namespace planner
