#include "runtime/rank_comms.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/timing.h"
#include "runtime/comm/nccl_comm.h"
#include "runtime/kernels/cuda_api.h"

namespace planner {

namespace {

// The group (from launch.yaml) holding `rank`; -1 if none.
int GroupOf(const std::vector<std::vector<int64_t>>& groups, int64_t rank) {
  for (size_t g = 0; g < groups.size(); ++g) {
    if (std::find(groups[g].begin(), groups[g].end(), rank) != groups[g].end()) return static_cast<int>(g);
  }
  return -1;
}

}  // namespace

Status CommTpGroup::Timed(float* d, int64_t n, ReduceOp op) {
  const double t0 = MonotonicSeconds();
  Status s = c_->AllReduce(d, n, op);
  log_->push_back({iteration_, seq_++, n * 4, MonotonicSeconds() - t0});
  return s;
}

Status CommExpertGroup::AllToAllV(const float* send, const std::vector<int64_t>& send_counts,
                                  const std::vector<int64_t>& send_displs, float* recv,
                                  const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs) {
  const double t0 = MonotonicSeconds();
  Status s = c_->AllToAllV(send, send_counts, send_displs, recv, recv_counts, recv_displs);
  if (log_) log_->push_back(MonotonicSeconds() - t0);
  return s;
}

Status OpenRankComms(const LaunchPlan& L, Device dev, Communicator& world, RankComms* out, Communicator* job) {
  const int64_t rank = world.rank();
  const LaunchRank& me = L.ranks[static_cast<size_t>(rank)];
  out->world = &world;
  out->pipe = &world;
  if (dev == Device::kCuda) {
    std::string why;
    const int count = CudaDeviceCount(&why);
    if (count == 0) return Status::Unavailable(fmt::format("{}: device cuda: {}", L.path, why));
    CudaSetDevice(static_cast<int>(me.local_device % count));
    if (world.size() > 1) {
      PLANNER_RETURN_IF_ERROR(MakeNcclComm(&world, static_cast<int>(me.local_device % count), &out->nccl));
      out->nccl->set_timeout_seconds(L.run.timeout_s);
      out->pipe = out->nccl.get();
    }
  }
  PLANNER_RETURN_IF_ERROR(out->pipe->Split(GroupOf(L.tp_groups, rank), static_cast<int>(rank), &out->tp));
  PLANNER_RETURN_IF_ERROR(out->pipe->Split(GroupOf(L.dp_groups, rank), static_cast<int>(rank), &out->dp));
  out->tp->set_timeout_seconds(L.run.timeout_s);
  out->dp->set_timeout_seconds(L.run.timeout_s);
  if (L.cp > 1) {
    PLANNER_RETURN_IF_ERROR(out->pipe->Split(GroupOf(L.cp_groups, rank), static_cast<int>(rank), &out->cp));
    out->cp->set_timeout_seconds(L.run.timeout_s);
  }
  if (L.ep > 1) {
    PLANNER_RETURN_IF_ERROR(out->pipe->Split(GroupOf(L.ep_groups, rank), static_cast<int>(rank), &out->ep));
    PLANNER_RETURN_IF_ERROR(out->pipe->Split(GroupOf(L.edp_groups, rank), static_cast<int>(rank), &out->edp));
    out->ep->set_timeout_seconds(L.run.timeout_s);
    out->edp->set_timeout_seconds(L.run.timeout_s);
  }
  PLANNER_RETURN_IF_ERROR(StartPeerWatch(job != nullptr ? *job : world));
  return ClockOffset(world, 8, &out->clock_offset_s, &out->clock_error_s);
}

}  // namespace planner
