// PipeDream's weight stashing and vertical sync (the asynchronous schedule).
// Weight stashing: a microbatch's forward records the weights it used; its
// backward runs on them (restored), then the latest weights come back.
// Vertical sync (PipeDream, SOSP'19 section 3.3): a minibatch carries the input
// stage's version when it entered (the tag travels with its activations and
// gradients, runtime/interpreter.cc); every stage runs its forward and backward
// on its own version of that number, kept since the update that made it, and
// the update is still applied to the latest weights. A version is numbered by
// the minibatches whose gradients it holds (w^(t): t minibatches applied; a
// stage of r replicas steps once per round of r). A stage keeps the versions an
// in-flight or later minibatch may still use, dropped once none can.
// Checksums prove that forward and backward saw one version (mismatches must
// be 0) and count the backward passes whose latest weights were newer than
// their stash; every (minibatch, stage) pass is recorded (VersionRecord) so a
// test can compare the stages' versions of one minibatch. Rank 0 writes
// weight_stashing.txt and vertical_sync.txt. docs/runtime.md ("Vertical sync").
#pragma once

#include <cstdint>
#include <map>
#include <memory>
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

// One microbatch on one stage (one rank's record).
struct VersionRecord {
  int64_t microbatch = 0, stage = 0, replica = 0;
  int64_t tag = -1;                          // the input stage's version the minibatch carried (-1: vertical sync off)
  int64_t forward_version = -1;              // minibatches applied in the weights its forward used
  int64_t backward_version = -1;             // and its backward
  int64_t latest_version = -1;               // the stage's latest when its backward ran
  double forward_sum = 0, backward_sum = 0;  // checksums of the weights each used
};

class WeightStash {
 public:
  // `step_minibatches`: minibatches one optimizer step applies (the stage's replicas).
  WeightStash(std::vector<Param*> params, bool vertical_sync, int64_t stage, int64_t replica, int64_t step_minibatches)
      : params_(std::move(params)), vsync_(vertical_sync), stage_(stage), replica_(replica), step_(step_minibatches) {}
  // The run's start: the weights hold `applied` minibatches (a resumed run's earlier ones).
  void Begin(int64_t applied);
  // The latest weights' version.
  int64_t version() const { return latest_version_; }
  // Before microbatch j's forward: the weights it uses put in place (vertical sync: the
  // stage's version of `tag`; NotFound if dropped or not made yet) and recorded.
  Status Save(int64_t j, int64_t tag);
  // After a forward: the latest weights back (vertical sync); `last`: the rank's program has no
  // forward after it (no tag is still to come).
  void AfterForward(bool last);
  // The tag j's forward ran with (-1 without vertical sync or a forward).
  int64_t TagOf(int64_t j) const;
  // Before j's backward: the latest weights put aside, j's stash in place. NotFound without a Save.
  Status Enter(int64_t j);
  // After j's backward: the latest weights back, j's stash dropped.
  void Leave(int64_t j);
  // After an optimizer step: the new latest version (kept under vertical sync).
  void Stepped();
  const StashCounts& counts() const { return counts_; }
  const std::vector<VersionRecord>& records() const { return records_; }
  // Most versions held at once (the latest included).
  int64_t peak_versions() const { return peak_versions_; }
  int64_t stage() const { return stage_; }

 private:
  using Weights = std::shared_ptr<const std::vector<float>>;
  std::vector<float> Snapshot() const;
  void Restore(const std::vector<float>& values);
  double Checksum() const;
  void Prune();

  std::vector<Param*> params_;
  const bool vsync_;
  const int64_t stage_, replica_, step_;
  int64_t latest_version_ = 0, last_tag_ = 0, peak_versions_ = 1;
  std::map<int64_t, Weights> versions_;  // vertical sync: version -> weights
  std::map<int64_t, Weights> stash_;     // microbatch -> the weights its forward used
  std::map<int64_t, size_t> record_of_;  // microbatch -> its record
  std::vector<float> latest_;
  bool swapped_ = false;
  bool forwards_left_ = true;
  StashCounts counts_;
  std::vector<VersionRecord> records_;
};

// Sums every rank's counts (collective); rank 0 writes them to `run_dir`/weight_stashing.txt.
Status WriteStashCounts(Communicator& world, const StashCounts& mine, const std::string& run_dir, StashCounts* total);

// What vertical_sync.txt reports (every rank's records gathered).
struct VersionSummary {
  int64_t minibatches = 0;             // run microbatches seen by every stage
  int64_t split = 0;                   // whose stages ran their forwards on different versions
  int64_t later_newer = 0;             // of them, with a later stage on a newer version than an earlier one
  int64_t off_tag = 0;                 // (vertical sync) forwards not on their tag's version
  std::vector<int64_t> peak_versions;  // per stage: most weight versions a rank of it held at once
};

// Gathers the records of `stages` stages over `microbatches` run microbatches (collective);
// rank 0 writes `run_dir`/vertical_sync.txt.
Status WriteVersionSummary(Communicator& world, const WeightStash* mine, bool vertical_sync, int64_t stages,
                           int64_t microbatches, const std::string& run_dir, VersionSummary* out);

}  // namespace planner
