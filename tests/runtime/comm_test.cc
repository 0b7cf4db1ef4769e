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
  Status s = RunThreadRanks(
      3,
      [](Communicator& c) -> Status {
        if (c.rank() == 1) return Status::Internal("rank 1 gave up");
        float x = 1;
        return c.AllReduce(&x, 1, ReduceOp::kSum);
      },
      30);
  CHECK(s.code() == StatusCode::kInternal);
}

TEST_CASE("threads backend: a missing peer times out with a message naming the operation") {
  Status s = RunThreadRanks(
      2,
      [](Communicator& c) -> Status {
        if (c.rank() == 1) return Status::OK();  // never joins
        float x = 1;
        return c.AllReduce(&x, 1, ReduceOp::kSum);
      },
      0.5);
  CHECK(s.code() == StatusCode::kCommError);
  CHECK(s.message().find("all-reduce on rank 0 of 2 timed out") != std::string::npos);
}

TEST_CASE("threads backend: an all-to-all whose counts disagree is CommError on the receiving rank, and nobody hangs") {
  std::vector<Status> got(3);
  Status s = RunThreadRanks(
      3,
      [&](Communicator& c) -> Status {
        std::vector<int64_t> counts(3, 1), displs = {0, 1, 2}, recv_counts = counts;
        if (c.rank() == 2) recv_counts[0] = 2;  // rank 0 sends 1
        std::vector<float> send(3, static_cast<float>(c.rank())), recv(4, -1.0f);
        got[static_cast<size_t>(c.rank())] =
            c.AllToAllV(send.data(), counts, displs, recv.data(), recv_counts, {0, 2, 3});
        return Status::OK();
      },
      30);
  CHECK_OK(s);
  CHECK_OK(got[0]);
  CHECK_OK(got[1]);
  CHECK(got[2].code() == StatusCode::kCommError);
  CHECK(got[2].message() == "all-to-all: rank 0 sends 1 floats to rank 2, which expects 2");
}

TEST_CASE("all-to-all argument checks name the vector and entry") {
  const std::vector<int64_t> two(2, 0), three(3, 0);
  Status s = CheckAllToAllV(2, two, two, three, two);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() == "all-to-all: recv_counts has 3 entries; the group has 2 ranks");
  s = CheckAllToAllV(2, two, {0, -4}, two, two);
  CHECK(s.message() == "all-to-all: send_displs[1] is -4; must be 0 or more");
  CHECK_OK(CheckAllToAllV(2, two, {5, 0}, {3, 1}, two));
}

}  // namespace
}  // namespace planner
