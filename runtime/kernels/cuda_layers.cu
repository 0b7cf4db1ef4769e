// CUDA layer kernels: GEMMs with cuBLAS (fp32, TF32 tensor cores allowed),
// element-wise and normalisation kernels of our own. Same Saved protocol and
// math as cpu_layers.cc; tests/runtime/kernels_gpu_test.cc compares them on
// the same inputs. Layer types without a CUDA kernel yet say so (NotSupported).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/kernel.h"

namespace planner {

namespace {

cublasHandle_t Handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t x;
    if (cublasCreate(&x) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate failed");
    cublasSetMathMode(x, CUBLAS_TF32_TENSOR_OP_MATH);
    return x;
  }();
  return h;
}

Status CublasStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::OK();
  return Status::Internal(std::string(what) + ": cuBLAS error " + std::to_string(static_cast<int>(s)));
}
Status CudaStatus(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::OK();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorString(e));
}

int64_t Product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

// Row-major C[m,n] = op(A) op(B) through column-major cuBLAS: C^T = op(B)^T op(A)^T.
// ta/tb: whether A/B are used transposed; lda/ldb are their row lengths.
Status Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
            float* c, float beta) {
  const float alpha = 1.0f;
  return CublasStatus(cublasSgemm(Handle(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                                  static_cast<int>(m), static_cast<int>(k), &alpha, b, static_cast<int>(ldb), a,
                                  static_cast<int>(lda), &beta, c, static_cast<int>(n)),
                      "cublasSgemm");
}

Tensor Upload(const Tensor& host) {
  Tensor d = AllocateTensor(host.shape(), Device::kCuda);
  CudaCopyToDevice(d.data(), host.data(), host.numel() * 4);
  return d;
}

Param DeviceParam(const std::string& name, const std::vector<int64_t>& shape, uint64_t seed, float scale, float fill) {
  Tensor host = Tensor::Zeros(shape);
  if (scale > 0) FillUniform(&host, seed, scale);
  else for (int64_t i = 0; i < host.numel(); ++i) host.data()[i] = fill;
  Param p;
  p.name = name;
  p.value = Upload(host);
  p.grad = Tensor::Zeros(shape, Device::kCuda);
  return p;
}

__global__ void AddBiasRows(float* y, const float* b, int64_t n, int64_t cols) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n * cols) y[i] += b[i % cols];
}
__global__ void ColumnSumAccumulate(const float* dy, float* db, int64_t n, int64_t cols) {
  int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  float acc = 0;
  for (int64_t r = 0; r < n; ++r) acc += dy[r * cols + c];
  db[c] += acc;
}
constexpr float kGeluC = 0.7978845608028654f;
__global__ void ActForward(int kind, const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  y[i] = kind == 0 ? (v > 0 ? v : 0.0f) : 0.5f * v * (1.0f + tanhf(kGeluC * (v + 0.044715f * v * v * v)));
}
__global__ void ActBackward(int kind, const float* z, const float* g, float* dx, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float v = z[i];
  if (kind == 0) {
    dx[i] = v > 0 ? g[i] : 0.0f;
  } else {
    float t = tanhf(kGeluC * (v + 0.044715f * v * v * v));
    float du = kGeluC * (1.0f + 3 * 0.044715f * v * v);
    dx[i] = g[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}
// Sums two per-thread values over the block (power-of-two blockDim) into sh[0] and sh[blockDim.x].
__device__ void BlockSum2(float* sh, float a, float b) {
  sh[threadIdx.x] = a;
  sh[threadIdx.x + blockDim.x] = b;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) {
      sh[threadIdx.x] += sh[threadIdx.x + k];
      sh[threadIdx.x + blockDim.x] += sh[threadIdx.x + blockDim.x + k];
    }
    __syncthreads();
  }
}

// One block per row: mean / variance by a shared-memory reduction.
__global__ void LayerNormForward(const float* x, const float* gamma, const float* beta, float* y, float* xhat, float* rstd,
                                 int64_t h) {
  extern __shared__ float sh[];
  const float* xr = x + blockIdx.x * h;
  float s = 0, s2 = 0;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
    s += xr[i];
    s2 += xr[i] * xr[i];
  }
  BlockSum2(sh, s, s2);
  float mean = sh[0] / h, var = fmaxf(sh[blockDim.x] / h - mean * mean, 0.0f), rs = rsqrtf(var + 1e-5f);
  if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
    float xh = (xr[i] - mean) * rs;
    xhat[blockIdx.x * h + i] = xh;
    y[blockIdx.x * h + i] = xh * gamma[i] + beta[i];
  }
}
__global__ void LayerNormBackward(const float* dy, const float* gamma, const float* xhat, const float* rstd, float* dx, int64_t h) {
  extern __shared__ float sh[];
  const float* g = dy + blockIdx.x * h;
  const float* xh = xhat + blockIdx.x * h;
  float s1 = 0, s2 = 0;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
    float gg = g[i] * gamma[i];
    s1 += gg;
    s2 += gg * xh[i];
  }
  BlockSum2(sh, s1, s2);
  float m1 = sh[0] / h, m2 = sh[blockDim.x] / h, rs = rstd[blockIdx.x];
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) dx[blockIdx.x * h + i] = rs * (g[i] * gamma[i] - m1 - xh[i] * m2);
}
__global__ void LayerNormParamGrads(const float* dy, const float* xhat, float* dgamma, float* dbeta, int64_t n, int64_t h) {
  int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= h) return;
  float a = 0, b = 0;
  for (int64_t r = 0; r < n; ++r) {
    a += dy[r * h + c] * xhat[r * h + c];
    b += dy[r * h + c];
  }
  dgamma[c] += a;
  dbeta[c] += b;
}

