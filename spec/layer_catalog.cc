#include "spec/layer_catalog.h"

#include <fmt/format.h>

namespace planner {

int DTypeBytes(DType dtype) { return dtype == DType::kFp32 ? 4 : 2; }
const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFp32: return "fp32";
    case DType::kFp16: return "fp16";
    case DType::kBf16: return "bf16";
    case DType::kFp8: return "fp8";
  }
  return "fp16";
}
bool ParseDType(const std::string& text, DType* out) {
  if (text == "fp32") { *out = DType::kFp32; return true; }
  if (text == "fp16") { *out = DType::kFp16; return true; }
  if (text == "bf16") { *out = DType::kBf16; return true; }
  if (text == "fp8") { *out = DType::kFp8; return true; }
  return false;
}

const std::vector<LayerTypeInfo>& LayerTypes() {
  static const std::vector<LayerTypeInfo> types = {
      {"linear", {"in_features", "out_features"}, {"bias"}, {"out_features"}},
      {"conv2d", {"in_channels", "out_channels", "kernel", "stride", "padding"}, {"bias"}, {"out_channels", "kernel"}},
      {"relu", {}, {}, {}},
      {"gelu", {}, {}, {}},
      {"maxpool", {"kernel", "stride", "padding"}, {}, {"kernel"}},
      {"avgpool", {"kernel", "stride", "padding"}, {}, {"kernel"}},
      {"flatten", {}, {}, {}},
      {"dropout", {}, {}, {}, /*has_probability=*/true},
      {"layernorm", {}, {}, {}},
      {"embedding", {"vocab", "hidden", "positions"}, {}, {"vocab", "hidden"}},
      {"attention", {"heads"}, {}, {"heads"}},
      {"mlp", {"ffn"}, {}, {}},
      {"transformer_block", {"heads", "ffn"}, {}, {"heads"}},
      {"lm_head", {"vocab"}, {"tied"}, {"vocab"}},
      {"loss", {}, {}, {}},
  };
  return types;
}

