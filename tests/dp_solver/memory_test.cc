// The memory model of the joint search against the engines it stands for
// (docs/cost_model.md sections 1 and 5): the vocab-parallel logits, the tied
// embedding, and the ZeRO stages an engine runs with pipelining.
#include <string>

#include "dp_solver/evaluate.h"
#include "dp_solver/search.h"
#include "tests/test_util.h"

namespace planner {
namespace {

struct MemFixture {
  ModelSpec model;
  ClusterSpec cluster;
  MemFixture(const char* m, const char* c) {
    REQUIRE_OK(LoadModelSpec(testing::SourcePath(std::string("configs/models/") + m), &model));
    REQUIRE_OK(LoadClusterSpec(testing::SourcePath(std::string("configs/clusters/") + c), &cluster));
  }
  CostSource Source() const {
    CostSource s;
    s.model = &model;
    s.cluster = &cluster;
    return s;
  }
  size_t Row(const std::string& name) const {
    for (size_t i = 0; i < model.layers.size(); ++i) {
      if (model.layers[i].name == name) return i;
    }
    FAIL("no layer " << name);
    return 0;
  }
};

TEST_CASE("full recompute keeps the fp32 logits split over the TP ranks (vocab-parallel cross-entropy: 4 s b V / t)") {
  MemFixture f("gpt3-175b.yaml", "dgx-a100.yaml");
  const double s = 2048, v = 51200;
  const size_t loss = f.Row("loss");
  for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    for (int64_t t : {1, 2, 8}) {
      for (int64_t b : {1, 4}) {
        CostTable table;
        REQUIRE_OK(BuildCostTable(f.Source(), b, t, rc, CostOptions{}, &table));
        INFO("recompute " << static_cast<int>(rc) << " t " << t << " b " << b);
        CHECK(table.rows[loss].stash_bytes == doctest::Approx(4 * s * static_cast<double>(b) * v / static_cast<double>(t)).epsilon(1e-12));
      }
    }
  }
  // The recomputed blocks still keep their input whole on every TP rank (Korthikanti Table 2: 2sbh).
  CostTable table;
  REQUIRE_OK(BuildCostTable(f.Source(), 1, 8, Recompute::kFull, CostOptions{}, &table));
  CHECK(table.rows[f.Row("block0")].stash_bytes == doctest::Approx(2 * s * 12288).epsilon(1e-12));
}

}  // namespace
}  // namespace planner
