// Collective profiling in the manner of nccl-tests: all-reduce, all-gather,
// reduce-scatter, broadcast, ring send/recv and all-to-all over a size sweep, on every
// power-of-two group size the ranks allow and on each topology level they
// span (node-local groups, and groups across nodes when there are several),
// every result checked (#wrong), bus bandwidth with nccl-tests' factors
// (cost-model-facts.md section 3), and an alpha-beta fit per curve. MPI on
// CPU ranks, NCCL (device buffers) on GPU ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/comm/communicator.h"
#include "spec/profile.h"

namespace planner {

struct CommProfileOptions {
  int64_t min_bytes = 8;
  int64_t max_bytes = 16 << 20;
  int64_t step_factor = 2;  // sizes min, min*f, ..., max
  int warmup = 3;
  int iterations = 20;  // timed per size (fewer for large sizes, at least 3)
  // cold: before every timed operation each rank writes a 32 MiB buffer (evicting its caches,
  // as a training step's compute does before the gradient all-reduce) and the group meets at a
  // barrier; each operation is timed alone. warm (default): back to back, as nccl-tests.
  bool cold = false;
  // cold only: before each eviction every rank computes this long in registers (no memory
  // traffic), as a rank computes a backward before its gradient all-reduce. On this 2-core VM an
  // all-reduce after 20 ms of compute ran 1.2-1.9x slower than after the eviction alone, the
  // ranks meeting at a barrier either way (docs/performance.md).
  double gap_s = 0;
  std::vector<std::string> collectives = {"all_reduce", "all_gather", "reduce_scatter",
                                          "broadcast",  "send_recv",  "all_to_all"};
};

struct CommRow {
  std::string collective, level;
  int group_size = 0;
  int64_t bytes = 0, count = 0;
  double time_s = 0, algbw_GBps = 0, busbw_GBps = 0;
  int64_t wrong = 0;
};

// Collective over `world`: every rank takes part; rows and curves are
// complete on rank 0 (others get theirs too). `print` receives each table
// line as it is measured (rank 0 prints).
// `host`: the host communicator of the same ranks when `world` is NCCL (node layout and
// reporting go over it); nullptr when `world` is a host backend.
Status ProfileCollectives(Communicator& world, const CommProfileOptions& options, std::vector<CommRow>* rows,
                          std::vector<CommCurve>* curves, const std::function<void(const std::string&)>& print,
                          Communicator* host = nullptr);

}  // namespace planner
