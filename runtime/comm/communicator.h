// Communicator: the collectives and point-to-point transfers the runtime
// and the profiler use, behind one interface (after NCCL's and torch's
// ProcessGroup: STYLE.md 8.6). Backends: MPI (CPU ranks), NCCL (GPU ranks,
// bootstrapped over MPI), and in-process threads (unit tests). Buffers are
// float32 on the backend's device; counts are elements. No call hangs past
// the timeout, but what happens then depends on the backend:
//  - threads and NCCL return CommError (NCCL aborts the communicator first);
//  - MPI never returns: its watchdog thread prints one "planner: error:" line
//    naming the operation and rank and calls MPI_Abort, which ends every rank
//    with exit 1 (runtime/comm/mpi_comm.cc). MPI's own errors are fatal too
//    (MPI_COMM_WORLD keeps MPI_ERRORS_ARE_FATAL).
// A GroupSendRecv peer outside the group is InvalidArgument on every
// backend; MPI and threads also check Send / Recv peers and refuse negative
// tags (NCCL leaves both to the library). AllToAllV's vectors are checked on
// every backend before any traffic (CheckAllToAllV): a wrong length or a
// negative count or displacement is InvalidArgument on the rank that passed it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace planner {

enum class ReduceOp { kSum, kMax };

struct P2POp {
  bool send = true;
  int peer = 0;
  float* data = nullptr;  // send: read; recv: written
  int64_t count = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi", "nccl", "threads"
  // The library and the settings that carry the traffic, for comm profiles
  // and run reports ("Open MPI v4.1.4, shared-memory eager limit 1048576 B").
  virtual std::string transport() const { return backend(); }

  // In place.
  virtual Status AllReduce(float* data, int64_t count, ReduceOp op) = 0;
  // recv holds size() x count, rank-major.
  virtual Status AllGather(const float* send, float* recv, int64_t count) = 0;
  // send holds size() x count; this rank receives its reduced block.
  virtual Status ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp op) = 0;
  virtual Status Broadcast(float* data, int64_t count, int root) = 0;
  // Every rank sends send_counts[j] floats (from send at send_displs[j]) to rank j and receives
  // recv_counts[j] floats from rank j into recv at recv_displs[j]. Counts/displacements in floats.
  // Each vector holds size() entries; rank j's send_counts[me] must equal my recv_counts[j]
  // (threads return CommError otherwise; MPI's own error is fatal, NCCL's behaviour undefined).
  // Zero counts move nothing; the entry for this rank itself is a local copy. MPI refuses counts
  // and displacements beyond 2^31 - 1 floats (InvalidArgument).
  virtual Status AllToAllV(const float* send, const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& send_displs, float* recv,
                           const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs) = 0;
  // Equal blocks: send and recv hold size() x count floats, rank-major (block j goes to / comes from rank j).
  Status AllToAll(const float* send, float* recv, int64_t count);
  // All sends and receives of the group are posted together (no ordering deadlock).
  virtual Status GroupSendRecv(const std::vector<P2POp>& ops) = 0;
  virtual Status Barrier() = 0;
  // Pipeline transfers: Send returns once the message is posted (the buffer
  // must stay alive and unchanged until FlushSends), so a schedule's sends
  // never block; Recv blocks until a message with this tag arrives from peer.
  // Tags are non-negative; MPI maps them onto its tag space modulo
  // MPI_TAG_UB - 100 (2^31 - 101 in Open MPI), threads use them as given, and
  // NCCL ignores them (its point-to-point calls match in posting order).
  virtual Status Send(const float* data, int64_t count, int peer, int64_t tag) = 0;
  virtual Status Recv(float* data, int64_t count, int peer, int64_t tag) = 0;
  virtual Status FlushSends() = 0;
  // Waits for outstanding device work (NCCL); a no-op for host backends.
  virtual Status Synchronize() { return Status::OK(); }
  // A sub-communicator of the ranks passing the same color, ordered by key.
  virtual Status Split(int color, int key, std::unique_ptr<Communicator>* out) = 0;

  void set_timeout_seconds(double s) { timeout_s_ = s; }
  double timeout_seconds() const { return timeout_s_; }

 protected:
  double timeout_s_ = 300;
};

// AllToAllV's argument checks on a group of `size` ranks: each vector has `size` entries,
// none negative. InvalidArgument naming the first bad one.
Status CheckAllToAllV(int size, const std::vector<int64_t>& send_counts, const std::vector<int64_t>& send_displs,
                      const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs);

// MPI_COMM_WORLD (MPI_Init_thread on first use, MPI_Finalize at exit), with `timeout_s`
// as its calls' timeout. MPI_Init_thread and MPI_Finalize wait for every rank of the job; the
// watchdog bounds them too (MPI_Init_thread by `timeout_s`, MPI_Finalize by max(`timeout_s`,
// 300 s), as rank 0 may still write the run's files; past it: one error line naming the phase
// and the rank, and this process ends with exit 1; mpirun then ends the others).
// Unavailable when built without MPI.
Status MakeMpiWorld(std::unique_ptr<Communicator>* out, double timeout_s = 300);
// For the CLI, once a failed command's error line is printed: under MPI (initialised, not yet
// finalised) this process ends at once with `exit_code` (stdio flushed, open AtomicFile
// temporaries removed, no MPI_Finalize, which would wait for the other ranks, themselves waiting
// for this one in a collective until the timeout). mpirun then ends the other ranks within about
// a second and exits with this code. Returns when MPI is not in use.
void LeaveJobAfterError(int exit_code);
bool MpiBuilt();
// The shared-memory eager limit (bytes) MakeMpiWorld set before MPI_Init, or 0
// where it left the library's own: the user exported one, /dev/shm lacked
// room, or MPI was initialised elsewhere (runtime/comm/mpi_comm.cc says why).
int64_t MpiEagerLimitSet();
// Whether two threads may each drive a different communicator of this kind
// at once (MPI: the library granted MPI_THREAD_MULTIPLE; others: yes).
bool ConcurrentCommunicatorsSafe(const Communicator& c);
// Whether this process was started by mpirun / srun with several ranks.
bool LaunchedUnderMpi();
// Watches the processes of the other ranks on this node (MPI worlds; a no-op
// otherwise): a rank whose process is gone ends every rank here within about
// 20 ms with one error naming it (MPI_Abort), before any timeout. End it
// between two barriers after the last collective, so that ranks leaving
// normally are not taken for lost ones.
Status StartPeerWatch(Communicator& world);
void EndPeerWatch();
// The node-local rank and the number of nodes the world spans (MPI shared-memory split).
Status MpiNodeLayout(Communicator& world, int* local_rank, int* local_size, int* nodes);

// `n` in-process ranks; run(rank, comm) on n threads and join. Returns the
// first failure that is not a CommError (the root cause), else the first.
Status RunThreadRanks(int n, const std::function<Status(Communicator&)>& run, double timeout_s = 60);

}  // namespace planner
