// The kernel factory: BuildKernel, one case per LayerKind (the compiler's -Wswitch names it when a kind
// is added), over the families' kernels, each written once over the leaf operations of device_ops.h:
// layers_dense.cc (linear, activations, dropout, norms, embedding, loss, flatten), layers_attention.cc
// (attention, MLA, the MLP, the transformer block), layers_moe.cc (the MoE feed-forward) and
// layers_conv.cc (conv2d, pooling); what they share is layers_internal.h, defined here. MakeKernel
// builds the same classes on the CPU and on CUDA, each holding its device's DeviceOps. A layer checks
// its inputs, allocates its outputs and what its backward keeps (Saved), composes the operations, and
// calls the TpGroup for a tensor-parallel shard's all-reduces. Derivations of every backward are in
// docs/profiler.md (the Llama-class layers': docs/runtime.md); tests/runtime/kernels_test.cc and
// llama_layers_test.cc check each against finite differences, kernels_gpu_test.cc CUDA against the CPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/layers_internal.h"

namespace planner {
namespace kernels_internal {

int64_t Product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

std::vector<int64_t> WithBatch(int64_t b, const std::vector<int64_t>& shape) {
  std::vector<int64_t> s = {b};
  s.insert(s.end(), shape.begin(), shape.end());
  return s;
}

// x must be [b, shape...]; returns b.
Status CheckShape(const char* what, const Tensor& x, const std::vector<int64_t>& shape, int64_t* b) {
  if (x.empty() || x.rank() != static_cast<int>(shape.size()) + 1 ||
      !std::equal(shape.begin(), shape.end(), x.shape().begin() + 1)) {
    std::string want = "[b";
    for (int64_t d : shape) want += ", " + std::to_string(d);
    return Status::InvalidArgument(
        fmt::format("{}: input is {}, expected {}]", what, x.empty() ? "empty" : x.ShapeString(), want));
  }
  *b = x.dim(0);
  return Status::OK();
}
Status CheckDevice(const char* what, const DeviceOps& ops, const Tensor& x) {
  if (x.device() == ops.device()) return Status::OK();
  return Status::InvalidArgument(fmt::format("{}: input is on the {}, the kernel on the {}", what,
                                             DeviceName(x.device()), DeviceName(ops.device())));
}
// ... and on the kernel's device.
Status CheckInput(const char* what, const DeviceOps& ops, const Tensor& x, const std::vector<int64_t>& shape,
                  int64_t* b) {
  PLANNER_RETURN_IF_ERROR(CheckShape(what, x, shape, b));
  return CheckDevice(what, ops, x);
}

// A parameter with the given host values (moved to the device) and a zero gradient.
Param MakeParam(const DeviceOps& ops, const std::string& name, const Tensor& host) {
  Param p;
  p.name = name;
  p.value = ops.Upload(host);
  p.grad = ops.Zeros(host.shape());
  return p;
}
Param FilledParam(const DeviceOps& ops, const std::string& name, const std::vector<int64_t>& shape, float value) {
  Tensor host = Tensor::Zeros(shape);
  if (value != 0.0f) std::fill(host.data(), host.data() + host.numel(), value);
  return MakeParam(ops, name, host);
}
Param UniformParam(const DeviceOps& ops, const std::string& name, const std::vector<int64_t>& shape, uint64_t seed,
                   float scale) {
  Tensor host = Tensor::Zeros(shape);
  FillUniform(&host, seed, scale);
  return MakeParam(ops, name, host);
}

Status AllReduceSum(TpGroup* group, Tensor* t) {
  return group ? group->AllReduceSum(t->data(), t->numel()) : Status::OK();
}

// ------------------------------------------------------------ MLA / MoE helpers (CPU)
// dst[r, d0 : d0 + w] = src[r, c0 : c0 + w] (add: +=) for n rows of row lengths lds and ldd.
void CopyCols(const float* src, int64_t lds, int64_t c0, float* dst, int64_t ldd, int64_t d0, int64_t w, int64_t n,
              bool add) {
  for (int64_t r = 0; r < n; ++r) {
    const float* s = src + r * lds + c0;
    float* d = dst + r * ldd + d0;
    if (add) {
      for (int64_t i = 0; i < w; ++i) d[i] += s[i];
    } else {
      std::memcpy(d, s, static_cast<size_t>(w) * 4);
    }
  }
}

// Column-parallel cut of a per-head weight [heads x per, in]: rank r keeps heads [r heads/t, (r+1) heads/t).
WeightSlice HeadRows(int64_t in, int64_t heads, int64_t per, const KernelOptions& o) {
  if (o.tp_size <= 1) return {};
  const int64_t hl = heads / o.tp_size;
  return {in, heads * per, IndexRange(o.tp_rank * hl * per, hl * per), 0};
}
// Row-parallel cut of the output projection [hidden, heads x v]: rank r keeps its heads' columns.
WeightSlice HeadCols(int64_t hidden, int64_t heads, int64_t v, const KernelOptions& o) {
  if (o.tp_size <= 1) return {};
  return {heads * v, hidden, {}, o.tp_rank * (heads / o.tp_size) * v};
}

namespace {

// attention, mlp, transformer_block, moe_block and moe (MLA and MoE: CPU only).
Status BuildTransformerKernel(const Layer& l, const KernelOptions& o, DeviceOps* ops,
                              std::unique_ptr<LayerKernel>* out) {
  const auto& in = l.in_shape;
  TransformerConfig c;
  PLANNER_RETURN_IF_ERROR(ReadTransformerConfig(l, std::max<int64_t>(1, o.tp_size), &c));
  const bool moe = l.kind == LayerKind::kMoeBlock || l.kind == LayerKind::kMoe;
  if ((c.mla.kv_lora > 0 || moe) && ops->device() != Device::kCpu) {
    const char* what = moe ? LayerKindName(l.kind) : "MLA";
    return Status::NotSupported(fmt::format("layer '{}': {} runs on CPU ranks only (not on CUDA yet)", l.name, what));
  }
  MoeConfig m;
  if (moe) PLANNER_RETURN_IF_ERROR(ReadMoeConfig(l, o, &m));
  if (l.kind == LayerKind::kAttention) {
    *out = MakeAttention(ops, l.name, in[0], in[1], c, o);
  } else if (l.kind == LayerKind::kMlp) {
    *out = MakeMlp(ops, l.name, in[0], in[1], c, o);
  } else if (l.kind == LayerKind::kTransformerBlock) {
    *out =
        MakeTransformerBlock(ops, l.name, in[0], in[1], c.rms, MakeAttention(ops, l.name + ".attn", in[0], in[1], c, o),
                             MakeMlp(ops, l.name + ".mlp", in[0], in[1], c, o));
  } else if (l.kind == LayerKind::kMoe) {  // the MoE feed-forward alone (tests, SP), as mlp is a block's dense one
    *out = MakeMoeFfn(ops, l.name, in[0], in[1], c, m, o);
  } else {
    *out =
        MakeTransformerBlock(ops, l.name, in[0], in[1], c.rms, MakeAttention(ops, l.name + ".attn", in[0], in[1], c, o),
                             MakeMoeFfn(ops, l.name + ".moe", in[0], in[1], c, m, o));
  }
  return Status::OK();
}

// A transformer layer the runtime would train as another model than the plan's: refused, naming the key to remove
// (sliding windows and packed samples: its attention is causal over the whole sequence; LoRA: it trains every weight).
Status CheckTrainable(const Layer& l) {
  if (l.attention_window > 0)
    return Status::NotSupported(
        fmt::format("layer '{}': sliding-window attention ({} keys) is costed, not trained, by the runtime, whose "
                    "attention is causal over the whole sequence; remove gpt.sliding_window to run it",
                    l.name, l.attention_window));
  if (l.attention_packed > 0)
    return Status::NotSupported(
        fmt::format("layer '{}': packed samples (gpt.packed_length {}) are costed, not trained, by the runtime, whose "
                    "attention is causal over the whole sequence; remove gpt.packed_length to run it",
                    l.name, l.attention_packed));
  if (l.frozen_params > 0)
    return Status::NotSupported(
        fmt::format("layer '{}': LoRA fine-tuning (gpt.lora) is costed, not trained, by the runtime, which trains "
                    "every weight; remove gpt.lora to run it",
                    l.name));
  return Status::OK();
}

// The kernel of one layer type on ops' device (the TP degree already checked to be valid).
Status BuildKernel(const Layer& l, const KernelOptions& o, DeviceOps* ops, std::unique_ptr<LayerKernel>* out) {
  const auto& in = l.in_shape;
  const auto& a = l.attrs;
  const int64_t t = std::max<int64_t>(1, o.tp_size);
  auto divides = [&](int64_t what, const char* name) -> Status {
    if (t > 1 && (what % t != 0)) {
      return Status::InvalidArgument(
          fmt::format("layer '{}': tensor-parallel degree {} does not divide its {} ({})", l.name, t, name, what));
    }
    return Status::OK();
  };
  switch (l.kind) {
    case LayerKind::kLinear:
      *out = std::make_unique<Linear>(ops, l.name, in.back(), l.out_shape.back(), a.Bool("bias", true),
                                      Product(in) / in.back(), o.seed);
      return Status::OK();
    case LayerKind::kRelu:
    case LayerKind::kGelu:
    case LayerKind::kDropout: {
      Elementwise::Kind op = Elementwise::kDropout;
      if (l.kind != LayerKind::kDropout) op = l.kind == LayerKind::kRelu ? Elementwise::kRelu : Elementwise::kGelu;
      *out = std::make_unique<Elementwise>(ops, op, in, a.probability, o.seed);
      return Status::OK();
    }
    case LayerKind::kLayernorm:
    case LayerKind::kRmsnorm: *out = MakeNorm(ops, l.name, in, l.kind == LayerKind::kRmsnorm); return Status::OK();
    case LayerKind::kEmbedding: {
      const int64_t vocab = a.Int("vocab", 0);
      PLANNER_RETURN_IF_ERROR(divides(vocab, "vocab"));
      *out = MakeEmbedding(ops, l.name, in[0], vocab, a.Int("hidden", 0), a.Int("positions", 0), o);
      return Status::OK();
    }
    case LayerKind::kAttention:
    case LayerKind::kMlp:
    case LayerKind::kTransformerBlock:
    case LayerKind::kMoeBlock:
    case LayerKind::kMoe: PLANNER_RETURN_IF_ERROR(CheckTrainable(l)); return BuildTransformerKernel(l, o, ops, out);
    case LayerKind::kLmHead: {
      const int64_t vocab = a.Int("vocab", 0);
      PLANNER_RETURN_IF_ERROR(divides(vocab, "vocab"));
      // Logits [b, s, V / t] = x W^T (vocabulary-parallel, no bias).
      auto proj = std::make_unique<Linear>(ops, l.name, in[1], vocab / t, false, in[0], o.seed * 41 + 1,
                                           VocabShard(in[1], vocab, o));
      *out = std::make_unique<VocabParallelHead>(std::move(proj), o.tp_group);
      return Status::OK();
    }
    case LayerKind::kLoss: {
      std::vector<int64_t> shard = in;
      PLANNER_RETURN_IF_ERROR(divides(in.back(), "classes"));
      shard.back() /= t;
      *out = MakeLoss(ops, shard, o);
      return Status::OK();
    }
    case LayerKind::kConv2d:
      *out = MakeConv2d(ops, l.name, in, l.out_shape[0], a.Int("kernel", 3), a.Int("stride", 1), a.Int("padding", 0),
                        a.Bool("bias", true), o.seed);
      return Status::OK();
    case LayerKind::kMaxpool:
    case LayerKind::kAvgpool: {
      const int64_t k = a.Int("kernel", 2);
      *out = MakePool(ops, l.kind == LayerKind::kMaxpool, in, k, a.Int("stride", k), a.Int("padding", 0));
      return Status::OK();
    }
    case LayerKind::kFlatten: *out = MakeFlatten(ops, in); return Status::OK();
    case LayerKind::kMtp:
      return Status::NotSupported(
          fmt::format("layer '{}': multi-token prediction modules are costed, not trained, "
                      "by the runtime; remove mtp: from the model to run it",
                      l.name));
  }
  return Status::Internal(fmt::format("layer '{}': no kernel for its kind", l.name));  // not a LayerKind
}

}  // namespace
}  // namespace kernels_internal

void FillUniform(Tensor* t, uint64_t seed, float scale) {
  std::vector<float> v(static_cast<size_t>(t->numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    double u = static_cast<double>(SplitMix(seed * 0x9E3779B97F4A7C15ull + i) >> 11) * 0x1.0p-53;
    v[i] = static_cast<float>((2 * u - 1) * scale);
  }
  if (t->device() == Device::kCpu) std::memcpy(t->data(), v.data(), v.size() * 4);
  else *t = Tensor::FromVector(t->shape(), v).To(t->device());
}

void LayerKernel::ZeroGrads() {
  for (Param* p : Params()) {
    if (p->grad.device() == Device::kCpu) std::memset(p->grad.data(), 0, static_cast<size_t>(p->grad.numel()) * 4);
    else CudaMemset(p->grad.data(), 0, p->grad.numel() * 4);
  }
}

Status MakeKernel(const Layer& layer, const KernelOptions& options, std::unique_ptr<LayerKernel>* out) {
  if (options.tp_size < 1 || options.tp_rank < 0 || options.tp_rank >= options.tp_size) {
    return Status::InvalidArgument(
        fmt::format("tensor-parallel rank {} of {} is not valid", options.tp_rank, options.tp_size));
  }
  if (options.device != Device::kCpu) {
    std::string why;
    if (CudaDeviceCount(&why) == 0) return Status::Unavailable(why);
  }
  DeviceOps* ops = OpsFor(options.device);
  if (ops == nullptr)
    return Status::Unavailable("built without CUDA; rebuild with -Dcuda=enabled on a machine with the CUDA toolkit");
  try {
    return kernels_internal::BuildKernel(layer, options, ops, out);
  } catch (const std::exception& e) {  // device allocation failures
    return Status::Internal(fmt::format("layer '{}' on the {}: {}", layer.name, DeviceName(options.device), e.what()));
  }
}

}  // namespace planner
