// What every backend shares: AllToAllV's argument checks and the equal-count AllToAll.
#include "runtime/comm/communicator.h"

#include <utility>

#include <fmt/format.h>

namespace planner {

Status CheckAllToAllV(int size, const std::vector<int64_t>& send_counts, const std::vector<int64_t>& send_displs,
                      const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs) {
  const std::pair<const char*, const std::vector<int64_t>*> vecs[4] = {{"send_counts", &send_counts},
                                                                       {"send_displs", &send_displs},
                                                                       {"recv_counts", &recv_counts},
                                                                       {"recv_displs", &recv_displs}};
  for (const auto& [name, v] : vecs) {
    if (static_cast<int64_t>(v->size()) != size) {
      return Status::InvalidArgument(
          fmt::format("all-to-all: {} has {} entries; the group has {} ranks", name, v->size(), size));
    }
    for (size_t j = 0; j < v->size(); ++j) {
      if ((*v)[j] < 0)
        return Status::InvalidArgument(fmt::format("all-to-all: {}[{}] is {}; must be 0 or more", name, j, (*v)[j]));
    }
  }
  return Status::OK();
}

Status Communicator::AllToAll(const float* send, float* recv, int64_t count) {
  if (count < 0) return Status::InvalidArgument(fmt::format("all-to-all: count {} is negative", count));
  const size_t n = static_cast<size_t>(size());
  std::vector<int64_t> counts(n, count), displs(n);
  for (size_t j = 0; j < n; ++j) displs[j] = static_cast<int64_t>(j) * count;
  return AllToAllV(send, counts, displs, recv, counts, displs);
}

}  // namespace planner
