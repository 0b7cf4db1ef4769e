// PipeDream's weight stashing (the asynchronous schedule): a microbatch's
// forward records the weights it used; its backward runs on them (restored),
// then the latest weights come back. Checksums prove that forward and
// backward saw one version (mismatches must be 0) and count the backward
// passes whose latest weights were newer than their stash (stashing at work);
// rank 0 writes the sums over ranks to weight_stashing.txt.
// docs/runtime.md ("The executor's parts").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/kernels/kernel.h"

namespace planner {

struct StashCounts {
  int64_t backward_passes = 0;
  int64_t mismatches = 0;  // forward and backward on different weight versions
  int64_t stale = 0;       // backward passes whose latest weights were newer than their stash
};

class WeightStash {
 public:
  explicit WeightStash(std::vector<Param*> params) : params_(std::move(params)) {}
  // At microbatch j's forward: the weights it uses.
  void Save(int64_t j);
  // Before j's backward: the latest weights put aside, j's stash in place. NotFound without a Save.
  Status Enter(int64_t j);
  // After j's backward: the latest weights back, j's stash dropped.
  void Leave(int64_t j);
  const StashCounts& counts() const { return counts_; }

 private:
  std::vector<float> Snapshot() const;
  void Restore(const std::vector<float>& values);
  double Checksum() const;

  std::vector<Param*> params_;
  std::map<int64_t, std::vector<float>> stash_;
  std::map<int64_t, double> stash_sum_;
  std::vector<float> latest_;
  StashCounts counts_;
};

// Sums every rank's counts (collective); rank 0 writes them to `run_dir`/weight_stashing.txt.
Status WriteStashCounts(Communicator& world, const StashCounts& mine, const std::string& run_dir, StashCounts* total);

}  // namespace planner
