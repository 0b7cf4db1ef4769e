// The NCCL backend, built into the CUDA module libplanner_cuda.so and reached through the table at the end
// (nccl_module_api.h; nccl_loader.cc is the caller).
#include "runtime/comm/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "runtime/comm/nccl_module_api.h"

namespace planner {

namespace {

ncclRedOp_t Op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

Status Nccl(ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return Status::OK();
  return Status::CommError(fmt::format("NCCL {} failed: {}", what, ncclGetErrorString(r)));
}
Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::OK();
  return Status::CommError(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

class NcclComm final : public Communicator {
 public:
  NcclComm(ncclComm_t c, cudaStream_t s, int rank, int size) : comm_(c), stream_(s), rank_(rank), size_(size) {
    cudaStreamCreateWithFlags(&send_stream_, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming);
    cudaMalloc(&scratch_, sizeof(float));
  }
  ~NcclComm() override {
    if (!aborted_) ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
    cudaStreamDestroy(send_stream_);
    cudaEventDestroy(ready_);
    cudaFree(scratch_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  std::string transport() const override { return NcclVersion(); }

  Status AllReduce(float* d, int64_t n, ReduceOp op) override {
    PLANNER_RETURN_IF_ERROR(After(stream_));
    PLANNER_RETURN_IF_ERROR(
        Nccl(ncclAllReduce(d, d, static_cast<size_t>(n), ncclFloat, Op(op), comm_, stream_), "all-reduce"));
    return Wait(stream_, "all-reduce");
  }
  Status AllGather(const float* s, float* r, int64_t n) override {
    PLANNER_RETURN_IF_ERROR(After(stream_));
    PLANNER_RETURN_IF_ERROR(Nccl(ncclAllGather(s, r, static_cast<size_t>(n), ncclFloat, comm_, stream_), "all-gather"));
    return Wait(stream_, "all-gather");
  }
  Status ReduceScatter(const float* s, float* r, int64_t n, ReduceOp op) override {
    PLANNER_RETURN_IF_ERROR(After(stream_));
    PLANNER_RETURN_IF_ERROR(
        Nccl(ncclReduceScatter(s, r, static_cast<size_t>(n), ncclFloat, Op(op), comm_, stream_), "reduce-scatter"));
    return Wait(stream_, "reduce-scatter");
  }
  Status Broadcast(float* d, int64_t n, int root) override {
    PLANNER_RETURN_IF_ERROR(After(stream_));
    PLANNER_RETURN_IF_ERROR(
        Nccl(ncclBroadcast(d, d, static_cast<size_t>(n), ncclFloat, root, comm_, stream_), "broadcast"));
    return Wait(stream_, "broadcast");
  }
  Status GroupSendRecv(const std::vector<P2POp>& ops) override {
    for (const auto& o : ops) {
      if (o.peer < 0 || o.peer >= size_)
        return Status::InvalidArgument(fmt::format("send/recv peer {} outside [0, {})", o.peer, size_));
    }
    PLANNER_RETURN_IF_ERROR(After(stream_));
    PLANNER_RETURN_IF_ERROR(Nccl(ncclGroupStart(), "group start"));
    for (const auto& o : ops) {
      if (o.send)
        PLANNER_RETURN_IF_ERROR(
            Nccl(ncclSend(o.data, static_cast<size_t>(o.count), ncclFloat, o.peer, comm_, stream_), "send"));
      else
        PLANNER_RETURN_IF_ERROR(
            Nccl(ncclRecv(o.data, static_cast<size_t>(o.count), ncclFloat, o.peer, comm_, stream_), "recv"));
    }
    PLANNER_RETURN_IF_ERROR(Nccl(ncclGroupEnd(), "group end"));
    return Wait(stream_, "send/recv");
  }
  // One group of ncclSend / ncclRecv, one per peer with a nonzero count (this rank included: NCCL
  // copies a self-send). The group is always closed, also after a failed call inside it.
  Status AllToAllV(const float* s, const std::vector<int64_t>& send_counts, const std::vector<int64_t>& send_displs,
                   float* r, const std::vector<int64_t>& recv_counts,
                   const std::vector<int64_t>& recv_displs) override {
    PLANNER_RETURN_IF_ERROR(CheckAllToAllV(size_, send_counts, send_displs, recv_counts, recv_displs));
    PLANNER_RETURN_IF_ERROR(After(stream_));
    PLANNER_RETURN_IF_ERROR(Nccl(ncclGroupStart(), "group start"));
    Status posted = Status::OK();
    for (size_t j = 0; j < send_counts.size() && posted.ok(); ++j) {
      const int peer = static_cast<int>(j);
      if (send_counts[j] > 0) {
        posted =
            Nccl(ncclSend(s + send_displs[j], static_cast<size_t>(send_counts[j]), ncclFloat, peer, comm_, stream_),
                 "all-to-all send");
      }
      if (posted.ok() && recv_counts[j] > 0) {
        posted =
            Nccl(ncclRecv(r + recv_displs[j], static_cast<size_t>(recv_counts[j]), ncclFloat, peer, comm_, stream_),
                 "all-to-all recv");
      }
    }
    const Status ended = Nccl(ncclGroupEnd(), "group end");
    PLANNER_RETURN_IF_ERROR(posted);
    PLANNER_RETURN_IF_ERROR(ended);
    return Wait(stream_, "all-to-all");
  }
  Status Barrier() override { return AllReduce(static_cast<float*>(scratch_), 1, ReduceOp::kSum); }
  // NCCL has no tags: sends go in order on their own stream; receives wait on the main stream.
  Status Send(const float* d, int64_t n, int peer, int64_t) override {
    PLANNER_RETURN_IF_ERROR(After(send_stream_));
    return Nccl(ncclSend(d, static_cast<size_t>(n), ncclFloat, peer, comm_, send_stream_), "send");
  }
  Status Recv(float* d, int64_t n, int peer, int64_t) override {
    PLANNER_RETURN_IF_ERROR(After(stream_));
    PLANNER_RETURN_IF_ERROR(Nccl(ncclRecv(d, static_cast<size_t>(n), ncclFloat, peer, comm_, stream_), "recv"));
    return Wait(stream_, "recv");
  }
  Status FlushSends() override { return Wait(send_stream_, "send"); }
  Status Synchronize() override { return Wait(stream_, "synchronize"); }
  Status Split(int color, int key, std::unique_ptr<Communicator>* out) override {
    ncclComm_t c;
    PLANNER_RETURN_IF_ERROR(Nccl(ncclCommSplit(comm_, color, key, &c, nullptr), "comm split"));
    int r = 0, n = 0;
    ncclCommUserRank(c, &r);
    ncclCommCount(c, &n);
    cudaStream_t s;
    PLANNER_RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
    auto x = std::make_unique<NcclComm>(c, s, r, n);
    x->set_timeout_seconds(timeout_s_);
    *out = std::move(x);
    return Status::OK();
  }

 private:
  // The kernels run on the legacy default stream and NCCL on its own non-blocking streams, which
  // do not wait for it: each operation first makes its stream wait for every kernel launched so
  // far (the data it sends, reduces or overwrites). Its results are used after Wait() returns.
  Status After(cudaStream_t s) {
    PLANNER_RETURN_IF_ERROR(Cuda(cudaEventRecord(ready_, cudaStreamLegacy), "cudaEventRecord"));
    return Cuda(cudaStreamWaitEvent(s, ready_, 0), "cudaStreamWaitEvent");
  }
  // Polls the stream and NCCL's asynchronous error until done; aborts past the timeout.
  Status Wait(cudaStream_t s, const char* what) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    while (true) {
      cudaError_t q = cudaStreamQuery(s);
      if (q == cudaSuccess) return Status::OK();
      if (q != cudaErrorNotReady) return Cuda(q, what);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(comm_);
        aborted_ = true;
        return Status::CommError(
            fmt::format("NCCL {} on rank {} of {}: {}", what, rank_, size_, ncclGetErrorString(async)));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ncclCommAbort(comm_);
        aborted_ = true;
        return Status::CommError(fmt::format(
            "NCCL {} on rank {} of {} timed out after {:.0f} s: a peer rank died or is stuck; communicator aborted",
            what, rank_, size_, timeout_s_));
      }
      std::this_thread::yield();
    }
  }
  ncclComm_t comm_;
  cudaStream_t stream_, send_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  void* scratch_ = nullptr;
  int rank_, size_;
  bool aborted_ = false;
};

}  // namespace

std::string NcclVersion() {
  int v = 0;
  ncclGetVersion(&v);
  return fmt::format("NCCL {}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

Status MakeNcclComm(Communicator* bootstrap, int device, std::unique_ptr<Communicator>* out) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Status::Unavailable("no CUDA device: the NCCL backend needs one GPU per rank");
  }
  PLANNER_RETURN_IF_ERROR(Cuda(cudaSetDevice(device % count), "cudaSetDevice"));
  const int rank = bootstrap ? bootstrap->rank() : 0, size = bootstrap ? bootstrap->size() : 1;
  ncclUniqueId id;
  if (rank == 0) PLANNER_RETURN_IF_ERROR(Nccl(ncclGetUniqueId(&id), "get unique id"));
  if (bootstrap) {
    // The id's bytes travel as floats (bit copies; MPI and the threads backend do not convert them).
    float buf[(sizeof(ncclUniqueId) + sizeof(float) - 1) / sizeof(float)] = {};
    if (rank == 0) std::memcpy(buf, &id, sizeof id);
    PLANNER_RETURN_IF_ERROR(bootstrap->Broadcast(buf, static_cast<int64_t>(sizeof buf / sizeof(float)), 0));
    std::memcpy(&id, buf, sizeof id);
  }
  ncclComm_t c;
  PLANNER_RETURN_IF_ERROR(Nccl(ncclCommInitRank(&c, size, id, rank), "comm init"));
  cudaStream_t s;
  PLANNER_RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
  *out = std::make_unique<NcclComm>(c, s, rank, size);
  return Status::OK();
}

}  // namespace planner

extern "C" __attribute__((visibility("default"))) const planner::PlannerNcclApi* planner_nccl_api_v1() {
  static const planner::PlannerNcclApi api = {planner::kPlannerNcclApiVersion, sizeof(planner::PlannerNcclApi),
                                              planner::NcclVersion, planner::MakeNcclComm};
  return &api;
}
