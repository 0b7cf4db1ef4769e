// The last-resort mapping of exceptions to Status (planner/main.cc, thread
// ranks) and the non-throwing number parser readers use instead of std::stod.
#include <filesystem>
#include <new>
#include <stdexcept>
#include <system_error>

#include "common/status.h"
#include "common/units.h"
#include "tests/test_util.h"

namespace planner {
namespace {

TEST_CASE("StatusFromException: filesystem errors name the path, exit 1") {
  const std::filesystem::filesystem_error e("status", std::filesystem::path("some/dir/file.yaml"),
                                            std::make_error_code(std::errc::too_many_symbolic_link_levels));
  const Status s = StatusFromException(e);
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK(ExitCodeFor(s) == kExitFailure);
  CHECK(s.message() ==
        "some/dir/file.yaml: " + std::make_error_code(std::errc::too_many_symbolic_link_levels).message());

  const std::filesystem::filesystem_error two("rename", std::filesystem::path("a"), std::filesystem::path("b"),
                                              std::make_error_code(std::errc::permission_denied));
  CHECK(StatusFromException(two).message() ==
        "a -> b: " + std::make_error_code(std::errc::permission_denied).message());
}

TEST_CASE("StatusFromException: out of memory and anything else") {
  const Status oom = StatusFromException(std::bad_alloc());
  CHECK(oom.code() == StatusCode::kUnavailable);
  CHECK(oom.message() == "out of memory");
  const Status other = StatusFromException(std::out_of_range("vector::at"));
  CHECK(other.code() == StatusCode::kInternal);
  CHECK(ExitCodeFor(other) == kExitFailure);
  CHECK(other.message() == "internal error: vector::at");
}

TEST_CASE("ParseDouble: whole numbers only, never throws") {
  CHECK(ParseDouble("2.5") == 2.5);
  CHECK(ParseDouble("-1e-3") == -1e-3);
  CHECK(ParseDouble("7") == 7.0);
  CHECK(ParseDouble(".5") == 0.5);
  CHECK(ParseDouble("3.") == 3.0);
  CHECK(ParseDouble("+2E+3") == 2000.0);
  for (const char* bad :
       {"", "x", "1.5x", "1,5", "nan", "inf", "-inf", "1e999", "--1", ".", "0x10", " 5", "5 ", "1e", "0x1p3", "e5"}) {
    INFO(bad);
    CHECK_FALSE(ParseDouble(bad).has_value());
  }
}

}  // namespace
}  // namespace planner
