// MPI backend: non-blocking collectives polled against a deadline, so a dead
// peer turns into a CommError naming the operation instead of a hang.
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "runtime/comm/communicator.h"

namespace planner {

namespace {

MPI_Op Op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

class MpiComm final : public Communicator {
 public:
  MpiComm(MPI_Comm c, bool owned) : comm_(c), owned_(owned) {
    MPI_Comm_rank(c, &rank_);
    MPI_Comm_size(c, &size_);
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, data, Int(count), MPI_FLOAT, Op(op), comm_, &r);
    return Wait(&r, 1, "all-reduce");
  }
  Status AllGather(const float* send, float* recv, int64_t count) override {
    MPI_Request r;
    MPI_Iallgather(send, Int(count), MPI_FLOAT, recv, Int(count), MPI_FLOAT, comm_, &r);
    return Wait(&r, 1, "all-gather");
  }
  Status ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp op) override {
    MPI_Request r;
    MPI_Ireduce_scatter_block(send, recv, Int(count), MPI_FLOAT, Op(op), comm_, &r);
    return Wait(&r, 1, "reduce-scatter");
  }
  Status Broadcast(float* data, int64_t count, int root) override {
    MPI_Request r;
    MPI_Ibcast(data, Int(count), MPI_FLOAT, root, comm_, &r);
    return Wait(&r, 1, "broadcast");
  }
  Status GroupSendRecv(const std::vector<P2POp>& ops) override {
    std::vector<MPI_Request> rs(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2POp& o = ops[i];
      if (o.peer < 0 || o.peer >= size_) return Status::InvalidArgument(fmt::format("send/recv peer {} outside [0, {})", o.peer, size_));
      if (o.send) MPI_Isend(o.data, Int(o.count), MPI_FLOAT, o.peer, 7, comm_, &rs[i]);
      else MPI_Irecv(o.data, Int(o.count), MPI_FLOAT, o.peer, 7, comm_, &rs[i]);
    }
    return Wait(rs.data(), static_cast<int>(rs.size()), "send/recv");
  }
  Status Barrier() override {
    MPI_Request r;
    MPI_Ibarrier(comm_, &r);
    return Wait(&r, 1, "barrier");
  }
  Status Split(int color, int key, std::unique_ptr<Communicator>* out) override {
    MPI_Comm c;
    if (MPI_Comm_split(comm_, color, key, &c) != MPI_SUCCESS) return Status::CommError("MPI_Comm_split failed");
    auto m = std::make_unique<MpiComm>(c, true);
    m->set_timeout_seconds(timeout_s_);
    *out = std::move(m);
    return Status::OK();
  }
  MPI_Comm raw() const { return comm_; }

 private:
  static int Int(int64_t n) { return static_cast<int>(n); }
  Status Wait(MPI_Request* r, int n, const char* what) {
    if (n == 0) return Status::OK();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    int spins = 0;
    while (true) {
      int done = 0;
      if (MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) return Status::CommError(fmt::format("MPI {} failed", what));
      if (done) return Status::OK();
      if (std::chrono::steady_clock::now() > deadline) {
        return Status::CommError(fmt::format("MPI {} on rank {} of {} timed out after {:.0f} s: a peer rank died or is stuck",
                                             what, rank_, size_, timeout_s_));
      }
      // Spin briefly, then yield: ranks are oversubscribed on small machines.
      if (++spins > 64) std::this_thread::yield();
    }
  }
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

bool MpiBuilt() { return true; }

bool LaunchedUnderMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_NTASKS", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

Status MakeMpiWorld(std::unique_ptr<Communicator>* out) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      return Status::CommError("MPI_Init_thread failed");
    }
    std::atexit(FinalizeAtExit);
  }
  *out = std::make_unique<MpiComm>(MPI_COMM_WORLD, false);
  return Status::OK();
}

Status MpiNodeLayout(Communicator& world, int* local_rank, int* local_size, int* nodes) {
  auto* m = dynamic_cast<MpiComm*>(&world);
  if (m == nullptr) {
    *local_rank = world.rank();
    *local_size = world.size();
    *nodes = 1;
    return Status::OK();
  }
  MPI_Comm local;
  MPI_Comm_split_type(m->raw(), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, local_rank);
  MPI_Comm_size(local, local_size);
  MPI_Comm_free(&local);
  float leaders = *local_rank == 0 ? 1.0f : 0.0f;
  PLANNER_RETURN_IF_ERROR(world.AllReduce(&leaders, 1, ReduceOp::kSum));
  *nodes = static_cast<int>(leaders);
  return Status::OK();
}

}  // namespace planner
