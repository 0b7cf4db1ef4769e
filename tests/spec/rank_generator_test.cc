// The rank generator (spec/rank_generator.h) against Megatron-Core's documented examples, a direct transcription
// of the ranks' coordinates (brute force over tp, cp, dp, pp in 1..4 with at most 32 ranks and every ep x etp
// folding of a stage), and the loop nests codegen wrote launch.yaml's groups with before it (kept below as the
// reference): every group set partitions the ranks, a group's ranks differ only in its token's coordinates, and
// the groups come in Megatron-Core's order, which is the order launch.yaml has always had.
#include <algorithm>
#include <map>

#include "spec/rank_generator.h"
#include "tests/test_util.h"

namespace planner {
namespace {

// ---- codegen's loop nests before the generator (codegen/codegen.cc, UniformRanks and ExpertGroups) ----
struct OldGroups {
  RankGroups tp, dp, pp, cp, ep, edp;
};

OldGroups OldUniformGroups(int64_t p, int64_t d, int64_t cp, int64_t t) {
  OldGroups o;
  auto rank_of = [&](int64_t r, int64_t k, int64_t c, int64_t j) { return ((r * d + k) * cp + c) * t + j; };
  for (int64_t r = 0; r < p; ++r)
    for (int64_t k = 0; k < d; ++k)
      for (int64_t c = 0; c < cp; ++c) {
        std::vector<int64_t> g;
        for (int64_t j = 0; j < t; ++j) g.push_back(rank_of(r, k, c, j));
        o.tp.push_back(g);
      }
  for (int64_t r = 0; r < p; ++r)
    for (int64_t j = 0; j < t; ++j) {
      std::vector<int64_t> g;
      for (int64_t k = 0; k < d; ++k)
        for (int64_t c = 0; c < cp; ++c) g.push_back(rank_of(r, k, c, j));
      o.dp.push_back(g);
    }
  for (int64_t k = 0; k < d; ++k)
    for (int64_t c = 0; c < cp; ++c)
      for (int64_t j = 0; j < t; ++j) {
        std::vector<int64_t> g;
        for (int64_t r = 0; r < p; ++r) g.push_back(rank_of(r, k, c, j));
        o.pp.push_back(g);
      }
  if (cp == 1) return o;
  for (int64_t r = 0; r < p; ++r)
    for (int64_t k = 0; k < d; ++k)
      for (int64_t j = 0; j < t; ++j) {
        std::vector<int64_t> g;
        for (int64_t c = 0; c < cp; ++c) g.push_back(rank_of(r, k, c, j));
        o.cp.push_back(g);
      }
  return o;
}

void OldExpertGroups(int64_t p, int64_t n, int64_t ep, int64_t etp, OldGroups* o) {
  if (ep <= 1 || n % (ep * etp) != 0) return;
  const int64_t edp = n / (ep * etp);
  for (int64_t r = 0; r < p; ++r)
    for (int64_t e = 0; e < edp; ++e)
      for (int64_t j = 0; j < etp; ++j) {
        std::vector<int64_t> g;
        for (int64_t q = 0; q < ep; ++q) g.push_back(r * n + j + etp * (q + ep * e));
        o->ep.push_back(g);
      }
  for (int64_t r = 0; r < p; ++r)
    for (int64_t q = 0; q < ep; ++q)
      for (int64_t j = 0; j < etp; ++j) {
        std::vector<int64_t> g;
        for (int64_t e = 0; e < edp; ++e) g.push_back(r * n + j + etp * (q + ep * e));
        o->edp.push_back(g);
      }
}
// ---- end of the old loop nests ----

RankGenerator MakeOrDie(const ParallelSizes& s, std::string_view order) {
  RankGenerator g;
  REQUIRE_OK(RankGenerator::Make(s, order, &g));
  return g;
}

RankGroups RanksOf(const RankGenerator& g, std::string_view token) {
  RankGroups out;
  REQUIRE_OK(g.Ranks(token, &out));
  return out;
}

// The groups of `token` transcribed from the coordinates: ranks keyed by their coordinates outside the token
// (the last dimension of the order most significant, so the first counts fastest), each group's ranks sorted by
// their coordinates in the token the same way. Also checks the partition and the coordinates.
RankGroups Transcribed(const RankGenerator& g, const std::vector<ParallelDim>& layout,
                       const std::vector<ParallelDim>& token) {
  auto in_token = [&](ParallelDim d) { return std::find(token.begin(), token.end(), d) != token.end(); };
  std::map<std::vector<int64_t>, std::map<std::vector<int64_t>, int64_t>> by_key;
  for (int64_t rank = 0; rank < g.world_size(); ++rank) {
    std::vector<int64_t> outside, inside;
    for (auto it = layout.rbegin(); it != layout.rend(); ++it) {
      (in_token(*it) ? inside : outside).push_back(g.Coordinate(rank, *it));
    }
    by_key[outside][inside] = rank;
  }
  RankGroups out;
  for (const auto& [key, members] : by_key) {
    out.emplace_back();
    for (const auto& [coords, rank] : members) out.back().push_back(rank);
  }
  return out;
}

// Every rank in exactly one group, groups of the token's size, and a group's ranks equal in every coordinate
// outside `token`.
void CheckPartition(const RankGenerator& g, const RankGroups& groups, const std::vector<ParallelDim>& token) {
  std::vector<int> seen(static_cast<size_t>(g.world_size()), 0);
  int64_t size = 1;
  for (ParallelDim d : token) size *= g.size(d);
  for (const auto& group : groups) {
    REQUIRE(static_cast<int64_t>(group.size()) == size);
    for (int64_t r : group) {
      REQUIRE(r >= 0);
      REQUIRE(r < g.world_size());
      ++seen[static_cast<size_t>(r)];
      for (ParallelDim d : kAllParallelDims) {
        if (std::find(token.begin(), token.end(), d) != token.end()) continue;
        CHECK(g.Coordinate(r, d) == g.Coordinate(group[0], d));
      }
    }
  }
  for (int s : seen) CHECK(s == 1);
}

TEST_CASE("rank generator: Megatron-Core's documented examples") {
  // generate_masked_orthogonal_rank_groups' docstring: sizes [tp, dp, pp] = [2, 3, 4], mask dp.
  const RankGroups dp = MaskedOrthogonalRankGroups({2, 3, 4}, {false, true, false});
  REQUIRE(dp.size() == 8u);
  CHECK(dp[0] == std::vector<int64_t>{0, 2, 4});
  CHECK(dp[1] == std::vector<int64_t>{1, 3, 5});
  CHECK(dp[7] == std::vector<int64_t>{19, 21, 23});
  // Order tp-pp-dp with sizes 2-2-2: the dp groups [[0, 4], [1, 5], [2, 6], [3, 7]].
  const RankGenerator g = MakeOrDie({.tp = 2, .dp = 2, .pp = 2}, "tp-pp-dp");
  CHECK(RanksOf(g, "dp") == RankGroups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(RanksOf(g, "tp-dp") == RankGroups{{0, 1, 4, 5}, {2, 3, 6, 7}});
  CHECK(RanksOf(g, "dp-tp") == RanksOf(g, "tp-dp"));  // the token's own order does not matter
}

TEST_CASE("rank generator: dense layouts against the coordinates and the old loop nests") {
  const std::vector<ParallelDim> layout = {ParallelDim::kTp, ParallelDim::kCp, ParallelDim::kDp, ParallelDim::kPp};
  const std::vector<std::pair<std::string, std::vector<ParallelDim>>> tokens = {
      {"tp", {ParallelDim::kTp}},
      {"cp", {ParallelDim::kCp}},
      {"dp", {ParallelDim::kDp}},
      {"pp", {ParallelDim::kPp}},
      {"tp-cp", {ParallelDim::kTp, ParallelDim::kCp}},
      {"dp-cp", {ParallelDim::kDp, ParallelDim::kCp}},
      {"tp-pp", {ParallelDim::kTp, ParallelDim::kPp}},
      {"tp-dp-cp", {ParallelDim::kTp, ParallelDim::kDp, ParallelDim::kCp}}};
  int cases = 0;
  for (int64_t t = 1; t <= 4; ++t)
    for (int64_t cp = 1; cp <= 4; ++cp)
      for (int64_t d = 1; d <= 4; ++d)
        for (int64_t p = 1; p <= 4; ++p) {
          if (t * cp * d * p > 32) continue;
          ++cases;
          CAPTURE(t);
          CAPTURE(cp);
          CAPTURE(d);
          CAPTURE(p);
          const RankGenerator g = MakeOrDie({.tp = t, .cp = cp, .dp = d, .pp = p}, kDenseOrder);
          const RankGenerator megatron = MakeOrDie({.tp = t, .cp = cp, .dp = d, .pp = p}, kMegatronOrder);
          REQUIRE(g.world_size() == t * cp * d * p);
          for (int64_t rank = 0; rank < g.world_size(); ++rank) {
            const int64_t j = g.Coordinate(rank, ParallelDim::kTp), c = g.Coordinate(rank, ParallelDim::kCp);
            const int64_t k = g.Coordinate(rank, ParallelDim::kDp), r = g.Coordinate(rank, ParallelDim::kPp);
            CHECK(rank == ((r * d + k) * cp + c) * t + j);  // codegen's rank formula
            CHECK(g.Coordinate(rank, ParallelDim::kEp) == 0);
          }
          for (const auto& [token, dims] : tokens) {
            CAPTURE(token);
            const RankGroups groups = RanksOf(g, token);
            CheckPartition(g, groups, dims);
            CHECK(groups == Transcribed(g, layout, dims));
            CHECK(groups == RanksOf(megatron, token));  // ep 1: the project's order is Megatron-Core's default
          }
          const OldGroups old = OldUniformGroups(p, d, cp, t);
          CHECK(RanksOf(g, "tp") == old.tp);
          CHECK(RanksOf(g, "dp-cp") == old.dp);
          CHECK(RanksOf(g, "pp") == old.pp);
          if (cp > 1) CHECK(RanksOf(g, "cp") == old.cp);
        }
  CHECK(cases > 150);
}

TEST_CASE("rank generator: MoE folding against the coordinates and the old loop nests") {
  const std::vector<ParallelDim> layout = {ParallelDim::kTp, ParallelDim::kEp, ParallelDim::kDp, ParallelDim::kPp};
  const std::vector<std::pair<std::string, std::vector<ParallelDim>>> tokens = {
      {"ep", {ParallelDim::kEp}},
      {"tp", {ParallelDim::kTp}},
      {"dp", {ParallelDim::kDp}},
      {"tp-ep", {ParallelDim::kTp, ParallelDim::kEp}},
      {"tp-ep-pp", {ParallelDim::kTp, ParallelDim::kEp, ParallelDim::kPp}}};
  int foldings = 0;
  for (int64_t t = 1; t <= 4; ++t)
    for (int64_t cp = 1; cp <= 4; ++cp)
      for (int64_t d = 1; d <= 4; ++d)
        for (int64_t p = 1; p <= 4; ++p) {
          if (t * cp * d * p > 32) continue;
          const int64_t n = t * cp * d;  // a stage's ranks
          const RankGenerator dense = MakeOrDie({.tp = t, .cp = cp, .dp = d, .pp = p}, kDenseOrder);
          for (int64_t ep = 1; ep <= n; ++ep)
            for (int64_t etp = 1; etp <= n; ++etp) {
              if (n % (ep * etp) != 0) continue;
              ++foldings;
              CAPTURE(n);
              CAPTURE(p);
              CAPTURE(ep);
              CAPTURE(etp);
              const ParallelSizes sizes{.tp = etp, .ep = ep, .dp = n / (ep * etp), .pp = p};
              const RankGenerator g = MakeOrDie(sizes, kExpertOrder);
              const RankGenerator megatron = MakeOrDie(sizes, kMegatronOrder);
              REQUIRE(g.world_size() == dense.world_size());
              for (const auto& [token, dims] : tokens) {
                CAPTURE(token);
                const RankGroups groups = RanksOf(g, token);
                CheckPartition(g, groups, dims);
                CHECK(groups == Transcribed(g, layout, dims));
                CHECK(groups == RanksOf(megatron, token));  // cp 1: Megatron-Core's default order
              }
              // Megatron-Core asserts the expert generator's pipeline groups are the dense one's.
              CHECK(RanksOf(g, "pp") == RanksOf(dense, "pp"));
              // A stage's expert groups stay within the stage.
              for (const auto& group : RanksOf(g, "tp-ep-dp")) CHECK(group.front() / n == group.back() / n);
              if (ep == 1) continue;  // codegen writes expert groups with ep > 1 only
              OldGroups old;
              OldExpertGroups(p, n, ep, etp, &old);
              CHECK(RanksOf(g, "ep") == old.ep);
              CHECK(RanksOf(g, "dp") == old.edp);
            }
        }
  CHECK(foldings > 500);
}

TEST_CASE("rank generator: orders, tokens and sizes it refuses, and its description") {
  RankGenerator g;
  CHECK(RankGenerator::Make({.tp = 2, .pp = 2}, "tp-dp", &g).code() == StatusCode::kInvalidArgument);  // pp 2 left out
  CHECK(RankGenerator::Make({.tp = 2}, "tp-tp", &g).code() == StatusCode::kInvalidArgument);
  CHECK(RankGenerator::Make({.tp = 2}, "tp-xp", &g).code() == StatusCode::kInvalidArgument);
  CHECK(RankGenerator::Make({.tp = 2}, "tp-", &g).code() == StatusCode::kInvalidArgument);
  CHECK(RankGenerator::Make({.tp = 0}, "tp", &g).code() == StatusCode::kInvalidArgument);
  CHECK(RankGenerator::Make({.cp = 2, .ep = 2}, kMegatronOrder, &g).code() == StatusCode::kInvalidArgument);
  CHECK(RankGenerator::Make({.tp = 1 << 16, .dp = 1 << 16}, "tp-dp", &g).code() == StatusCode::kInvalidArgument);
  REQUIRE_OK(RankGenerator::Make({.tp = 2, .dp = 2, .pp = 2}, "tp-dp-pp", &g));  // cp and ep of size 1 appended
  CHECK(g.Describe() == "tp 2, dp 2, pp 2 in order tp-dp-pp");
  RankGroups out;
  CHECK(g.Ranks("tp-tp", &out).code() == StatusCode::kInvalidArgument);
  CHECK(g.Ranks("", &out).code() == StatusCode::kInvalidArgument);
  REQUIRE_OK(g.Ranks("cp", &out));  // a dimension of size 1: every rank alone
  CHECK(out.size() == 8u);
  REQUIRE_OK(RankGenerator::Make({.tp = 2, .cp = 1, .dp = 2, .pp = 2}, kDenseOrder, &g));
  CHECK(g.Describe() == "tp 2, cp 1, dp 2, pp 2 in order tp-cp-dp-pp");
}

}  // namespace
}  // namespace planner
