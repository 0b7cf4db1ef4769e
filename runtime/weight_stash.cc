#include "runtime/weight_stash.h"

#include <filesystem>

#include <fmt/format.h>

#include "common/file_writer.h"
#include "runtime/stage.h"

namespace planner {

std::vector<float> WeightStash::Snapshot() const {
  std::vector<float> v;
  for (Param* prm : params_) {
    std::vector<float> x = prm->value.ToVector();
    v.insert(v.end(), x.begin(), x.end());
  }
  return v;
}

void WeightStash::Restore(const std::vector<float>& v) {
  size_t off = 0;
  for (Param* prm : params_) {
    const size_t n = static_cast<size_t>(prm->value.numel());
    CopyIntoTensor(std::vector<float>(v.begin() + static_cast<long>(off), v.begin() + static_cast<long>(off + n)), &prm->value);
    off += n;
  }
}

double WeightStash::Checksum() const {
  double sum = 0;
  for (Param* prm : params_) {
    std::vector<float> x = prm->value.ToVector();
    for (size_t i = 0; i < x.size(); ++i) sum += static_cast<double>(x[i]) * static_cast<double>(i % 7 + 1);
  }
  return sum;
}

void WeightStash::Save(int64_t j) {
  stash_[j] = Snapshot();
  stash_sum_[j] = Checksum();
}

Status WeightStash::Enter(int64_t j) {
  auto it = stash_.find(j);
  if (it == stash_.end()) return Status::Internal(fmt::format("weight stash: backward of microbatch {} without its forward's stash", j));
  latest_ = Snapshot();
  const double latest_sum = Checksum();
  Restore(it->second);
  const double used = Checksum();
  ++counts_.backward_passes;
  counts_.mismatches += used != stash_sum_[j];
  counts_.stale += latest_sum != stash_sum_[j];
  return Status::OK();
}

void WeightStash::Leave(int64_t j) {
  Restore(latest_);
  stash_.erase(j);
  stash_sum_.erase(j);
}

Status WriteStashCounts(Communicator& world, const StashCounts& mine, const std::string& run_dir, StashCounts* total) {
  float c[3] = {static_cast<float>(mine.backward_passes), static_cast<float>(mine.mismatches), static_cast<float>(mine.stale)};
  PLANNER_RETURN_IF_ERROR(world.AllReduce(c, 3, ReduceOp::kSum));
  *total = {static_cast<int64_t>(c[0]), static_cast<int64_t>(c[1]), static_cast<int64_t>(c[2])};
  if (world.rank() != 0) return Status::OK();
  return WriteFileAtomic((std::filesystem::path(run_dir) / "weight_stashing.txt").string(),
                         fmt::format("backward passes {}\nforward/backward on different weight versions {}\n"
                                     "backward passes whose latest weights were newer than their stash {}\n",
                                     c[0], c[1], c[2]));
}

}  // namespace planner
