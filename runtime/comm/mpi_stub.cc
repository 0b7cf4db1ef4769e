// Without MPI: no multi-process communicator.
#include "runtime/comm/communicator.h"

namespace planner {

bool MpiBuilt() { return false; }
int64_t MpiEagerLimitSet() { return 0; }
bool ConcurrentCommunicatorsSafe(const Communicator&) { return true; }
bool LaunchedUnderMpi() { return false; }
Status MakeMpiWorld(std::unique_ptr<Communicator>*, double) {
  return Status::Unavailable("built without MPI; install libopenmpi-dev and rebuild (make deps && make)");
}
Status StartPeerWatch(Communicator&) { return Status::OK(); }
void EndPeerWatch() {}
void LeaveJobAfterError(int) {}
Status MpiNodeLayout(Communicator& world, int* local_rank, int* local_size, int* nodes) {
  *local_rank = world.rank();
  *local_size = world.size();
  *nodes = 1;
  return Status::OK();
}

}  // namespace planner
