#include "runtime/stage.h"

#include <algorithm>

#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/mixed_precision.h"

namespace planner {

void CopyIntoTensor(const std::vector<float>& v, Tensor* t) {
  if (t->device() == Device::kCpu) std::copy(v.begin(), v.end(), t->data());
  else CudaCopyToDevice(t->data(), v.data(), static_cast<int64_t>(v.size()) * 4);
}

DType Stage::storage() const { return model_ == nullptr ? DType::kFp32 : StorageDType(model_->dtype); }

Status Stage::Build(const LaunchPlan& L, const ModelSpec& model, const LaunchLayout& layout, int64_t rank, Device dev,
                    TpGroup* tp_group, const SeqParallel& seq, ExpertGroup* ep_group) {
  launch_ = &L;
  seq_ = seq;
  model_ = &model;
  device_ = dev;
  positions_ = layout.positions;
  const LaunchRank& me = L.ranks[static_cast<size_t>(rank)];
  KernelOptions base;
  base.device = dev;
  base.tp_size = L.tp;
  base.tp_rank = me.tp_rank;
  base.tp_group = L.tp > 1 ? tp_group : nullptr;
  base.ep_size = L.ep;
  base.ep_rank = L.ep > 1 ? RankInGroup(L.ep_groups, rank) : 0;
  base.ep_group = L.ep > 1 ? ep_group : nullptr;
  base.etp = L.etp;
  // A microbatch's aux loss weighs b / B in the global batch's mean loss (Megatron: 1 / microbatches, averaged over DP).
  base.aux_loss_scale =
      static_cast<double>(L.microbatch_size) / static_cast<double>(std::max<int64_t>(1, L.global_batch));
  for (int64_t c = 0; c * layout.positions < layout.stages; ++c)
    PLANNER_RETURN_IF_ERROR(BuildChunk(ChunkStage(layout.schedule, c, me.stage, layout.positions), base));
  MakeBucket();
  return Status::OK();
}

Status Stage::BuildChunk(int64_t q, const KernelOptions& base) {
  Chunk c;
  c.q = q;
  const LaunchStage& st = launch_->stages[static_cast<size_t>(q)];
  for (int64_t i = st.first_layer; i <= st.last_layer; ++i) {
    KernelOptions ko = base;
    ko.seed = launch_->run.seed * 1000003ull + static_cast<uint64_t>(i);
    std::unique_ptr<LayerKernel> k;
    const Layer& layer = model_->layers[static_cast<size_t>(i)];
    PLANNER_RETURN_IF_ERROR(seq_.active() ? MakeSeqParallelKernel(layer, ko, seq_, &k) : MakeKernel(layer, ko, &k));
    // The run's precision (docs/runtime.md, "Running in the plan's precision"): 16-bit weights with
    // fp32 masters and gradients, 16-bit activations; the loss layer's output stays fp32.
    PLANNER_RETURN_IF_ERROR(WrapMixedPrecision(StorageDType(model_->dtype), layer.kind == LayerKind::kLoss, &k));
    for (Param* prm : k->Params()) params_.push_back(prm);
    c.kernels.push_back(std::move(k));
  }
  chunks_.push_back(std::move(c));
  return Status::OK();
}

// Every gradient becomes a view into one bucket, in chunk, layer and parameter order; the routed experts'
// (summed over another group) into a second one in the same order.
void Stage::MakeBucket() {
  grad_elems_ = expert_grad_elems_ = 0;
  for (Param* prm : params_) (prm->expert ? expert_grad_elems_ : grad_elems_) += prm->grad.numel();
  bucket_ = Tensor::Zeros({std::max<int64_t>(1, grad_elems_)}, device_);
  if (expert_grad_elems_ > 0) expert_bucket_ = Tensor::Zeros({expert_grad_elems_}, device_);
  int64_t off = 0, eoff = 0;
  for (Chunk& c : chunks_) {
    c.segment.offset = off;
    for (auto& k : c.kernels) {
      BucketSegment seg{off, 0};
      for (Param* prm : k->Params()) {
        if (prm->expert) {
          prm->grad = expert_bucket_.View(eoff, prm->grad.shape());
          eoff += prm->grad.numel();
          continue;
        }
        prm->grad = bucket_.View(off, prm->grad.shape());
        off += prm->grad.numel();
      }
      seg.count = off - seg.offset;
      c.layer_segments.push_back(seg);
    }
    c.segment.count = off - c.segment.offset;
  }
}

bool Stage::Holds(int64_t q) const {
  if (q < 0 || chunks_.empty() || q / positions_ >= static_cast<int64_t>(chunks_.size())) return false;
  return chunks_[static_cast<size_t>(q / positions_)].q == q;
}

int64_t Stage::parameter_elems() const {
  int64_t n = 0;
  for (Param* prm : params_) n += prm->value.numel();
  return n;
}

std::vector<int64_t> Stage::InShape(int64_t q) const {
  const Layer& l = model_->layers[static_cast<size_t>(launch_->stages[static_cast<size_t>(q)].first_layer)];
  std::vector<int64_t> shape = {launch_->microbatch_size};
  shape.insert(shape.end(), l.in_shape.begin(), l.in_shape.end());
  if (l.kind == LayerKind::kLoss) shape.back() /= launch_->tp;
  if (seq_.active()) shape[1] /= SeqDivisor(l, true, seq_);  // the rank's share of the sequence
  return shape;
}

std::vector<int64_t> Stage::OutShape(int64_t q) const {
  const Layer& l = model_->layers[static_cast<size_t>(launch_->stages[static_cast<size_t>(q)].last_layer)];
  std::vector<int64_t> shape = {launch_->microbatch_size};
  shape.insert(shape.end(), l.out_shape.begin(), l.out_shape.end());
  if (l.kind == LayerKind::kLmHead) shape.back() /= launch_->tp;
  if (seq_.active() && l.out_shape.size() > 1) shape[1] /= SeqDivisor(l, false, seq_);
  return shape;
}

void Stage::ZeroGrads() {
  for (auto& c : chunks_) {
    for (auto& k : c.kernels) k->ZeroGrads();
  }
}

}  // namespace planner
