// What the layer kernels' files share (runtime/kernels/layers*.cc): input and device checks,
// parameter makers, the two kernels every family holds (Linear and Elementwise, defined in
// layers_dense.cc), the transformer's and the MoE's configurations, and each family's factories,
// which BuildKernel (layers.cc) calls. Internal to runtime/kernels/ (HACKING.md, "How to add a
// kernel"); everything else builds kernels through MakeKernel (kernel.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/kernels/device_ops.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/shards.h"
#include "spec/layer.h"

namespace planner::kernels_internal {

// ---------------------------------------------------------------- helpers (layers.cc)
int64_t Product(const std::vector<int64_t>& v);
std::vector<int64_t> WithBatch(int64_t b, const std::vector<int64_t>& shape);  // [b, shape...]
// x must be [b, shape...]; returns b.
Status CheckShape(const char* what, const Tensor& x, const std::vector<int64_t>& shape, int64_t* b);
// x must be on the kernel's device.
Status CheckDevice(const char* what, const DeviceOps& ops, const Tensor& x);
// Both.
Status CheckInput(const char* what, const DeviceOps& ops, const Tensor& x, const std::vector<int64_t>& shape,
                  int64_t* b);
// A parameter with the given host values (moved to the device) and a zero gradient.
Param MakeParam(const DeviceOps& ops, const std::string& name, const Tensor& host);
// ... with every value `value`.
Param FilledParam(const DeviceOps& ops, const std::string& name, const std::vector<int64_t>& shape, float value);
// ... with FillUniform's values.
Param UniformParam(const DeviceOps& ops, const std::string& name, const std::vector<int64_t>& shape, uint64_t seed,
                   float scale);
// Sums t over the TP group (nothing without one).
Status AllReduceSum(TpGroup* group, Tensor* t);
// MLA / MoE (CPU): dst[r, d0 : d0 + w] = src[r, c0 : c0 + w] (add: +=) for n rows of row lengths lds and ldd.
void CopyCols(const float* src, int64_t lds, int64_t c0, float* dst, int64_t ldd, int64_t d0, int64_t w, int64_t n,
              bool add = false);
// Column-parallel cut of a per-head weight [heads x per, in]: rank r keeps heads [r heads/t, (r+1) heads/t).
WeightSlice HeadRows(int64_t in, int64_t heads, int64_t per, const KernelOptions& o);
// Row-parallel cut of the output projection [hidden, heads x v]: rank r keeps its heads' columns.
WeightSlice HeadCols(int64_t hidden, int64_t heads, int64_t v, const KernelOptions& o);

// ---------------------------------------------------------------- linear (layers_dense.cc)
// y = x W^T + b over the last dimension; W is [out, in].
class Linear final : public LayerKernel {
 public:
  Linear(DeviceOps* ops, const std::string& name, int64_t in, int64_t out, bool bias, int64_t tokens_per_sample,
         uint64_t seed, const WeightSlice& slice = {});
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override;
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override;
  Status BackwardWeight(Saved* s) override;
  std::vector<Param*> Params() override;
  KernelFlops Flops(int64_t b) const override;

