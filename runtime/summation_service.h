// Parameter-server and BytePS gradient sync of a data-parallel group over
// point-to-point messages (launch.yaml `dp_comm: ps | byteps`, `servers`).
// Each DP group of size n > 1 gets its own communicator, split from the job's
// world: its n workers (ranks 0..n-1, in launch.yaml's group order) and the k
// server ranks (n..n+k-1), so its messages never meet pipeline transfers or
// another group's (a separate MPI context). A sync of `count` floats:
//   the bucket is cut into k server parts then n worker parts (SplitForSync);
//   ps: server parts only (contiguous shards), or co-located (k = 0) n worker
//   shards, worker i the server of shard i; byteps: BytePsOptimalSplit's
//   cpu_share / gpu_share (k = 0: n parts of count / n, the all-reduce's split).
//   Push (one GroupSendRecv): a header {1, count} and server part c to server
//   c; worker part j to worker j; worker i receives part i of the others.
//   Worker i sums part i over workers 0..n-1 in that order; server c sums
//   part c the same way (deterministic, every worker gets the same bits).
//   Pull (one GroupSendRecv): worker i sends its sum to the others and
//   receives the other parts' sums from their owners.
// Servers hold no stage: one thread per group serves until every worker of
// the group sent the done header {0, 0}. docs/runtime.md ("Parameter server
// and BytePS").
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "runtime/comm/communicator.h"
#include "spec/dp_comm.h"
#include "spec/launch_plan.h"

namespace planner {

// [begin, begin + count) of each part, server parts first.
struct SyncPart {
  int64_t begin = 0, count = 0;
};
struct SyncParts {
  std::vector<SyncPart> server, worker;
};
// ps: count cut into k near-equal shards (the first count % k one longer), no worker parts;
// ps with k = 0 (co-located, launch.yaml `ps_placement: colocated`): n near-equal worker shards.
// byteps: each server part floor(cpu_share x count), the rest cut into n near-equal worker parts.
SyncParts SplitForSync(DpComm mode, int64_t count, int64_t n, int64_t k);

// Data bytes a rank moved in syncs (headers not counted), and how many syncs.
struct SyncTraffic {
  double sent_bytes = 0, received_bytes = 0;
  int64_t syncs = 0;
};

// A worker's side of one group's sync.
class SummationClient {
 public:
  SummationClient(std::unique_ptr<Communicator> group, DpComm mode, int64_t workers, int64_t servers)
      : group_(std::move(group)), mode_(mode), n_(workers), k_(servers) {}
  // Sums data[0, count) over the group's workers in place.
  Status Reduce(float* data, int64_t count);
  // Tells the group's servers this worker is done (the last call).
  Status Done();
  const SyncTraffic& traffic() const { return traffic_; }

 private:
  Status Push(float* data, const SyncParts& p, int64_t count, std::vector<float>* from_others);
  std::unique_ptr<Communicator> group_;
  DpComm mode_;
  int64_t n_, k_;
  SyncTraffic traffic_;
  std::vector<float> scratch_;
};

// What RunLaunch needs before it builds anything: with servers, the workers' own world (split
// from the job's, workers first) and whether this rank is a server; the groups' communicators.
struct DpSyncComms {
  bool server = false;
  std::unique_ptr<Communicator> workers;    // with servers: ranks 0..n-1 of the job; else null (the job's world)
  std::unique_ptr<SummationClient> client;  // a worker in a group of size > 1 under ps / byteps
  std::vector<std::unique_ptr<Communicator>> served;  // a server: every group's communicator
  std::vector<int64_t> served_workers;                // their worker counts
};
// Collective over the job's world (every rank, servers too, in the same order). Nothing for the
// all-reduce family.
Status OpenDpSync(const LaunchPlan& launch, Communicator& world, DpSyncComms* out);

// A server rank's life: serves every group on its own thread until each is done; its traffic.
Status ServeGroups(DpSyncComms& sync, DpComm mode, int64_t servers, SyncTraffic* out);

}  // namespace planner
