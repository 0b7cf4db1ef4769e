#include "runtime/weight_stash.h"

#include <algorithm>
#include <filesystem>
#include <set>

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
    CopyIntoTensor(std::vector<float>(v.begin() + static_cast<long>(off), v.begin() + static_cast<long>(off + n)),
                   &prm->value);
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

void WeightStash::Begin(int64_t applied) {
  latest_version_ = last_tag_ = applied;
  versions_.clear();
  if (vsync_) versions_[applied] = std::make_shared<const std::vector<float>>(Snapshot());
}

int64_t WeightStash::TagOf(int64_t j) const {
  auto it = record_of_.find(j);
  return it == record_of_.end() ? -1 : records_[it->second].tag;
}

Status WeightStash::Save(int64_t j, int64_t tag) {
  VersionRecord r;
  r.microbatch = j, r.stage = stage_, r.replica = replica_, r.tag = vsync_ ? tag : -1;
  r.forward_version = latest_version_;
  Weights w;
  if (vsync_) {
    // The newest version holding no more minibatches than the tag (a stage of r replicas has every r-th).
    auto it = versions_.upper_bound(tag);
    if (tag > latest_version_ || it == versions_.begin()) {
      return Status::NotFound(
          fmt::format("vertical sync: stage {} has no weight version {} for microbatch {} (latest {}, oldest kept {})",
                      stage_, tag, j, latest_version_, versions_.empty() ? -1 : versions_.begin()->first));
    }
    --it;
    r.forward_version = it->first;
    w = it->second;
    last_tag_ = tag;
    if (it->first != latest_version_) {
      latest_ = Snapshot();
      Restore(*w);
      swapped_ = true;
    }
  } else {
    w = std::make_shared<const std::vector<float>>(Snapshot());
  }
  r.forward_sum = Checksum();
  stash_[j] = std::move(w);
  record_of_[j] = records_.size();
  records_.push_back(r);
  return Status::OK();
}

void WeightStash::AfterForward(bool last) {
  forwards_left_ = !last;
  if (!swapped_) return;
  Restore(latest_);
  swapped_ = false;
}

Status WeightStash::Enter(int64_t j) {
  auto it = stash_.find(j);
  if (it == stash_.end())
    return Status::Internal(fmt::format("weight stash: backward of microbatch {} without its forward's stash", j));
  latest_ = Snapshot();
  const double latest_sum = Checksum();
  Restore(*it->second);
  VersionRecord& r = records_[record_of_[j]];
  r.backward_sum = Checksum();
  r.backward_version = r.forward_version;  // the stash holds the forward's weights; the checksums prove it
  r.latest_version = latest_version_;
  ++counts_.backward_passes;
  counts_.mismatches += r.backward_sum != r.forward_sum;
  counts_.stale += latest_sum != r.forward_sum;
  return Status::OK();
}

void WeightStash::Leave(int64_t j) {
  Restore(latest_);
  stash_.erase(j);
  Prune();
}

void WeightStash::Stepped() {
  latest_version_ += step_;
  if (vsync_) versions_[latest_version_] = std::make_shared<const std::vector<float>>(Snapshot());
  Prune();
}

// Vertical sync: no minibatch in flight here or still to come carries a tag below `floor` (the tags
// of the stage's in-flight minibatches and the last one received, the input stage's versions only
// growing; after the rank's last forward, its in-flight ones only), so of the versions up to it only the newest can still be used. Either way the peak counts
// the distinct versions held (the latest included).
void WeightStash::Prune() {
  if (vsync_) {
    int64_t floor = forwards_left_ ? last_tag_ : latest_version_;
    for (const auto& [j, w] : stash_) floor = std::min(floor, records_[record_of_[j]].tag);
    auto keep = versions_.upper_bound(floor);
    if (keep != versions_.begin()) --keep;
    versions_.erase(versions_.begin(), keep);
    peak_versions_ = std::max<int64_t>(peak_versions_, static_cast<int64_t>(versions_.size()));
    return;
  }
  std::set<int64_t> held = {latest_version_};
  for (const auto& [j, w] : stash_) held.insert(records_[record_of_[j]].forward_version);
  peak_versions_ = std::max<int64_t>(peak_versions_, static_cast<int64_t>(held.size()));
}

