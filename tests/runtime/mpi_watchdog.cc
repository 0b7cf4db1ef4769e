// Runs under `mpirun -np 1` (tests/runtime/mpi_watchdog_test.sh): the MPI
// watchdog keeps a deadline per call. One thread blocks in a receive nobody
// sends, with a 1 s timeout; another finishes all-reduces with a 60 s timeout
// as fast as it can, as the gradient thread does beside the pipeline thread
// under --overlap-dp. The watchdog must end the process about 1 s in with one
// error naming the receive; with one deadline for the whole process each
// finished all-reduce disarmed the receive's and the process ran on.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "runtime/comm/communicator.h"

int main() {
  using namespace planner;
  std::unique_ptr<Communicator> world;
  Status s = MakeMpiWorld(&world);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 77;
  }
  if (!ConcurrentCommunicatorsSafe(*world)) {
    std::fprintf(stderr, "the MPI library did not grant MPI_THREAD_MULTIPLE\n");
    return 77;
  }
  std::unique_ptr<Communicator> other;
  s = world->Split(0, world->rank(), &other);
  if (!s.ok()) {
    std::fprintf(stderr, "split: %s\n", s.message().c_str());
    return 1;
  }
  other->set_timeout_seconds(60);
  world->set_timeout_seconds(1);

  std::thread stuck([&] {
    float x = 0;
    // From this rank itself, with a tag nothing sends: blocks until the watchdog ends the process.
    const Status r = world->Recv(&x, 1, world->rank(), 12345);
    std::fprintf(stderr, "the receive returned (%s) instead of blocking\n", r.ToString().c_str());
    std::_Exit(1);
  });
  stuck.detach();

  // Finished calls, one after another, for 12 s at most (the watchdog must fire at about 1 s).
  const auto start = std::chrono::steady_clock::now();
  long calls = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(12)) {
    float v = 1;
    s = other->AllReduce(&v, 1, ReduceOp::kSum);
    if (!s.ok()) {
      std::fprintf(stderr, "all-reduce: %s\n", s.message().c_str());
      std::_Exit(1);
    }
    ++calls;
  }
  std::fprintf(
      stderr,
      "FAIL: the receive with a 1 s timeout was still running after 12 s (%ld all-reduces finished beside it)\n",
      calls);
  std::_Exit(1);
}
