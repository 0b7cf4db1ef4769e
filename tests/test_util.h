// Helpers shared by the doctest suites.
#pragma once

#include <string>

#include <doctest/doctest.h>

#include "common/status.h"

#define CHECK_OK(expr)             \
  do {                             \
    ::planner::Status s_ = (expr); \
    INFO(s_.ToString());           \
    CHECK(s_.ok());                \
  } while (0)
#define REQUIRE_OK(expr)           \
  do {                             \
    ::planner::Status s_ = (expr); \
    INFO(s_.ToString());           \
    REQUIRE(s_.ok());              \
  } while (0)

namespace planner::testing {
// Absolute paths of the source tree, set by meson.
inline std::string SourcePath(const std::string& rel) { return std::string(PLANNER_SOURCE_DIR) + "/" + rel; }
}  // namespace planner::testing
