// Weight versions a PipeDream stage holds at once (the latest included), per stage of a
// per-stage replication (replicas r_0, ..., r_{n-1}; W = their sum, workers). Shared by the
// solver's memory model (dp_solver/replicated_dp.cc) and the runtime's tests; derivation in
// docs/cost_model.md ("Vertical sync's weight versions").
//   Weight stashing: one version per in-flight minibatch of a replica, PipeDream's NOAM
//   ceil(W_i / r_i) with W_i the workers from stage i on (the newest one is the latest).
//   Vertical sync: a minibatch o entering the input stage carries the version (minibatches
//   applied) that stage had then: at least o - S, S = N_0 - 1 with N_0 = r_0 ceil(W / r_0) in
//   flight over its replicas (o and N_0 - 1 before it not applied; a stage of r_0 replicas steps
//   per round, so its version is o - N_0 + 1 rounded down to a round). While o is stage i's oldest
//   in-flight minibatch, stage i (i > 0) holds every version of its own (one per r_i minibatches)
//   from o's tag up to its latest, o: ceil(S / r_i) + 1; one more where a replica has no other
//   minibatch in flight when it steps (NOAM 1: the last stage), as it learns the next tag only
//   when the next activation arrives. The input stage's versions are its in-flight minibatches'
//   tags: ceil(W / r_0), as with stashing. Straight pipeline (all r = 1): n, n, ..., n, n + 1
//   against stashing's n - i. The runtime's peaks equal these on 1-1, 1-1-1-1, 2-1-1 and 1-2-1
//   (tests/runtime/vertical_sync_test.cc).
#pragma once

#include <cstdint>
#include <vector>

namespace planner {

inline std::vector<int64_t> StashedWeightVersions(const std::vector<int64_t>& replicas) {
  int64_t after = 0;
  for (int64_t r : replicas) after += r;
  std::vector<int64_t> v;
  for (int64_t r : replicas) {
    v.push_back((after + r - 1) / r);
    after -= r;
  }
  return v;
}

// One stage of vertical sync: `offset` workers before it, `r` replicas, W workers in all, and the
// input stage's in-flight minibatches N_0 (r_0 ceil(W / r_0); W when r_0 divides W, which is what
// the solver assumes, as it costs a stage before it knows r_0).
inline int64_t VerticalSyncStageVersions(int64_t workers, int64_t offset, int64_t r, int64_t input_in_flight) {
  const int64_t stashed = (workers - offset + r - 1) / r;
  if (offset == 0) return stashed;
  const int64_t span = input_in_flight - 1;
  return (span + r - 1) / r + 1 + (stashed == 1 ? 1 : 0);
}

inline int64_t VerticalSyncStageVersions(int64_t workers, int64_t offset, int64_t r) {
  return VerticalSyncStageVersions(workers, offset, r, workers);
}

inline std::vector<int64_t> VerticalSyncWeightVersions(const std::vector<int64_t>& replicas) {
  std::vector<int64_t> v;
  if (replicas.empty()) return v;
  int64_t workers = 0, offset = 0;
  for (int64_t r : replicas) workers += r;
  const int64_t r0 = replicas.front(), input_in_flight = r0 * ((workers + r0 - 1) / r0);
  for (int64_t r : replicas) {
    v.push_back(VerticalSyncStageVersions(workers, offset, r, input_in_flight));
    offset += r;
  }
  return v;
}

}  // namespace planner
