// The stage a rank trains: the layers of its virtual stages (chunks q = c p +
// its pipeline position, or DualPipeV's V: spec/kinds.h ChunkStage) built with runtime/kernels, their parameters with
// every gradient a view into one flat bucket (so a data-parallel reduce is
// one message with no copies, as DDP's buckets), the bucket segment of each
// layer and chunk, and the activation shapes at each virtual stage's input and
// output. Parameter seeds depend on the layer index only, so every partition
// starts from the same weights. docs/runtime.md ("The executor's parts").
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "runtime/kernels/kernel.h"
#include "runtime/launch_layout.h"
#include "runtime/sequence_parallel.h"
#include "spec/launch_plan.h"
#include "spec/model_spec.h"

namespace planner {

// Elements [offset, offset + count) of a stage's gradient bucket.
struct BucketSegment {
  int64_t offset = 0, count = 0;
};

class Stage {
 public:
  struct Chunk {
    int64_t q = 0;  // virtual stage
    std::vector<std::unique_ptr<LayerKernel>> kernels;
    std::vector<BucketSegment> layer_segments;  // per kernel
    BucketSegment segment;                      // the chunk's
  };

  // Builds the chunks of `rank` (its position, tp rank) on `device`; `tp_group` is handed to the
  // kernels when the launch has tensor parallelism; with sequence or context parallelism
  // (seq.active()) the kernels of runtime/sequence_parallel.h on the rank's share of the sequence.
  // With ep > 1 the MoE layers hold the rank's experts (its index in launch.yaml's expert_parallel group) and
  // dispatch over `ep_group`; their gradients live in a second bucket (expert_bucket), summed over the
  // expert-data-parallel group instead of the data-parallel one.
  Status Build(const LaunchPlan& launch, const ModelSpec& model, const LaunchLayout& layout, int64_t rank,
               Device device, TpGroup* tp_group, const SeqParallel& seq = {}, ExpertGroup* ep_group = nullptr);

  Device device() const { return device_; }
  // The dtype activations and their gradients travel in between stages (StorageDType of the model's precision).
  DType storage() const;
  bool Holds(int64_t q) const;
  Chunk& ChunkOf(int64_t q) { return chunks_[static_cast<size_t>(q / positions_)]; }
  std::vector<Chunk>& chunks() { return chunks_; }
  const std::vector<Param*>& params() const { return params_; }
  int64_t parameter_elems() const;
  // The flat gradient bucket and its size (elements).
  float* bucket() { return bucket_.data(); }
  int64_t grad_elems() const { return grad_elems_; }
  // The routed experts' gradients (MoE), after the bucket's; empty without experts.
  float* expert_bucket() { return expert_bucket_.data(); }
  int64_t expert_grad_elems() const { return expert_grad_elems_; }
  // Activation shapes [b, ...] at virtual stage q's input and output (TP shards of the logits).
  std::vector<int64_t> InShape(int64_t q) const;
  std::vector<int64_t> OutShape(int64_t q) const;
  const SeqParallel& seq() const { return seq_; }
  void ZeroGrads();

 private:
  Status BuildChunk(int64_t q, const KernelOptions& base);
  void MakeBucket();

  const LaunchPlan* launch_ = nullptr;
  const ModelSpec* model_ = nullptr;
  Device device_ = Device::kCpu;
  SeqParallel seq_;
  int64_t positions_ = 1;
  std::vector<Chunk> chunks_;
  std::vector<Param*> params_;
  Tensor bucket_, expert_bucket_;
  int64_t grad_elems_ = 0, expert_grad_elems_ = 0;
};

// Host values into a tensor of either device (sizes must match).
void CopyIntoTensor(const std::vector<float>& values, Tensor* t);

}  // namespace planner