unsigned Blocks(int64_t n, unsigned threads = 256) { return static_cast<unsigned>((n + threads - 1) / threads); }

class CudaLinear final : public LayerKernel {
 public:
  CudaLinear(const std::string& name, int64_t in, int64_t out, bool bias, int64_t tokens, uint64_t seed)
      : in_(in), out_(out), tokens_(tokens), w_(DeviceParam(name + ".weight", {out, in}, seed, 1.0f / std::sqrt(static_cast<float>(in)), 0)) {
    if (bias) b_ = DeviceParam(name + ".bias", {out}, 0, 0, 0.0f);
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    if (x.empty() || x.dim(-1) != in_ || x.device() != Device::kCuda) return Status::InvalidArgument("cuda linear: bad input");
    const int64_t n = x.numel() / in_;
    std::vector<int64_t> shape = x.shape();
    shape.back() = out_;
    *y = AllocateTensor(shape, Device::kCuda);
    PLANNER_RETURN_IF_ERROR(Gemm(false, true, n, out_, in_, x.data(), in_, w_.value.data(), in_, y->data(), 0.0f));
    if (!b_.value.empty()) AddBiasRows<<<Blocks(n * out_), 256>>>(y->data(), b_.value.data(), n, out_);
    s->t = {x};
    return CudaStatus("linear forward");
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (s->t.size() != 1) return Status::Internal("linear: backward without forward");
    const Tensor& x = s->t[0];
    const int64_t n = x.numel() / in_;
    *dx = AllocateTensor(x.shape(), Device::kCuda);
    PLANNER_RETURN_IF_ERROR(Gemm(false, false, n, in_, out_, dy.data(), out_, w_.value.data(), in_, dx->data(), 0.0f));
    s->t.push_back(dy);
    return Status::OK();
  }
  Status BackwardWeight(Saved* s) override {
    if (s->t.size() != 2) return Status::Internal("linear: backward-weight before backward-input");
    const int64_t n = s->t[0].numel() / in_;
    PLANNER_RETURN_IF_ERROR(Gemm(true, false, out_, in_, n, s->t[1].data(), out_, s->t[0].data(), in_, w_.grad.data(), 1.0f));
    if (!b_.value.empty()) ColumnSumAccumulate<<<Blocks(out_), 256>>>(s->t[1].data(), b_.grad.data(), n, out_);
    s->Clear();
    return CudaStatus("linear backward-weight");
  }
  std::vector<Param*> Params() override {
    if (b_.value.empty()) return {&w_};
    return {&w_, &b_};
  }
  KernelFlops Flops(int64_t b) const override {
    double f = 2.0 * static_cast<double>(b * tokens_) * static_cast<double>(in_) * static_cast<double>(out_);
    return {f, f, f};
  }

 private:
  int64_t in_, out_, tokens_;
  Param w_, b_;
};

class CudaAct final : public LayerKernel {
 public:
  explicit CudaAct(int kind) : kind_(kind) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    *y = AllocateTensor(x.shape(), Device::kCuda);
    ActForward<<<Blocks(x.numel()), 256>>>(kind_, x.data(), y->data(), x.numel());
    s->t = {x};
    return CudaStatus("activation forward");
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (s->t.size() != 1) return Status::Internal("activation: backward without forward");
    *dx = AllocateTensor(s->t[0].shape(), Device::kCuda);
    ActBackward<<<Blocks(dy.numel()), 256>>>(kind_, s->t[0].data(), dy.data(), dx->data(), dy.numel());
    s->Clear();
    return CudaStatus("activation backward");
  }
  Status BackwardWeight(Saved*) override { return Status::OK(); }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  int kind_;
};

