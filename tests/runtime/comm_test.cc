// Communicator conformance: one table of checks run on every backend that
// is present (threads always; MPI when this binary runs under mpirun, see
// tests/runtime/mpi_main.cc), with exact expected values.
#include "tests/runtime/comm_conformance.h"

#include "tests/test_util.h"

namespace planner {
namespace {

TEST_CASE("threads backend passes the conformance table on 1, 2, 3 and 4 ranks") {
  for (int n : {1, 2, 3, 4}) {
    CHECK_OK(RunThreadRanks(n, [](Communicator& c) { return RunConformance(c); }));
  }
}

TEST_CASE("threads backend: a failing rank stops the others instead of hanging") {
  Status s = RunThreadRanks(3, [](Communicator& c) -> Status {
    if (c.rank() == 1) return Status::Internal("rank 1 gave up");
    float x = 1;
    return c.AllReduce(&x, 1, ReduceOp::kSum);
  }, 30);
  CHECK(s.code() == StatusCode::kInternal);
}

TEST_CASE("threads backend: a missing peer times out with a message naming the operation") {
  Status s = RunThreadRanks(2, [](Communicator& c) -> Status {
    if (c.rank() == 1) return Status::OK();  // never joins
    float x = 1;
    return c.AllReduce(&x, 1, ReduceOp::kSum);
  }, 0.5);
  CHECK(s.code() == StatusCode::kCommError);
  CHECK(s.message().find("all-reduce on rank 0 of 2 timed out") != std::string::npos);
}

}  // namespace
}  // namespace planner
