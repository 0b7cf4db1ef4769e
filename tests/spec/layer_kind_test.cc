// Layer kinds: every LayerKind round-trips through its name, the catalogue lists the model file's
// kinds in enum order, and a name that is no kind is refused with the readers' messages.
#include <iterator>
#include <string>

#include "spec/layer_catalog.h"
#include "spec/layer_kind.h"
#include "spec/model_spec.h"
#include "tests/test_util.h"

namespace planner {
namespace {

TEST_CASE("every layer kind round-trips through its name") {
  for (LayerKind k : kAllLayerKinds) {
    const std::string name = LayerKindName(k);
    INFO(name);
    LayerKind back = k == LayerKind::kLinear ? LayerKind::kLoss : LayerKind::kLinear;
    REQUIRE(ParseLayerKind(name, &back));
    CHECK(back == k);
  }
  CHECK(std::string(LayerKindName(LayerKind::kTransformerBlock)) == "transformer_block");
  CHECK(std::string(LayerKindName(LayerKind::kLmHead)) == "lm_head");
}

TEST_CASE("the catalogue's types are the model file's kinds, in enum order; moe is the runtime's alone") {
  const auto& types = LayerTypes();
  REQUIRE(types.size() + 1 == std::size(kAllLayerKinds));
  for (size_t i = 0; i < types.size(); ++i) {
    CHECK(types[i].kind == kAllLayerKinds[i]);
    CHECK(FindLayerType(kAllLayerKinds[i]) == &types[i]);
  }
  CHECK(FindLayerType(LayerKind::kMoe) == nullptr);
}

TEST_CASE("a name that is no layer kind is refused with the existing messages") {
  LayerKind k = LayerKind::kLoss;
  for (const char* bad : {"lineer", "", "Linear", "transformer-block", "linear "}) {
    INFO(bad);
    CHECK_FALSE(ParseLayerKind(bad, &k));
    CHECK(k == LayerKind::kLoss);
  }
  Layer l;
  Status s = InferLayer("lineer", LayerAttrs{}, {16}, DType::kFp32, &l);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() == "unknown layer type 'lineer'");
  s = InferLayer("moe", LayerAttrs{}, {16, 32}, DType::kFp32, &l);  // the runtime's kind: no costs, not a model file's
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() == "unknown layer type 'moe'");
  ModelSpec m;
  s = ParseModelSpec("m.yaml", "name: x\nglobal_batch: 8\ninput: [16]\nlayers:\n  - {type: lineer, out_features: 8}\n",
                     &m);
  CHECK(s.message() == "m.yaml:5: field 'layers[0].type': unknown layer type 'lineer', did you mean 'linear'?");
  s = ParseModelSpec("m.yaml", "name: x\nglobal_batch: 8\ninput: [16, 32]\nlayers:\n  - {type: moe, experts: 4}\n", &m);
  CHECK(s.message().find("m.yaml:5: field 'layers[0].type': unknown layer type 'moe'") == 0);
}

}  // namespace
}  // namespace planner