class CudaLayerNorm final : public LayerKernel {
 public:
  CudaLayerNorm(const std::string& name, int64_t h)
      : h_(h), g_(DeviceParam(name + ".gamma", {h}, 0, 0, 1.0f)), b_(DeviceParam(name + ".beta", {h}, 0, 0, 0.0f)) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    const int64_t n = x.numel() / h_;
    *y = AllocateTensor(x.shape(), Device::kCuda);
    Tensor xhat = AllocateTensor({n, h_}, Device::kCuda), rstd = AllocateTensor({n}, Device::kCuda);
    LayerNormForward<<<static_cast<unsigned>(n), 256, 2 * 256 * sizeof(float)>>>(x.data(), g_.value.data(), b_.value.data(), y->data(),
                                                                                  xhat.data(), rstd.data(), h_);
    s->t = {xhat, rstd};
    return CudaStatus("layernorm forward");
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (s->t.size() != 2) return Status::Internal("layernorm: backward without forward");
    const int64_t n = s->t[0].dim(0);
    *dx = AllocateTensor(dy.shape(), Device::kCuda);
    LayerNormBackward<<<static_cast<unsigned>(n), 256, 2 * 256 * sizeof(float)>>>(dy.data(), g_.value.data(), s->t[0].data(),
                                                                                   s->t[1].data(), dx->data(), h_);
    s->t.push_back(dy);
    return CudaStatus("layernorm backward");
  }
  Status BackwardWeight(Saved* s) override {
    if (s->t.size() != 3) return Status::Internal("layernorm: backward-weight before backward-input");
    const int64_t n = s->t[0].dim(0);
    LayerNormParamGrads<<<Blocks(h_), 256>>>(s->t[2].data(), s->t[0].data(), g_.grad.data(), b_.grad.data(), n, h_);
    s->Clear();
    return CudaStatus("layernorm backward-weight");
  }
  std::vector<Param*> Params() override { return {&g_, &b_}; }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  int64_t h_;
  Param g_, b_;
};

// fc1 -> GeLU -> fc2 (the MLP of a GPT block; TP shard when tp_size > 1).
class CudaMlp final : public LayerKernel {
 public:
  CudaMlp(const std::string& name, int64_t seq, int64_t h, int64_t ffn, const KernelOptions& o)
      : fc1_(name + ".fc1", h, ffn / o.tp_size, true, seq, o.seed * 37 + 1), act_(1),
        fc2_(name + ".fc2", ffn / o.tp_size, h, o.tp_rank == 0, seq, o.seed * 37 + 2) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    sv->children.assign(3, Saved{});
    Tensor a, g;
    PLANNER_RETURN_IF_ERROR(fc1_.Forward(x, &a, &sv->children[0]));
    PLANNER_RETURN_IF_ERROR(act_.Forward(a, &g, &sv->children[1]));
    return fc2_.Forward(g, y, &sv->children[2]);
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->children.size() != 3) return Status::Internal("mlp: backward without forward");
    Tensor dg, da;
    PLANNER_RETURN_IF_ERROR(fc2_.BackwardInput(dy, &dg, &sv->children[2]));
    PLANNER_RETURN_IF_ERROR(act_.BackwardInput(dg, &da, &sv->children[1]));
    return fc1_.BackwardInput(da, dx, &sv->children[0]);
  }
  Status BackwardWeight(Saved* sv) override {
    if (sv->children.size() != 3) return Status::Internal("mlp: backward-weight before backward-input");
    PLANNER_RETURN_IF_ERROR(fc1_.BackwardWeight(&sv->children[0]));
    PLANNER_RETURN_IF_ERROR(fc2_.BackwardWeight(&sv->children[2]));
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override {
    auto a = fc1_.Params(), c = fc2_.Params();
    a.insert(a.end(), c.begin(), c.end());
    return a;
  }
  KernelFlops Flops(int64_t b) const override {
    KernelFlops a = fc1_.Flops(b), c = fc2_.Flops(b);
    return {a.forward + c.forward, a.backward_input + c.backward_input, a.backward_weight + c.backward_weight};
  }

 private:
  CudaLinear fc1_;
  CudaAct act_;
  CudaLinear fc2_;
};

}  // namespace

Status MakeCudaKernel(const Layer& l, const KernelOptions& o, std::unique_ptr<LayerKernel>* out) {
  try {
    const auto& in = l.in_shape;
    if (o.tp_group != nullptr) return Status::NotSupported("CUDA kernels run tensor-parallel shards without an in-kernel group yet");
    if (l.type == "linear") {
      *out = std::make_unique<CudaLinear>(l.name, in.back(), l.out_shape.back(), l.attrs.Bool("bias", true), Product(in) / in.back(), o.seed);
    } else if (l.type == "relu" || l.type == "gelu") {
      *out = std::make_unique<CudaAct>(l.type == "relu" ? 0 : 1);
    } else if (l.type == "layernorm") {
      *out = std::make_unique<CudaLayerNorm>(l.name, in.back());
    } else if (l.type == "mlp") {
      int64_t ffn = l.attrs.Int("ffn", 4 * in.back());
      if (ffn % o.tp_size != 0) return Status::InvalidArgument("tensor-parallel degree does not divide ffn");
      *out = std::make_unique<CudaMlp>(l.name, in[0], in[1], ffn, o);
    } else {
      return Status::NotSupported("layer '" + l.name + "': no CUDA kernel for type '" + l.type +
                                  "' yet (CUDA covers linear, relu, gelu, layernorm, mlp); profile it with --device cpu");
    }
  } catch (const std::exception& e) {
    return Status::Internal(e.what());
  }
  return Status::OK();
}

}  // namespace planner
