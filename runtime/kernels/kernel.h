// Layer kernels: forward, backward-input ("B") and backward-weight ("W") of
// one layer, kept separate so zero-bubble schedules can plan and run them
// apart. Kernels hold only parameters and their gradients; everything a
// microbatch needs between its passes lives in a Saved object that the
// caller owns, so any number of microbatches can be in flight (1F1B, GPipe,
// PipeDream's weight stashing).
//
//   Saved s;
//   k->Forward(x, &y, &s);          // s keeps what backward needs
//   k->BackwardInput(dy, &dx, &s);  // dx; s keeps what W needs
//   k->BackwardWeight(&s);          // accumulates into the gradients; s may be dropped
//
// Tensor-parallel shards (Megatron: column-parallel QKV / fc1 / vocab,
// row-parallel output / fc2) are built with KernelOptions::tp_size > 1 and
// call the TpGroup for their all-reduces; with no group (profiling a shard)
// the all-reduces are skipped and timed separately as collectives.
// Thread-compatible: one kernel per thread.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/kernels/tensor.h"
#include "spec/layer.h"

namespace planner {

// The all-reduces a tensor-parallel shard needs (runtime/comm adapts a
// Communicator to it). In-place on float buffers of the kernel's device.
class TpGroup {
 public:
  virtual ~TpGroup() = default;
  virtual Status AllReduceSum(float* data, int64_t count) = 0;
  virtual Status AllReduceMax(float* data, int64_t count) = 0;
};

// The expert-parallel group of an MoE layer (runtime/rank_comms.h adapts a Communicator), with
// MOE.md's Communicator::AllToAllV signature: every rank sends send_counts[j] floats (from send at
// send_displs[j]) to rank j and receives recv_counts[j] floats from rank j into recv at recv_displs[j].
class ExpertGroup {
 public:
  virtual ~ExpertGroup() = default;
  virtual Status AllToAllV(const float* send, const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& send_displs, float* recv,
                           const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs) = 0;
};

struct Param {
  std::string name;
  Tensor value;             // the weight the model computes with: fp32, or bf16 / fp16 in a mixed-precision run
  Tensor grad;              // fp32 always (gradients accumulate over microbatches in fp32)
  Tensor master;            // fp32 master weight when `value` is 16-bit (the optimizer steps it); empty otherwise
  bool tp_sharded = false;  // each TP rank holds a different part (else a replica, equal on all TP ranks)
  bool expert =
      false;  // a routed expert's weight: held by one EP rank; gradients summed over the expert-data-parallel group
};

struct Saved {
  std::vector<Tensor> t;
  std::vector<Saved> children;  // composite layers: one per sub-kernel
  // Indices into t of exact data (token ids, targets, argmax indices, dropout masks, MoE routing
  // indices and counts): a mixed-precision run keeps them fp32, everything else in t is stored in
  // the run's 16-bit dtype (runtime/kernels/mixed_precision.h).
  std::vector<size_t> exact;
  void Clear() {
    t.clear();
    children.clear();
    exact.clear();
  }
  bool IsExact(size_t i) const {
    for (size_t e : exact)
      if (e == i) return true;
    return false;
  }
};

// Matrix FLOPs a kernel performed in its last pass (for achieved FLOP/s and
// the check against spec/'s analytic counts).
struct KernelFlops {
  double forward = 0, backward_input = 0, backward_weight = 0;
};

struct KernelOptions {
  Device device = Device::kCpu;
  int64_t tp_rank = 0;
  int64_t tp_size = 1;
  TpGroup* tp_group = nullptr;  // nullptr: shard alone, all-reduces skipped
  uint64_t seed = 1;            // parameter init and dropout masks
  bool causal = true;           // attention mask (GPT)
  // Expert parallelism (moe_block): rank ep_rank of ep holds experts [ep_rank E / ep, (ep_rank + 1) E / ep)
  // and dispatches tokens over ep_group (nullptr only when ep == 1).
  int64_t ep_rank = 0;
  int64_t ep_size = 1;
  ExpertGroup* ep_group = nullptr;
  // Expert tensor parallelism: 1 (each expert whole on its EP rank) or tp_size (each expert cut over the TP
  // group like the dense MLP; every TP rank dispatches all its tokens to the EP peers of its own TP rank).
  int64_t etp = 1;
  // Weight of one microbatch's auxiliary (load-balancing) loss in the objective the backward differentiates:
  // b / B when the loss is the global batch's mean (Megatron scales it by 1 / microbatches and averages over DP).
  double aux_loss_scale = 1.0;
  // Sequence parallelism: the token_group_size ranks that share each microbatch's sequence (each holding its
  // own tokens); an MoE layer sums its load-balancing statistics over them, so the aux loss is the sequence's.
  TpGroup* token_group = nullptr;
  int64_t token_group_size = 1;
};

class LayerKernel {
 public:
  virtual ~LayerKernel() = default;
  // x: [b, in_shape...] -> y: [b, out_shape...].
  virtual Status Forward(const Tensor& x, Tensor* y, Saved* saved) = 0;
  // dy like y -> dx like x (empty for layers whose input is token ids).
  virtual Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* saved) = 0;
  // Accumulates parameter gradients from what BackwardInput saved.
  virtual Status BackwardWeight(Saved* saved) = 0;
  virtual std::vector<Param*> Params() { return {}; }
  // Loss layers: class ids (as floats, one per row of the logits) of the
  // next Forward; kept in its Saved, so several microbatches may be in flight.
  virtual void SetTargets(const Tensor& targets) { (void)targets; }
  // Flops of one pass at microbatch b (the kernel's own count).
  virtual KernelFlops Flops(int64_t b) const = 0;
  // MoE layers: the sum of the auxiliary (load-balancing) losses of the forwards since the last call (each
  // microbatch's, unscaled), then reset; 0 for every other layer. Composite kernels add their parts'.
  virtual double TakeAuxLoss() { return 0; }
  void ZeroGrads();
};