const LayerTypeInfo* FindLayerType(const std::string& type) {
  for (const auto& t : LayerTypes()) {
    if (t.name == type) return &t;
  }
  return nullptr;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

double Elements(const std::vector<int64_t>& shape) {
  double n = 1;
  for (int64_t d : shape) n *= static_cast<double>(d);
  return n;
}

Status ShapeError(const std::string& msg) { return Status::InvalidArgument(msg); }

// Transformer pieces on a [s, h] input, per sample. dt: bytes per element.
// Activation stash follows Korthikanti et al. section 4.1, written with the
// 2-byte terms scaled to the dtype and the 1-byte dropout masks kept at 1 byte.
void AttentionCosts(double s, double h, double a, double dt, Layer* l) {
  l->params += 4 * h * h + 4 * h;
  l->fwd_flops += 8 * s * h * h + 4 * s * s * h;
  l->bwd_weight_flops += 8 * s * h * h;
  l->bwd_input_flops += 8 * s * h * h + 8 * s * s * h;
  l->selective_recompute_flops += 4 * s * s * h;
  // 11 sbh + 5 a s^2 b bytes in fp16: 10 sbh and 4 as^2 of dtype-sized data, sbh + as^2 of masks.
  double stash = dt / 2 * (10 * s * h + 4 * a * s * s) + (s * h + a * s * s);
  l->stash_bytes += stash;
  l->stash_bytes_selective += dt / 2 * 10 * s * h + s * h;
  l->stash_bytes_tp_replicated += dt / 2 * 2 * s * h + s * h;  // QKV input and the output dropout mask
  // softmax, scale, mask, dropout over a s^2; dropout + residual on s h.
  l->fwd_mem_bytes += dt * (4 * a * s * s + 4 * s * h);
  l->bwd_mem_bytes += dt * (8 * a * s * s + 8 * s * h);
  l->tp_allreduces_fwd += 1;
}

void MlpCosts(double s, double h, double f, double dt, Layer* l) {
  l->params += 2 * h * f + f + h;
  l->fwd_flops += 4 * s * h * f;
  l->bwd_weight_flops += 4 * s * h * f;
  l->bwd_input_flops += 4 * s * h * f;
  // 19 sbh in fp16 with f = 4h: inputs 2 sbh + 8 sbh, GeLU input 8 sbh, mask sbh.
  double stash = dt / 2 * (2 * s * h + 4 * s * f) + s * h;
  l->stash_bytes += stash;
  l->stash_bytes_selective += stash;
  l->stash_bytes_tp_replicated += dt / 2 * 2 * s * h + s * h;  // fc1 input and the dropout mask
  // GeLU read+write on s f, dropout + residual on s h.
  l->fwd_mem_bytes += dt * (2 * s * f + 4 * s * h);
  l->bwd_mem_bytes += dt * (4 * s * f + 8 * s * h);
  l->tp_allreduces_fwd += 1;
}

void LayerNormCosts(double n, double last_dim, double dt, Layer* l) {
  l->params += 2 * last_dim;
  l->stash_bytes += dt * n;
  l->stash_bytes_selective += dt * n;
  l->stash_bytes_tp_replicated += dt * n;
  l->fwd_mem_bytes += dt * 2 * n;
  l->bwd_mem_bytes += dt * 4 * n;
}

Status PoolShape(const std::string& type, const LayerAttrs& attrs, const std::vector<int64_t>& in,
                 std::vector<int64_t>* out) {
  if (in.size() != 3) {
    return ShapeError(fmt::format("{} needs a [channels, height, width] input, got {}; put it after a conv2d", type,
                                  ShapeString(in)));
  }
  int64_t k = attrs.Int("kernel", 2), st = attrs.Int("stride", k), p = attrs.Int("padding", 0);
  if (k < 1 || st < 1 || p < 0) return ShapeError("kernel and stride must be at least 1, padding at least 0");
  int64_t ho = (in[1] + 2 * p - k) / st + 1, wo = (in[2] + 2 * p - k) / st + 1;
  if (in[1] + 2 * p < k || in[2] + 2 * p < k || ho < 1 || wo < 1) {
    return ShapeError(fmt::format("kernel {} does not fit the {}x{} input; use a smaller kernel", k, in[1], in[2]));
  }
  *out = {in[0], ho, wo};
  return Status::OK();
}

}  // namespace