Status WriteStashCounts(Communicator& world, const StashCounts& mine, const std::string& run_dir, StashCounts* total) {
  float c[3] = {static_cast<float>(mine.backward_passes), static_cast<float>(mine.mismatches),
                static_cast<float>(mine.stale)};
  PLANNER_RETURN_IF_ERROR(world.AllReduce(c, 3, ReduceOp::kSum));
  *total = {static_cast<int64_t>(c[0]), static_cast<int64_t>(c[1]), static_cast<int64_t>(c[2])};
  if (world.rank() != 0) return Status::OK();
  return WriteFileAtomic((std::filesystem::path(run_dir) / "weight_stashing.txt").string(),
                         fmt::format("backward passes {}\nforward/backward on different weight versions {}\n"
                                     "backward passes whose latest weights were newer than their stash {}\n",
                                     c[0], c[1], c[2]));
}

namespace {

// Per run microbatch and stage: the version its forward used (-1: not on this rank), and per stage
// the peak versions held; then the maxima over ranks (a microbatch runs on one replica of a stage).
Status GatherVersions(Communicator& world, const WeightStash* mine, int64_t Q, int64_t M, std::vector<float>* used,
                      std::vector<float>* peak) {
  used->assign(static_cast<size_t>(Q * M), -1.0f);
  peak->assign(static_cast<size_t>(Q), 0.0f);
  if (mine != nullptr) {
    for (const VersionRecord& r : mine->records()) {
      if (r.microbatch < M && r.stage < Q)
        (*used)[static_cast<size_t>(r.microbatch * Q + r.stage)] = static_cast<float>(r.forward_version);
    }
    (*peak)[static_cast<size_t>(mine->stage())] = static_cast<float>(mine->peak_versions());
  }
  PLANNER_RETURN_IF_ERROR(world.AllReduce(used->data(), Q * M, ReduceOp::kMax));
  return world.AllReduce(peak->data(), Q, ReduceOp::kMax);
}

}  // namespace

Status WriteVersionSummary(Communicator& world, const WeightStash* mine, bool vertical_sync, int64_t Q, int64_t M,
                           const std::string& run_dir, VersionSummary* out) {
  std::vector<float> used, peak;
  PLANNER_RETURN_IF_ERROR(GatherVersions(world, mine, Q, M, &used, &peak));
  float off_tag = 0;
  if (mine != nullptr) {
    // Also counted: a tag between a replicated stage's rounds (its version the round below; 1-2-1's middle stage).
    for (const VersionRecord& r : mine->records()) off_tag += vertical_sync && r.forward_version != r.tag;
  }
  PLANNER_RETURN_IF_ERROR(world.AllReduce(&off_tag, 1, ReduceOp::kSum));
  VersionSummary s;
  s.off_tag = static_cast<int64_t>(off_tag);
  for (int64_t j = 0; j < M; ++j) {
    const float* v = &used[static_cast<size_t>(j * Q)];
    if (std::find(v, v + Q, -1.0f) != v + Q) continue;
    ++s.minibatches;
    s.split += std::any_of(v, v + Q, [&](float x) { return x != v[0]; });
    bool newer = false;
    for (int64_t q = 1; q < Q; ++q) newer = newer || v[q] > v[q - 1];
    s.later_newer += newer;
  }
  for (float p : peak) s.peak_versions.push_back(static_cast<int64_t>(p));
  if (out) *out = s;
  if (world.rank() != 0) return Status::OK();
  std::string t = fmt::format(
      "vertical sync {}\nminibatches {}\nminibatches whose stages ran on different weight versions {}\n"
      "of them with a later stage on a newer version {}\nforwards not on their tag's version {}\n",
      vertical_sync ? "on" : "off", s.minibatches, s.split, s.later_newer, s.off_tag);
  for (int64_t q = 0; q < Q; ++q)
    t += fmt::format("stage {}: weight versions held at most {}\n", q, s.peak_versions[static_cast<size_t>(q)]);
  return WriteFileAtomic((std::filesystem::path(run_dir) / "vertical_sync.txt").string(), t);
}

}  // namespace planner
