// NCCL backend on one GPU (one rank): every collective with exact values on
// device buffers. Exits 77 (skipped) without a device or without NCCL.
// Multi-rank NCCL needs several GPUs; it is compiled in CI and not run.
#include <cstdio>
#include <vector>

#include "runtime/comm/nccl_comm.h"
#include "runtime/kernels/cuda_api.h"

using namespace planner;

int main() {
  std::string why;
  if (!NcclBuilt() || CudaDeviceCount(&why) == 0) {
    std::printf("skipped: %s\n", NcclBuilt() ? why.c_str() : "built without NCCL");
    return 77;
  }
  std::unique_ptr<Communicator> c;
  Status s = MakeNcclComm(nullptr, 0, &c);
  if (!s.ok()) {
    std::printf("FAIL: %s\n", s.message().c_str());
    return 1;
  }
  const int64_t n = 1 << 20;
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = static_cast<float>(i % 13);
  float* d = static_cast<float*>(CudaMalloc(n * 4));
  float* e = static_cast<float*>(CudaMalloc(n * 4));
  CudaCopyToDevice(d, host.data(), n * 4);
  int failures = 0;
  auto check = [&](const char* what, const float* dev) {
    std::vector<float> got(n);
    CudaCopyToHost(got.data(), dev, n * 4);
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += got[static_cast<size_t>(i)] != host[static_cast<size_t>(i)];
    std::printf("%-16s %s (%d wrong)\n", what, bad ? "FAIL" : "ok", bad);
    failures += bad != 0;
  };
  s = c->AllReduce(d, n, ReduceOp::kSum);
  check("all-reduce", d);
  s = c->Broadcast(d, n, 0);
  check("broadcast", d);
  s = c->AllGather(d, e, n);
  check("all-gather", e);
  s = c->ReduceScatter(d, e, n, ReduceOp::kSum);
  check("reduce-scatter", e);
  {  // all-to-all on one rank: the self-send (ncclSend + ncclRecv to itself in one group) into a zeroed buffer
    std::vector<float> zero(n, 0.0f);
    CudaCopyToDevice(e, zero.data(), n * 4);
    const std::vector<int64_t> counts = {n}, displs = {0};
    s = c->AllToAllV(d, counts, displs, e, counts, displs);
    if (!s.ok()) std::printf("all-to-all: %s\n", s.message().c_str()), ++failures;
    check("all-to-all", e);
    s = c->AllToAllV(d, {n, 1}, displs, e, counts, displs);
    if (s.code() != StatusCode::kInvalidArgument)
      std::printf("all-to-all with 2 counts on 1 rank: not InvalidArgument\n"), ++failures;
  }
  s = c->Barrier();
  if (!s.ok()) ++failures;
  std::printf("NCCL on 1 rank: %s\n", failures ? "FAIL" : "ok");
  CudaFree(d);
  CudaFree(e);
  return failures ? 1 : 0;
}