Status InferLayer(const std::string& type, const LayerAttrs& attrs, const std::vector<int64_t>& in, DType dtype,
                  Layer* out) {
  Layer l;
  l.type = type;
  l.in_shape = in;
  l.attrs = attrs;
  const double dt = DTypeBytes(dtype);
  const double n_in = Elements(in);
  std::string attr_sig;
  for (const auto& [k, v] : attrs.ints) attr_sig += fmt::format(",{}={}", k, v);
  for (const auto& [k, v] : attrs.bools) attr_sig += fmt::format(",{}={}", k, v);
  for (const auto& [k, v] : attrs.strings) attr_sig += fmt::format(",{}={}", k, v);

  if (type == "linear") {
    if (in.empty()) return ShapeError("linear needs an input with at least one dimension");
    int64_t fin = in.back();
    int64_t want = attrs.Int("in_features", fin);
    if (want != fin) {
      return ShapeError(fmt::format("in_features is {} but the input is {} (last dimension {}); set in_features: {} "
                                    "or fix the previous layer",
                                    want, ShapeString(in), fin, fin));
    }
    int64_t fout = attrs.Int("out_features", 0);
    l.attrs.ints["in_features"] = fin;
    l.attrs.bools["bias"] = attrs.Bool("bias", true);
    double tokens = n_in / static_cast<double>(fin);
    l.out_shape = in;
    l.out_shape.back() = fout;
    l.params = static_cast<double>(fin) * fout + (attrs.Bool("bias", true) ? fout : 0);
    l.fwd_flops = 2 * tokens * fin * fout;
    l.bwd_input_flops = l.fwd_flops;
    l.bwd_weight_flops = l.fwd_flops;
    l.stash_bytes = l.stash_bytes_selective = dt * n_in;
    l.fwd_mem_bytes = dt * tokens * fout;  // bias add
    l.bwd_mem_bytes = dt * tokens * fout;
  } else if (type == "conv2d") {
    if (in.size() != 3) {
      return ShapeError(fmt::format("conv2d needs a [channels, height, width] input, got {}", ShapeString(in)));
    }
    int64_t cin = attrs.Int("in_channels", in[0]);
    if (cin != in[0]) {
      return ShapeError(fmt::format("in_channels is {} but the input has {} channels ({}); set in_channels: {}", cin,
                                    in[0], ShapeString(in), in[0]));
    }
    int64_t cout = attrs.Int("out_channels", 0), k = attrs.Int("kernel", 3), st = attrs.Int("stride", 1),
            p = attrs.Int("padding", 0);
    if (st < 1 || k < 1 || p < 0) return ShapeError("kernel and stride must be at least 1, padding at least 0");
    if (in[1] + 2 * p < k || in[2] + 2 * p < k) {
      return ShapeError(fmt::format("kernel {} does not fit the {}x{} input; add padding or use a smaller kernel", k,
                                    in[1], in[2]));
    }
    int64_t ho = (in[1] + 2 * p - k) / st + 1, wo = (in[2] + 2 * p - k) / st + 1;
    l.out_shape = {cout, ho, wo};
    l.attrs.ints["in_channels"] = cin;
    l.attrs.ints["kernel"] = k;
    l.attrs.ints["stride"] = st;
    l.attrs.ints["padding"] = p;
    double macs = static_cast<double>(cin) * k * k * cout * ho * wo;
    l.params = static_cast<double>(cin) * k * k * cout + (attrs.Bool("bias", true) ? cout : 0);
    l.attrs.bools["bias"] = attrs.Bool("bias", true);
    l.fwd_flops = 2 * macs;
    l.bwd_input_flops = 2 * macs;
    l.bwd_weight_flops = 2 * macs;
    l.stash_bytes = l.stash_bytes_selective = dt * n_in;
    l.fwd_mem_bytes = dt * Elements(l.out_shape);
    l.bwd_mem_bytes = dt * Elements(l.out_shape);
  } else if (type == "relu" || type == "gelu" || type == "dropout") {
    l.out_shape = in;
    l.fwd_mem_bytes = dt * 2 * n_in;
    l.bwd_mem_bytes = dt * 3 * n_in;
    // ReLU keeps its output, GeLU its input, dropout a 1-byte mask.
    l.stash_bytes = l.stash_bytes_selective = type == "dropout" ? n_in : dt * n_in;
  } else if (type == "maxpool" || type == "avgpool") {
    PLANNER_RETURN_IF_ERROR(PoolShape(type, attrs, in, &l.out_shape));
    l.attrs.ints["kernel"] = attrs.Int("kernel", 2);
    l.attrs.ints["stride"] = attrs.Int("stride", attrs.Int("kernel", 2));
    l.attrs.ints["padding"] = attrs.Int("padding", 0);
    double n_out = Elements(l.out_shape);
    l.fwd_mem_bytes = dt * (n_in + n_out);
    l.bwd_mem_bytes = dt * (n_in + n_out);
    l.stash_bytes = l.stash_bytes_selective = type == "maxpool" ? dt * n_in : 0;
  } else if (type == "flatten") {
    l.out_shape = {static_cast<int64_t>(n_in)};
  } else if (type == "layernorm") {
    if (in.empty()) return ShapeError("layernorm needs an input with at least one dimension");
    l.out_shape = in;
    LayerNormCosts(n_in, static_cast<double>(in.back()), dt, &l);
  } else if (type == "embedding") {
    if (in.size() != 1) {
      return ShapeError(fmt::format("embedding needs a [sequence] input of token ids, got {}; set input: [<seq>]",
                                    ShapeString(in)));
    }
    int64_t v = attrs.Int("vocab", 0), h = attrs.Int("hidden", 0), pos = attrs.Int("positions", 0);
    if (pos != 0 && pos < in[0]) {
      return ShapeError(fmt::format("positions is {} but the sequence is {} long; set positions: {}", pos, in[0], in[0]));
    }
    double s = static_cast<double>(in[0]);
    l.out_shape = {in[0], h};
    l.params = static_cast<double>(v) * h + static_cast<double>(pos) * h;
    l.stash_bytes = l.stash_bytes_selective = 4 * s + s * h;  // token ids and the dropout mask
    l.stash_bytes_tp_replicated = l.stash_bytes;
    l.fwd_mem_bytes = dt * 3 * s * h;  // gather, position add, dropout
    l.bwd_mem_bytes = dt * 3 * s * h;
    l.tp_shardable = true;  // vocab-parallel
    l.tp_divisor = v;
    l.tp_allreduces_fwd = 1;
  } else if (type == "attention" || type == "mlp" || type == "transformer_block") {
    if (in.size() != 2) {
      return ShapeError(fmt::format("{} needs a [sequence, hidden] input, got {}; put it after an embedding", type,
                                    ShapeString(in)));
    }
    double s = static_cast<double>(in[0]), h = static_cast<double>(in[1]);
    int64_t heads = attrs.Int("heads", 1), ffn = attrs.Int("ffn", 4 * in[1]);
    l.attrs.ints["heads"] = heads;
    l.attrs.ints["ffn"] = ffn;
    if (type != "mlp" && in[1] % heads != 0) {
      return ShapeError(fmt::format("heads ({}) must divide the hidden size {}", heads, in[1]));
    }
    l.out_shape = in;
    if (type != "mlp") AttentionCosts(s, h, static_cast<double>(heads), dt, &l);
    if (type != "attention") MlpCosts(s, h, static_cast<double>(ffn), dt, &l);
    if (type == "transformer_block") {
      LayerNormCosts(s * h, h, dt, &l);
      LayerNormCosts(s * h, h, dt, &l);
    }
    l.tp_shardable = true;
    l.tp_divisor = type == "mlp" ? ffn : heads;
    l.stash_bytes_full = dt * s * h;
  } else if (type == "lm_head") {
    if (in.size() != 2) return ShapeError(fmt::format("lm_head needs a [sequence, hidden] input, got {}", ShapeString(in)));
    double s = static_cast<double>(in[0]), h = static_cast<double>(in[1]);
    int64_t v = attrs.Int("vocab", 0);
    l.out_shape = {in[0], v};
    l.params = static_cast<double>(v) * h;
    l.params_tied = attrs.Bool("tied", true);
    l.fwd_flops = 2 * s * h * v;
    l.bwd_input_flops = 2 * s * h * v;
    l.bwd_weight_flops = 2 * s * h * v;
    l.stash_bytes = l.stash_bytes_selective = dt * s * h;
    l.tp_shardable = true;
    l.tp_divisor = v;
  } else if (type == "loss") {
    l.out_shape = {1};
    // Cross-entropy in fp32 over the logits: softmax read/write, and the fp32
    // logits kept for backward (Korthikanti 4.3: 4 s b V).
    l.fwd_mem_bytes = 4 * 3 * n_in;
    l.bwd_mem_bytes = 4 * 2 * n_in;
    l.stash_bytes = l.stash_bytes_selective = 4 * n_in;
    l.stash_bytes_tp_replicated = 0;
    l.tp_shardable = true;  // vocab-parallel cross-entropy
  } else {
    return Status::InvalidArgument("unknown layer type '" + type + "'");
  }
  if (l.stash_bytes_full == 0) l.stash_bytes_full = l.stash_bytes;
  if (l.stash_bytes_selective == 0) l.stash_bytes_selective = l.stash_bytes;
  if (!l.tp_shardable) l.stash_bytes_tp_replicated = l.stash_bytes;
  for (int64_t d : l.out_shape) {
    if (d < 1) return ShapeError(fmt::format("the output shape {} has an empty dimension", ShapeString(l.out_shape)));
  }
  l.out_bytes = type == "loss" ? 4 : dt * Elements(l.out_shape);
  // Megatron's TP all-reduces move the [s, h] activation of the layer.
  if (l.tp_allreduces_fwd > 0) l.tp_allreduce_bytes = l.out_bytes;
  l.signature = type + ShapeString(in) + attr_sig;
  *out = std::move(l);
  return Status::OK();
}

}  // namespace planner
