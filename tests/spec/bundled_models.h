// A bundled model file (configs/models/FILE) loaded for a spec test; the test fails where it cannot be.
#pragma once

#include <string>

#include "spec/model_spec.h"
#include "tests/test_util.h"

namespace planner::testing {

inline ModelSpec LoadBundledModel(const std::string& file) {
  ModelSpec m;
  REQUIRE_OK(LoadModelSpec(SourcePath("configs/models/" + file), &m));
  return m;
}

}  // namespace planner::testing