 private:
  DeviceOps* ops_;
  int64_t in_, out_, tokens_;
  Param w_, b_;
};

// ---------------------------------------------------------------- elementwise (layers_dense.cc)
class Elementwise final : public LayerKernel {
 public:
  enum Kind { kRelu, kGelu, kDropout, kRelu2 };
  Elementwise(DeviceOps* ops, Kind k, std::vector<int64_t> shape, double p, uint64_t seed);
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override;
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override;
  Status BackwardWeight(Saved*) override { return Status::OK(); }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  const char* Name() const {
    return kind_ == kRelu ? "relu" : (kind_ == kGelu ? "gelu" : (kind_ == kRelu2 ? "relu2" : "dropout"));
  }
  Activation Act() const {
    return kind_ == kRelu ? Activation::kRelu : (kind_ == kRelu2 ? Activation::kRelu2 : Activation::kGelu);
  }
  DeviceOps* ops_;
  Kind kind_;
  std::vector<int64_t> shape_;
  double p_;
  uint64_t seed_, calls_ = 0;
};

// ---------------------------------------------------------------- dense (layers_dense.cc)
// LayerNorm, or RMSNorm (rms), over the last dimension.
std::unique_ptr<LayerKernel> MakeNorm(DeviceOps* ops, const std::string& name, std::vector<int64_t> shape, bool rms);
std::unique_ptr<LayerKernel> MakeEmbedding(DeviceOps* ops, const std::string& name, int64_t seq, int64_t vocab,
                                           int64_t hidden, int64_t positions, const KernelOptions& o);
// shape: the rank's logits
std::unique_ptr<LayerKernel> MakeLoss(DeviceOps* ops, std::vector<int64_t> shape, const KernelOptions& o);
std::unique_ptr<LayerKernel> MakeFlatten(DeviceOps* ops, std::vector<int64_t> in);

// ---------------------------------------------------------------- convolution (layers_conv.cc)
std::unique_ptr<LayerKernel> MakeConv2d(DeviceOps* ops, const std::string& name, const std::vector<int64_t>& in,
                                        int64_t cout, int64_t k, int64_t stride, int64_t pad, bool bias, uint64_t seed);
std::unique_ptr<LayerKernel> MakePool(DeviceOps* ops, bool max, const std::vector<int64_t>& in, int64_t k,
                                      int64_t stride, int64_t pad);

// ---------------------------------------------------------------- transformer (layers_attention.cc)
// Multi-head latent attention's dimensions (kv_lora > 0: on).
struct MlaDims {
  int64_t q_lora = 0, kv_lora = 0, rope = 0, nope = 0, v = 0;
};

// What a transformer's attention and MLP are made of (docs/runtime.md, "Llama-class layers").
struct TransformerConfig {
  int64_t heads = 1, kv_heads = 1, ffn = 0;
  bool bias = true;   // QKV, output, fc1, fc2 biases (Megatron GPT); Llama: none
  bool rope = false;  // rotary embedding on Q and K
  double rope_theta = 10000;
  Elementwise::Kind act = Elementwise::kGelu;  // kGelu or kRelu2; swiglu: gated
  bool gated = false;                          // SwiGLU: fc1 [2 ffn, h] = gate and up halves
  bool rms = false;                            // the block's norms: RMSNorm (else LayerNorm)
  MlaDims mla;                                 // kv_lora > 0: multi-head latent attention (DeepSeek-V2/V3)
};

// The attributes of an attention, mlp or transformer_block layer (ATTRS.md's names and defaults),
// checked against the TP degree t.
Status ReadTransformerConfig(const Layer& l, int64_t t, TransformerConfig* c);
// GQA attention, or MLA when c.mla.kv_lora > 0.
std::unique_ptr<LayerKernel> MakeAttention(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden,
                                           const TransformerConfig& c, const KernelOptions& o);
std::unique_ptr<LayerKernel> MakeMlp(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden,
                                     const TransformerConfig& c, const KernelOptions& o);
// Pre-norm block: y = r + mlp(norm2(r)), r = x + attn(norm1(x)) (rms: RMSNorm, else LayerNorm).
std::unique_ptr<LayerKernel> MakeTransformerBlock(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden,
                                                  bool rms, std::unique_ptr<LayerKernel> attn,
                                                  std::unique_ptr<LayerKernel> mlp);

// ---------------------------------------------------------------- MoE (layers_moe.cc)
struct MoeConfig {
  int64_t experts = 2, top_k = 1, expert_ffn = 0, shared_ffn = 0, groups = 0, group_limit = 0;
  bool sigmoid = false;  // router: sigmoid scores (DeepSeek-V3), else softmax (Mixtral)
  double aux_loss = 0;   // coefficient of the Switch-style load-balancing loss (0: none)
};

// The attributes of a moe_block (MOE.md's names and defaults), checked against the EP and TP degrees.
Status ReadMoeConfig(const Layer& l, const KernelOptions& o, MoeConfig* m);
// A moe_block's MoE feed-forward (routed experts over the EP group, the shared experts' MLP).
std::unique_ptr<LayerKernel> MakeMoeFfn(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden,
                                        const TransformerConfig& c, const MoeConfig& m, const KernelOptions& o);

}  // namespace planner::kernels_internal