// A kernel for `layer` (its resolved attributes and shapes). InvalidArgument
// when the TP degree does not divide what it shards; Unimplemented for a
// device the layer has no kernel on.
Status MakeKernel(const Layer& layer, const KernelOptions& options, std::unique_ptr<LayerKernel>* out);

// Composite kernels (attention, mlp, transformer_block): the parameters of
// their parts in order, and the sum of their parts' FLOPs.
std::vector<Param*> JoinParams(std::initializer_list<LayerKernel*> parts);
KernelFlops SumFlops(std::initializer_list<const LayerKernel*> parts, int64_t b);

// A pre-norm block's four parts: norm1, attention, norm2 and the feed-forward, children 0-3 of
// its Saved. What every block kernel (runtime/kernels' TransformerBlock, sequence parallelism's
// SeqBlock) does the same with them: weight gradients, parameters, FLOPs, the feed-forward's aux loss.
class PreNormBlockKernel : public LayerKernel {
 public:
  Status BackwardWeight(Saved* sv) override;
  std::vector<Param*> Params() override { return JoinParams({ln1_.get(), attn_.get(), ln2_.get(), mlp_.get()}); }
  KernelFlops Flops(int64_t b) const override { return SumFlops({attn_.get(), mlp_.get()}, b); }
  double TakeAuxLoss() override { return mlp_->TakeAuxLoss(); }

 protected:
  std::unique_ptr<LayerKernel> ln1_, attn_, ln2_, mlp_;
};

// Threads of the CPU kernels (Eigen's GEMMs and our loops); 1 by default.
void SetCpuThreads(int threads);
int CpuThreads();

// Deterministic uniform(-scale, scale) fill from a seed.
void FillUniform(Tensor* t, uint64_t seed, float scale);

}  // namespace planner
