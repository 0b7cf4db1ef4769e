// Exactness: the DPs equal brute-force enumeration on random small instances.
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "dp_solver/pipedream_dp.h"
#include "dp_solver/search.h"
#include "tests/test_util.h"

namespace planner {
namespace {

// Random chain profile of n layers (PipeDream units: ms, bytes).
Profile RandomChain(std::mt19937& rng, int n) {
  std::uniform_real_distribution<double> ms(0.1, 10), bytes(1e5, 5e8);
  Profile p;
  p.reference_microbatch = 1;
  for (int i = 0; i < n; ++i) {
    ProfileLayer l;
    l.name = std::string(1, 'l');
    l.name += std::to_string(i);
    if (i > 0) {
      std::string prev(1, 'l');
      prev += std::to_string(i - 1);
      l.inputs = {prev};
    }
    ProfileTiming t;
    t.forward_s = ms(rng) / 1000;
    t.backward_s = ms(rng) / 1000;
    l.timings = {t};
    l.output_bytes = bytes(rng);
    l.params_bytes = (rng() % 3 == 0) ? 0 : bytes(rng);
    p.layers.push_back(l);
  }
  return p;
}

// PipeDream's flat cost model, enumerated over every contiguous split and
// every replication vector that uses exactly M machines.
double BruteForcePipeDream(const Profile& p, int64_t M, double bw, double acr) {
  const int n = static_cast<int>(p.layers.size());
  auto comp = [&](int a, int b) {  // layers [a, b)
    double t = 0, w = 0;
    for (int i = a; i < b; ++i) {
      t += p.layers[static_cast<size_t>(i)].timings[0].forward_s +
           p.layers[static_cast<size_t>(i)].timings[0].backward_s;
      w += p.layers[static_cast<size_t>(i)].params_bytes;
    }
    return std::make_pair(t, w);
  };
  double best = INFINITY;
  std::function<void(int, int64_t, double)> rec = [&](int start, int64_t left, double cur) {
    for (int end = start + 1; end <= n; ++end) {
      for (int64_t r = 1; r <= left; ++r) {
        if ((end == n) != (r == left)) continue;
        auto [t, w] = comp(start, end);
        double rd = static_cast<double>(r);
        double cost = (t + 4 * (rd - 1) * w / (bw * rd)) / rd;
        if (start > 0 && acr > 0) {
          cost = std::max(cost, 2 * p.layers[static_cast<size_t>(start - 1)].output_bytes / (bw * rd) / acr);
          if (end < n) cost = std::max(cost, 2 * p.layers[static_cast<size_t>(end - 1)].output_bytes / (bw * rd) / acr);
        }
        double v = std::max(cur, cost);
        if (end == n) best = std::min(best, v);
        else rec(end, left - r, v);
      }
    }
  };
  rec(0, M, 0);
  return best;
}

TEST_CASE("PipeDream DP equals brute force on random chains") {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 60; ++trial) {
    int n = 2 + static_cast<int>(rng() % 9);          // 2..10 layers
    int64_t M = 2 + static_cast<int64_t>(rng() % 7);  // 2..8 machines
    double bw = std::uniform_real_distribution<double>(1e9, 3e10)(rng);
    double acr = trial % 2 ? 1.0 : 0.0;
    Profile p = RandomChain(rng, n);
    PipeDreamOptions o;
    o.machines = {M};
    o.bandwidths = {bw};
    o.activation_compression_ratio = acr;
    PipeDreamResult r;
    REQUIRE_OK(SolvePipeDream(p, o, &r));
    INFO("n=" << n << " M=" << M);
    CHECK(r.objective_s == doctest::Approx(BruteForcePipeDream(p, M, bw, acr)).epsilon(1e-12));
    CHECK(r.machines_used == M);
  }
}

// n rows with forward times uniform in [0.01, 1) s, prefix sums built.
CostTable RandomForwardTable(std::mt19937& rng, int n) {
  CostTable t;
  for (int i = 0; i < n; ++i) {
    LayerCostRow row;
    row.forward_s = std::uniform_real_distribution<double>(0.01, 1)(rng);
    t.rows.push_back(row);
  }
  t.BuildPrefix();
  return t;
}

TEST_CASE("balanced partition equals brute-force min-max") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    int n = 2 + static_cast<int>(rng() % 11);
    int64_t k = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(n));
    const CostTable t = RandomForwardTable(rng, n);
    auto cuts = BalancedPartition(t, k);
    REQUIRE(cuts.size() == static_cast<size_t>(k + 1));
    double got = 0;
    for (int64_t q = 0; q < k; ++q) {
      CHECK(cuts[static_cast<size_t>(q + 1)] > cuts[static_cast<size_t>(q)]);
      got = std::max(got, t.Time(cuts[static_cast<size_t>(q)], cuts[static_cast<size_t>(q + 1)]));
    }
    double best = INFINITY;
    std::function<void(int64_t, int64_t, double)> rec = [&](int64_t start, int64_t parts, double cur) {
      if (parts == 1) {
        best = std::min(best, std::max(cur, t.Time(start, n)));
        return;
      }
      for (int64_t e = start + 1; e <= n - (parts - 1); ++e) rec(e, parts - 1, std::max(cur, t.Time(start, e)));
    };
    rec(0, k, 0);
    CHECK(got == doctest::Approx(best).epsilon(1e-9));
  }
}

TEST_CASE("balanced partition at allowed cut points equals brute force over those points") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 3 + static_cast<int>(rng() % 12);
    const CostTable t = RandomForwardTable(rng, n);
    std::vector<int64_t> at = {0};
    for (int64_t i = 1; i < n; ++i)
      if (rng() % 3 != 0) at.push_back(i);
    at.push_back(n);
    const int64_t units = static_cast<int64_t>(at.size()) - 1;
    const int64_t k = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(units + 1));  // up to one too many
    auto cuts = BalancedPartition(t, k, at);
    INFO("n=" << n << " k=" << k << " units=" << units);
    if (k > units) {
      CHECK(cuts.empty());  // fewer parts can be cut there than asked
      continue;
    }
    REQUIRE(cuts.size() == static_cast<size_t>(k + 1));
    double got = 0;
    for (int64_t q = 0; q < k; ++q) {
      CHECK(std::find(at.begin(), at.end(), cuts[static_cast<size_t>(q)]) != at.end());
      got = std::max(got, t.Time(cuts[static_cast<size_t>(q)], cuts[static_cast<size_t>(q + 1)]));
    }
    CHECK(cuts.back() == n);
    double best = INFINITY;
    std::function<void(int64_t, int64_t, double)> rec = [&](int64_t u, int64_t parts, double cur) {
      if (parts == 1) {
        best = std::min(best, std::max(cur, t.Time(at[static_cast<size_t>(u)], n)));
        return;
      }
      for (int64_t e = u + 1; e <= units - (parts - 1); ++e)
        rec(e, parts - 1, std::max(cur, t.Time(at[static_cast<size_t>(u)], at[static_cast<size_t>(e)])));
    };
    rec(0, k, 0);
    CHECK(got == doctest::Approx(best).epsilon(1e-9));
  }
}

}  // namespace
}  // namespace planner
