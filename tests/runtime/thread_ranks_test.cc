// Thread ranks: an exception thrown on a rank's thread fails that rank (its
// Status, the root cause) and stops the others, instead of std::terminate.
#include <filesystem>
#include <new>
#include <stdexcept>

#include "runtime/comm/communicator.h"
#include "tests/test_util.h"

namespace planner {
namespace {

TEST_CASE("thread ranks: an exception on one rank is its failure, and the others stop") {
  Status s = RunThreadRanks(
      3,
      [](Communicator& c) -> Status {
        if (c.rank() == 2) throw std::runtime_error("rank 2 broke");
        float x = 1;
        return c.AllReduce(&x, 1, ReduceOp::kSum);
      },
      30);
  CHECK(s.code() == StatusCode::kInternal);
  CHECK(s.message() == "internal error: rank 2 broke");
}

TEST_CASE("thread ranks: a filesystem error names its path; out of memory says so") {
  Status s = RunThreadRanks(1, [](Communicator&) -> Status {
    throw std::filesystem::filesystem_error("create_directories", std::filesystem::path("runs/x/ckpt"),
                                            std::make_error_code(std::errc::no_space_on_device));
  });
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK(s.message() == "runs/x/ckpt: " + std::make_error_code(std::errc::no_space_on_device).message());
  s = RunThreadRanks(
      2,
      [](Communicator& c) -> Status {
        if (c.rank() == 0) throw std::bad_alloc();
        float x = 0;
        return c.Recv(&x, 1, 0, 0);
      },
      30);
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK(s.message() == "out of memory");
}

}  // namespace
}  // namespace planner
