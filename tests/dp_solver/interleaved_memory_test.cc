// Interleaved 1F1B memory: each in-flight (chunk, microbatch) is charged with
// its own chunk's activations (closed form against a count over the
// simulator's event order), and Megatron's 530B and 1T interleaved runs fit.
#include <algorithm>
#include <map>

#include "dp_solver/evaluate.h"
#include "dp_solver/search.h"
#include "tests/test_util.h"

namespace planner {
namespace {

// The peak of sum(stash of the chunks alive) on device r, walking the simulator's events in order.
double BruteForcePeak(const std::vector<std::vector<double>>& stash, int64_t p, int64_t v, int64_t m, int64_t r) {
  std::vector<SimStage> st(static_cast<size_t>(p * v));
  for (size_t q = 0; q < st.size(); ++q) {
    st[q].forward_s = 1.0 + 0.1 * static_cast<double>(q % 3);
    st[q].backward_input_s = 2.0;
    st[q].backward_weight_s = 0.5;
  }
  SimResult res;
  REQUIRE_OK(SimulateSchedule(Schedule::kInterleaved, st, p, m, true, &res));
  std::vector<SimEvent> ev;
  for (const auto& e : res.events)
    if (e.device == r && (e.kind == 'F' || e.kind == 'B')) ev.push_back(e);
  std::sort(ev.begin(), ev.end(), [](const SimEvent& a, const SimEvent& b) { return a.start_s < b.start_s; });
  double alive = 0, peak = 0;
  for (const auto& e : ev) {
    double s = stash[static_cast<size_t>(r)][static_cast<size_t>(e.stage / p)];
    alive += e.kind == 'F' ? s : -s;
    peak = std::max(peak, alive);
  }
  return peak;
}

TEST_CASE("interleaved peak activations: the closed form equals the count over the simulator's order") {
  for (int64_t p : {2, 3, 4, 5, 8}) {
    for (int64_t v : {2, 3, 4, 6}) {
      for (int64_t m : {p, 2 * p, 3 * p, 5 * p}) {
        std::vector<std::vector<double>> stash(static_cast<size_t>(p), std::vector<double>(static_cast<size_t>(v)));
        for (int64_t r = 0; r < p; ++r)
          for (int64_t c = 0; c < v; ++c)
            stash[static_cast<size_t>(r)][static_cast<size_t>(c)] =
                1.0 + static_cast<double>((7 * r + 3 * c * c + c) % 5);
        for (int64_t r = 0; r < p; ++r) {
          CAPTURE(p);
          CAPTURE(v);
          CAPTURE(m);
          CAPTURE(r);
          double closed = InterleavedPeakActivations(stash[static_cast<size_t>(r)], p, m, r);
          CHECK(closed == doctest::Approx(BruteForcePeak(stash, p, v, m, r)));
        }
      }
    }
  }
}

TEST_CASE("interleaved peak activations: uneven chunks are not all charged as the largest") {
  // p = 4, v = 2, m = 8, device 0: a 3-unit first chunk (embedding and a block), a 1-unit second.
  // Warm-up (p-1)2 + (v-1)p = 10 forwards, 11 alive at most: 4 + 4 + 2 of chunk 0 ... counted exactly.
  Candidate k;
  k.pp = 4;
  k.interleave = 2;
  k.num_microbatches = 8;
  k.schedule = Schedule::kInterleaved;
  std::vector<double> stash = {3.0, 1.0};
  double exact = InterleavedPeakActivations(stash, 4, 8, 0);
  double old_charge = static_cast<double>(InFlight(k, 0)) * 3.0;
  CHECK(InFlight(k, 0) == 11);
  CHECK(exact < old_charge);
  std::vector<std::vector<double>> all(4, stash);
  CHECK(exact == doctest::Approx(BruteForcePeak(all, 4, 2, 8, 0)));
  // Even chunks: the same as in-flight x stash.
  CHECK(InterleavedPeakActivations({2.0, 2.0}, 4, 8, 0) == doctest::Approx(22.0));
}

// A model given as text on Selene's dgx-a100, where Megatron's published runs ran.
struct OnA100 {
  ModelSpec model;
  ClusterSpec cluster;
  explicit OnA100(const std::string& text) {
    REQUIRE_OK(ParseModelSpec("megatron.yaml", text, &model));
    REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-a100.yaml"), &cluster));
  }
  CostSource Source() const {
    CostSource src;
    src.model = &model;
    src.cluster = &cluster;
    return src;
  }
};

// Megatron's runs as they ran (SC'21 Table 1 and Korthikanti et al. 2022): fp16, full recompute, 18 bytes (2 more
// than Megatron's fp16 gradient buffer: they fit even so) per parameter, no distributed optimizer (ZeRO off), t = 8, interleaved at v = layers / p.
Plan SolveMegatron(const std::string& text, int64_t gpus, int64_t pp, Status* status) {
  const OnA100 f(text);
  SearchOptions o;
  o.gpus = gpus;
  o.tp = {8};
  o.pp = {pp};
  o.microbatch = {1};
  o.schedules = {Schedule::kInterleaved};
  o.recompute = {Recompute::kFull};
  o.max_zero_stage = 0;
  o.cost.bytes_per_param = 18;
  o.cost.scatter_gather = true;
  Plan p;
  *status = SolveAuto(f.Source(), o, &p);
  if (status->ok()) CHECK(p.predicted.peak_memory_bytes <= f.cluster.UsableMemoryBytes());
  return p;
}

TEST_CASE("Megatron's 530B (p = 35, v = 3) and 1T (p = 64, v = 2) interleaved runs fit without ZeRO") {
  Status s;
  Plan p530 = SolveMegatron(
      "format_version: 1\nname: megatron-530b\ndtype: fp16\nglobal_batch: 2240\n"
      "gpt: {layers: 105, hidden: 20480, heads: 128, seq: 2048, vocab: 51200}\n",
      2240, 35, &s);
  REQUIRE_OK(s);
  CHECK(p530.schedule == Schedule::kInterleaved);
  CHECK(p530.interleave == 3);
  CHECK(p530.zero_stage == ZeroStage::kNone);
  Plan p1t = SolveMegatron(
      "format_version: 1\nname: megatron-1t\ndtype: fp16\nglobal_batch: 3072\n"
      "gpt: {layers: 128, hidden: 25600, heads: 160, seq: 2048, vocab: 51200}\n",
      3072, 64, &s);
  REQUIRE_OK(s);
  CHECK(p1t.schedule == Schedule::kInterleaved);
  CHECK(p1t.interleave == 2);
  CHECK(p1t.zero_stage == ZeroStage::kNone);
}

TEST_CASE(
    "Korthikanti's 1T with selective recompute and SP fits interleaved (v = 2) with Megatron's fp16 gradient buffer") {
  // Korthikanti et al. 2022 Table 5: t 8, p 64, 512 microbatches of 1, fp16, no distributed optimizer.
  // Megatron keeps fp16 models' gradients in fp16 (accumulate_allreduce_grads_in_fp32 is off unless bf16):
  // 16 bytes per parameter. Costed with 4-byte gradients (18 per parameter) the interleaved schedule
  // needs 76.3 GiB of the 75 usable, and the search fell back to 1F1B (-13% against the published MFU).
  const OnA100 f(
      "format_version: 1\nname: k-1t\ndtype: fp16\nglobal_batch: 512\n"
      "gpt: {layers: 128, hidden: 25600, heads: 160, seq: 2048, vocab: 51200, attention: unfused}\n");
  SearchOptions o;
  o.gpus = 512;
  o.tp = {8};
  o.pp = {64};
  o.cp = {1};
  o.microbatch = {1};
  o.schedules = {Schedule::kInterleaved};
  o.interleave = {2};
  o.recompute = {Recompute::kSelective};
  o.sequence_parallel = {1};
  o.zero = {0};
  Plan p;
  REQUIRE_OK(SolveAuto(f.Source(), o, &p));
  CHECK(p.grad_dtype == DType::kFp16);
  CHECK(p.predicted.peak_memory_bytes <= f.cluster.UsableMemoryBytes());
  CHECK(p.predicted.peak_memory_bytes / (1024.0 * 1024 * 1024) == doctest::Approx(72.3).epsilon(0.01));
  o.cost.grad_dtype = DType::kFp32;
  Status s = SolveAuto(f.Source(), o, &p);
  CHECK(s.code() == StatusCode::kInfeasible);
  CHECK(s.message().find("76.3 GiB > 75.0 GiB usable") != std::string::npos);
}

TEST_CASE("the interleave degree is not capped at 4: any v with p v dividing the layers") {
  ModelSpec model;
  ClusterSpec cluster;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/gpt3-175b.yaml"), &model));  // 96 layers
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-a100.yaml"), &cluster));
  CostSource src;
  src.model = &model;
  src.cluster = &cluster;
  for (int64_t v : {6, 8, 12}) {
    SearchOptions o;
    o.gpus = 1024;
    o.tp = {8};
    o.pp = {4};
    o.schedules = {Schedule::kInterleaved};
    o.interleave = {v};
    Plan p;
    REQUIRE_OK(SolveAuto(src, o, &p));
    CHECK(p.interleave == v);
    CHECK(static_cast<int64_t>(p.stages.size()) == 4 * v);
  }
  // The default search tries them too.
  SearchOptions o;
  o.gpus = 1024;
  o.tp = {8};
  o.pp = {4};
  o.schedules = {Schedule::kInterleaved};
  o.exhaustive = true;
  o.top_k = 100;
  Plan p;
  REQUIRE_OK(SolveAuto(src, o, &p));
  std::vector<int64_t> seen = {p.interleave};
  for (const auto& r : p.runners_up) seen.push_back(r.interleave);
  CHECK(std::find(seen.begin(), seen.end(), 8) != seen.end());
  // v = 5 breaks Megatron's rule (4 x 5 does not divide 96): refused, named.
  o.interleave = {5};
  Status s = SolveAuto(src, o, &p);
  CHECK(s.code() == StatusCode::kInfeasible);
  CHECK(s.message().find("pp x v must divide the 96 layers") != std::string::npos);
}

}  // namespace
}  // namespace planner
