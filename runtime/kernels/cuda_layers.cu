// CUDA layer kernels: GEMMs with cuBLAS (fp32, TF32 tensor cores allowed),
// element-wise and normalisation kernels of our own. Same Saved protocol and
// math as cpu_layers.cc; tests/runtime/kernels_gpu_test.cc compares them on
// the same inputs. Layer types without a CUDA kernel yet say so (NotSupported).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/shards.h"

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

// Row-major batched C_i[m,n] (ldc) = op(A_i) op(B_i), strides in elements.
Status GemmBatched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, int64_t sa, const float* b, int64_t ldb,
                   int64_t sb, float* c, int64_t ldc, int64_t sc, int64_t batch, float alpha = 1.0f, float beta = 0.0f) {
  return CublasStatus(cublasSgemmStridedBatched(Handle(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                                                static_cast<int>(m), static_cast<int>(k), &alpha, b, static_cast<int>(ldb), sb, a,
                                                static_cast<int>(lda), sa, &beta, c, static_cast<int>(ldc), sc, static_cast<int>(batch)),
                      "cublasSgemmStridedBatched");
}


// A parameter with the given host values, and zero gradient, on the device.
Param UploadParam(const std::string& name, const Tensor& host) {
  Param p;
  p.name = name;
  p.value = host.To(Device::kCuda);
  p.grad = Tensor::Zeros(host.shape(), Device::kCuda);
  return p;
}

Param DeviceParam(const std::string& name, const std::vector<int64_t>& shape, uint64_t seed, float scale, float fill) {
  Tensor host = Tensor::Zeros(shape);
  if (scale > 0) FillUniform(&host, seed, scale);
  else for (int64_t i = 0; i < host.numel(); ++i) host.data()[i] = fill;
  return UploadParam(name, host);
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

// ---- attention core, embedding, loss, dropout, pools, residual ----
// Block-wide reductions (power-of-two blockDim; sh holds blockDim floats); every thread gets the result.
__device__ float BlockMax(float* sh, float v) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + k]);
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}
__device__ float BlockSum(float* sh, float v) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}
// out[i] = exp(in[i] scale - max) for i < valid; returns the sum, *mx the max of in x scale.
__device__ float ExpRow(const float* in, float* out, int64_t valid, float scale, float* sh, float* mx) {
  float m = -3.0e38f;
  for (int64_t i = threadIdx.x; i < valid; i += blockDim.x) m = fmaxf(m, in[i] * scale);
  m = BlockMax(sh, m);
  float sum = 0;
  for (int64_t i = threadIdx.x; i < valid; i += blockDim.x) {
    float e = __expf(in[i] * scale - m);
    out[i] = e;
    sum += e;
  }
  *mx = m;
  return BlockSum(sh, sum);
}
// Causal (optional) softmax of each row of S (scaled), in place; one block per row.
__global__ void SoftmaxRows(float* p, int64_t s, float scale, int causal) {
  extern __shared__ float sh[];
  const int64_t row = blockIdx.x, r = row % s;
  float* x = p + row * s;
  const int64_t valid = causal ? r + 1 : s;
  float mx = 0;
  const float sum = ExpRow(x, x, valid, scale, sh, &mx);
  for (int64_t i = threadIdx.x; i < s; i += blockDim.x) x[i] = i < valid ? x[i] / sum : 0.0f;
}
// dS = P o (dP - rowsum(dP o P)) x scale, in place in dp; one block per row.
__global__ void SoftmaxBackwardRows(const float* p, float* dp, int64_t s, float scale) {
  extern __shared__ float sh[];
  const float* pr = p + blockIdx.x * s;
  float* g = dp + blockIdx.x * s;
  float dot = 0;
  for (int64_t i = threadIdx.x; i < s; i += blockDim.x) dot += pr[i] * g[i];
  dot = BlockSum(sh, dot);
  for (int64_t i = threadIdx.x; i < s; i += blockDim.x) g[i] = pr[i] * (g[i] - dot) * scale;
}
__global__ void AddInto(float* y, const float* a, const float* b, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = a[i] + b[i];
}
// Vocabulary-parallel embedding: this shard holds table rows [start, start + local); tokens
// outside contribute zero (the shards' outputs are summed).
__global__ void EmbeddingForward(const float* tok, const float* w, const float* pos, float* y, int64_t rows, int64_t seq, int64_t h,
                                 int64_t start, int64_t local) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * h) return;
  int64_t r = i / h, c = i % h, t = static_cast<int64_t>(tok[r]) - start;
  y[i] = (t >= 0 && t < local ? w[t * h + c] : 0.0f) + (pos ? pos[(r % seq) * h + c] : 0.0f);
}
__global__ void EmbeddingBackward(const float* tok, const float* dy, float* dw, float* dpos, int64_t rows, int64_t seq, int64_t h,
                                  int64_t start, int64_t local) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * h) return;
  int64_t r = i / h, c = i % h, t = static_cast<int64_t>(tok[r]) - start;
  if (t >= 0 && t < local) atomicAdd(&dw[t * h + c], dy[i]);
  if (dpos) atomicAdd(&dpos[(r % seq) * h + c], dy[i]);
}
// Cross-entropy over a (vocabulary-parallel) shard of v logits per row starting at class
// `start`, in three steps around the TP all-reduces (max, then sum and target logit); one
// block per row. 1: the shard's row max, and the target's logit where the shard holds it.
__global__ void LossRowMax(const float* x, const float* tgt, float* mx, float* tl, int64_t v, int64_t start) {
  extern __shared__ float sh[];
  const float* xr = x + blockIdx.x * v;
  float m = -3.0e38f;
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) m = fmaxf(m, xr[i]);
  m = BlockMax(sh, m);
  if (threadIdx.x == 0) {
    const int64_t t = static_cast<int64_t>(tgt[blockIdx.x]) - start;
    mx[blockIdx.x] = m;
    tl[blockIdx.x] = t >= 0 && t < v ? xr[t] : 0.0f;
  }
}
// 2: exp(x - max) with the (global) row max, and the shard's row sums.
__global__ void LossExpRows(const float* x, const float* mx, float* probs, float* sum, int64_t v) {
  extern __shared__ float sh[];
  const float* xr = x + blockIdx.x * v;
  float* pr = probs + blockIdx.x * v;
  const float m = mx[blockIdx.x];
  float acc = 0;
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
    pr[i] = __expf(xr[i] - m);
    acc += pr[i];
  }
  acc = BlockSum(sh, acc);
  if (threadIdx.x == 0) sum[blockIdx.x] = acc;
}
// 3: probabilities and the row loss log(sum) + max - target logit (global sum and target logit).
__global__ void LossFinish(float* probs, const float* sum, const float* mx, const float* tl, float* row_loss, int64_t v) {
  float* pr = probs + blockIdx.x * v;
  const float total = sum[blockIdx.x];
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) pr[i] /= total;
  if (threadIdx.x == 0) row_loss[blockIdx.x] = logf(total) + mx[blockIdx.x] - tl[blockIdx.x];
}
__global__ void SampleMean(const float* row_loss, float* y, int64_t rows_per_sample, int64_t samples) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= samples) return;
  float acc = 0;
  for (int64_t r = 0; r < rows_per_sample; ++r) acc += row_loss[i * rows_per_sample + r];
  y[i] = acc / rows_per_sample;
}
__global__ void CrossEntropyBackward(const float* probs, const float* tgt, const float* dy, float* dx, int64_t rows, int64_t v, int64_t rows_per_sample,
                                     int64_t start) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * v) return;
  int64_t r = i / v, c = i % v;
  float g = probs[i] - (c + start == static_cast<int64_t>(tgt[r]) ? 1.0f : 0.0f);
  dx[i] = g * dy[r / rows_per_sample] / rows_per_sample;
}
__device__ unsigned long long Mix64(unsigned long long x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
__global__ void DropoutForward(const float* x, float* y, float* mask, int64_t n, unsigned long long base, float p, float scale) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  double u = static_cast<double>(Mix64(base + static_cast<unsigned long long>(i)) >> 11) * 0x1.0p-53;
  mask[i] = u >= p ? scale : 0.0f;
  y[i] = x[i] * mask[i];
}
__global__ void Multiply(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = a[i] * b[i];
}
// Pools over [b*C, H, W]: one thread per output element.
__global__ void PoolForward(const float* x, float* y, float* arg, int64_t planes, int64_t H, int64_t W, int64_t ho, int64_t wo, int64_t k,
                            int64_t st, int64_t pad, int is_max) {
  int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (o >= planes * ho * wo) return;
  int64_t pl = o / (ho * wo), oi = o / wo % ho, oj = o % wo;
  const float* xi = x + pl * H * W;
  float best = -3.0e38f, acc = 0;
  int64_t where = -1;
  for (int64_t ki = 0; ki < k; ++ki)
    for (int64_t kj = 0; kj < k; ++kj) {
      int64_t ii = oi * st - pad + ki, jj = oj * st - pad + kj;
      if (ii < 0 || ii >= H || jj < 0 || jj >= W) continue;
      float v = xi[ii * W + jj];
      acc += v;
      if (v > best) {
        best = v;
        where = ii * W + jj;
      }
    }
  if (is_max) {
    y[o] = where >= 0 ? best : 0.0f;
    arg[o] = static_cast<float>(where);
  } else {
    y[o] = acc / static_cast<float>(k * k);
  }
}
__global__ void PoolBackward(const float* dy, const float* arg, float* dx, int64_t planes, int64_t H, int64_t W, int64_t ho, int64_t wo,
                             int64_t k, int64_t st, int64_t pad, int is_max) {
  int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (o >= planes * ho * wo) return;
  int64_t pl = o / (ho * wo), oi = o / wo % ho, oj = o % wo;
  float* d = dx + pl * H * W;
  if (is_max) {
    int64_t where = static_cast<int64_t>(arg[o]);
    if (where >= 0) atomicAdd(&d[where], dy[o]);
    return;
  }
  float g = dy[o] / static_cast<float>(k * k);
  for (int64_t ki = 0; ki < k; ++ki)
    for (int64_t kj = 0; kj < k; ++kj) {
      int64_t ii = oi * st - pad + ki, jj = oj * st - pad + kj;
      if (ii >= 0 && ii < H && jj >= 0 && jj < W) atomicAdd(&d[ii * W + jj], g);
    }
}
__global__ void AddBiasChannels(float* y, const float* b, int64_t planes_per_sample, int64_t hw, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] += b[(i / hw) % planes_per_sample];
}
__global__ void BiasGradChannels(const float* dy, float* db, int64_t samples, int64_t cout, int64_t hw) {
  int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= cout) return;
  float acc = 0;
  for (int64_t s = 0; s < samples; ++s)
    for (int64_t i = 0; i < hw; ++i) acc += dy[(s * cout + c) * hw + i];
  db[c] += acc;
}


class CudaLinear final : public LayerKernel {
 public:
  // slice: a tensor-parallel shard's cut of the full weight (shards.h), as the CPU kernel's.
  CudaLinear(const std::string& name, int64_t in, int64_t out, bool bias, int64_t tokens, uint64_t seed, const WeightSlice& slice = {})
      : in_(in), out_(out), tokens_(tokens), w_(UploadParam(name + ".weight", LinearWeight(out, in, seed, slice))) {
    w_.tp_sharded = slice.cut();
    if (bias) {
      b_ = DeviceParam(name + ".bias", {out}, 0, 0, 0.0f);
      b_.tp_sharded = slice.cut() && out != slice.full_out;  // column-parallel bias is sharded; row-parallel lives on rank 0
    }
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
      : group_(o.tp_group), fc1_(name + ".fc1", h, ffn / o.tp_size, true, seq, o.seed * 37 + 1, Fc1Shard(h, ffn, o)), act_(1),
        fc2_(name + ".fc2", ffn / o.tp_size, h, o.tp_rank == 0, seq, o.seed * 37 + 2, Fc2Shard(h, ffn, o)) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    sv->children.assign(3, Saved{});
    Tensor a, g;
    PLANNER_RETURN_IF_ERROR(fc1_.Forward(x, &a, &sv->children[0]));
    PLANNER_RETURN_IF_ERROR(act_.Forward(a, &g, &sv->children[1]));
    PLANNER_RETURN_IF_ERROR(fc2_.Forward(g, y, &sv->children[2]));
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(y->data(), y->numel()));  // row-parallel fc2: partial sums
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->children.size() != 3) return Status::Internal("mlp: backward without forward");
    Tensor dg, da;
    PLANNER_RETURN_IF_ERROR(fc2_.BackwardInput(dy, &dg, &sv->children[2]));
    PLANNER_RETURN_IF_ERROR(act_.BackwardInput(dg, &da, &sv->children[1]));
    PLANNER_RETURN_IF_ERROR(fc1_.BackwardInput(da, dx, &sv->children[0]));
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(dx->data(), dx->numel()));  // column-parallel fc1: partial input gradients
    return Status::OK();
  }
  Status BackwardWeight(Saved* sv) override {
    if (sv->children.size() != 3) return Status::Internal("mlp: backward-weight before backward-input");
    PLANNER_RETURN_IF_ERROR(fc1_.BackwardWeight(&sv->children[0]));
    PLANNER_RETURN_IF_ERROR(fc2_.BackwardWeight(&sv->children[2]));
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override { return JoinParams({&fc1_, &fc2_}); }
  KernelFlops Flops(int64_t b) const override { return SumFlops({&fc1_, &fc2_}, b); }

 private:
  TpGroup* group_;
  CudaLinear fc1_;
  CudaAct act_;
  CudaLinear fc2_;
};


// Causal multi-head self-attention (the CPU kernel's math): QKV GEMM, per sample a strided-batched
// GEMM over heads for Q K^T, a row softmax, P V, and the output GEMM.
class CudaAttention final : public LayerKernel {
 public:
  CudaAttention(const std::string& name, int64_t seq, int64_t h, int64_t heads, const KernelOptions& o)
      : s_(seq), nl_(heads / o.tp_size), d_(h / heads), hl_(nl_ * d_), causal_(o.causal), group_(o.tp_group),
        qkv_(name + ".qkv", h, 3 * hl_, true, seq, o.seed * 31 + 1, QkvShard(h, heads, o)),
        out_(name + ".out", hl_, h, o.tp_rank == 0, seq, o.seed * 31 + 2, AttnOutShard(h, heads, o)) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    sv->children.assign(2, Saved{});
    Tensor qkv;
    PLANNER_RETURN_IF_ERROR(qkv_.Forward(x, &qkv, &sv->children[0]));
    const int64_t b = x.dim(0), ld = 3 * hl_;
    Tensor probs = AllocateTensor({b, nl_, s_, s_}, Device::kCuda), o = AllocateTensor({b, s_, hl_}, Device::kCuda);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d_));
    for (int64_t bi = 0; bi < b; ++bi) {
      const float* base = qkv.data() + bi * s_ * ld;
      float* pb = probs.data() + bi * nl_ * s_ * s_;
      PLANNER_RETURN_IF_ERROR(GemmBatched(false, true, s_, s_, d_, base, ld, d_, base + hl_, ld, d_, pb, s_, s_ * s_, nl_));
      SoftmaxRows<<<static_cast<unsigned>(nl_ * s_), 256, 256 * sizeof(float)>>>(pb, s_, scale, causal_ ? 1 : 0);
      PLANNER_RETURN_IF_ERROR(GemmBatched(false, false, s_, d_, s_, pb, s_, s_ * s_, base + 2 * hl_, ld, d_, o.data() + bi * s_ * hl_, hl_, d_, nl_));
    }
    PLANNER_RETURN_IF_ERROR(out_.Forward(o, y, &sv->children[1]));
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(y->data(), y->numel()));  // row-parallel output projection
    sv->t = {qkv, probs};
    return CudaStatus("attention forward");
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 2 || sv->children.size() != 2) return Status::Internal("attention: backward without forward");
    const Tensor& qkv = sv->t[0];
    const Tensor& probs = sv->t[1];
    const int64_t b = qkv.dim(0), ld = 3 * hl_;
    Tensor dout;
    PLANNER_RETURN_IF_ERROR(out_.BackwardInput(dy, &dout, &sv->children[1]));
    Tensor dqkv = AllocateTensor(qkv.shape(), Device::kCuda), dp = AllocateTensor({nl_, s_, s_}, Device::kCuda);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d_));
    for (int64_t bi = 0; bi < b; ++bi) {
      const float* base = qkv.data() + bi * s_ * ld;
      float* dbase = dqkv.data() + bi * s_ * ld;
      const float* pb = probs.data() + bi * nl_ * s_ * s_;
      const float* dob = dout.data() + bi * s_ * hl_;
      PLANNER_RETURN_IF_ERROR(GemmBatched(true, false, s_, d_, s_, pb, s_, s_ * s_, dob, hl_, d_, dbase + 2 * hl_, ld, d_, nl_));  // dV = P^T dO
      PLANNER_RETURN_IF_ERROR(GemmBatched(false, true, s_, s_, d_, dob, hl_, d_, base + 2 * hl_, ld, d_, dp.data(), s_, s_ * s_, nl_));  // dP = dO V^T
      SoftmaxBackwardRows<<<static_cast<unsigned>(nl_ * s_), 256, 256 * sizeof(float)>>>(pb, dp.data(), s_, scale);
      PLANNER_RETURN_IF_ERROR(GemmBatched(false, false, s_, d_, s_, dp.data(), s_, s_ * s_, base + hl_, ld, d_, dbase, ld, d_, nl_));  // dQ = dS K
      PLANNER_RETURN_IF_ERROR(GemmBatched(true, false, s_, d_, s_, dp.data(), s_, s_ * s_, base, ld, d_, dbase + hl_, ld, d_, nl_));  // dK = dS^T Q
    }
    PLANNER_RETURN_IF_ERROR(qkv_.BackwardInput(dqkv, dx, &sv->children[0]));
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(dx->data(), dx->numel()));  // column-parallel QKV
    sv->t.clear();
    return CudaStatus("attention backward");
  }
  Status BackwardWeight(Saved* sv) override {
    if (sv->children.size() != 2) return Status::Internal("attention: backward-weight before backward-input");
    PLANNER_RETURN_IF_ERROR(qkv_.BackwardWeight(&sv->children[0]));
    PLANNER_RETURN_IF_ERROR(out_.BackwardWeight(&sv->children[1]));
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override { return JoinParams({&qkv_, &out_}); }
  KernelFlops Flops(int64_t b) const override {
    KernelFlops a = SumFlops({&qkv_, &out_}, b);
    double core = 2.0 * static_cast<double>(b) * static_cast<double>(s_) * static_cast<double>(s_) * static_cast<double>(hl_);
    return {a.forward + 2 * core, a.backward_input + 4 * core, a.backward_weight};
  }

 private:
  int64_t s_, nl_, d_, hl_;
  bool causal_;
  TpGroup* group_;
  CudaLinear qkv_, out_;
};

class CudaTransformerBlock final : public LayerKernel {
 public:
  CudaTransformerBlock(const std::string& name, int64_t seq, int64_t h, int64_t heads, int64_t ffn, const KernelOptions& o)
      : ln1_(name + ".ln1", h), attn_(name + ".attn", seq, h, heads, o), ln2_(name + ".ln2", h), mlp_(name + ".mlp", seq, h, ffn, o) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    sv->children.assign(4, Saved{});
    Tensor a, u, c, v;
    PLANNER_RETURN_IF_ERROR(ln1_.Forward(x, &a, &sv->children[0]));
    PLANNER_RETURN_IF_ERROR(attn_.Forward(a, &u, &sv->children[1]));
    Tensor r = AllocateTensor(x.shape(), Device::kCuda);
    AddInto<<<Blocks(r.numel()), 256>>>(r.data(), x.data(), u.data(), r.numel());
    PLANNER_RETURN_IF_ERROR(ln2_.Forward(r, &c, &sv->children[2]));
    PLANNER_RETURN_IF_ERROR(mlp_.Forward(c, &v, &sv->children[3]));
    *y = AllocateTensor(x.shape(), Device::kCuda);
    AddInto<<<Blocks(y->numel()), 256>>>(y->data(), r.data(), v.data(), y->numel());
    return CudaStatus("transformer_block forward");
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->children.size() != 4) return Status::Internal("transformer_block: backward without forward");
    Tensor dc, dr, da, dxa;
    PLANNER_RETURN_IF_ERROR(mlp_.BackwardInput(dy, &dc, &sv->children[3]));
    PLANNER_RETURN_IF_ERROR(ln2_.BackwardInput(dc, &dr, &sv->children[2]));
    AddInto<<<Blocks(dr.numel()), 256>>>(dr.data(), dr.data(), dy.data(), dr.numel());
    PLANNER_RETURN_IF_ERROR(attn_.BackwardInput(dr, &da, &sv->children[1]));
    PLANNER_RETURN_IF_ERROR(ln1_.BackwardInput(da, &dxa, &sv->children[0]));
    AddInto<<<Blocks(dxa.numel()), 256>>>(dxa.data(), dxa.data(), dr.data(), dxa.numel());
    *dx = dxa;
    return CudaStatus("transformer_block backward");
  }
  Status BackwardWeight(Saved* sv) override {
    if (sv->children.size() != 4) return Status::Internal("transformer_block: backward-weight before backward-input");
    PLANNER_RETURN_IF_ERROR(ln1_.BackwardWeight(&sv->children[0]));
    PLANNER_RETURN_IF_ERROR(attn_.BackwardWeight(&sv->children[1]));
    PLANNER_RETURN_IF_ERROR(ln2_.BackwardWeight(&sv->children[2]));
    PLANNER_RETURN_IF_ERROR(mlp_.BackwardWeight(&sv->children[3]));
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override { return JoinParams({&ln1_, &attn_, &ln2_, &mlp_}); }
  KernelFlops Flops(int64_t b) const override { return SumFlops({&attn_, &mlp_}, b); }

 private:
  CudaLayerNorm ln1_;
  CudaAttention attn_;
  CudaLayerNorm ln2_;
  CudaMlp mlp_;
};

// Token ids [b, s] -> [b, s, h]; vocabulary-parallel over TP ranks as the CPU kernel: rank r holds
// rows [r V/t, (r+1) V/t), positions live on rank 0, and the sum over ranks is all-reduced.
class CudaEmbedding final : public LayerKernel {
 public:
  CudaEmbedding(const std::string& name, int64_t seq, int64_t vocab, int64_t h, int64_t positions, const KernelOptions& o)
      : seq_(seq), h_(h), local_(vocab / o.tp_size), start_(o.tp_rank * local_), use_pos_(positions > 0 && o.tp_rank == 0), group_(o.tp_group),
        w_(UploadParam(name + ".word", EmbeddingRows(vocab, h, o.seed, start_, local_))) {
    w_.tp_sharded = o.tp_size > 1;
    if (positions > 0) {
      p_ = DeviceParam(name + ".position", {positions, h}, o.seed + 17, 0.02f * std::sqrt(3.0f), 0);
      p_.tp_sharded = o.tp_size > 1;  // used (and its gradient non-zero) on TP rank 0 only
    }
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    const Tensor ids = x.To(Device::kCuda);
    const int64_t rows = ids.numel();
    *y = AllocateTensor({ids.dim(0), seq_, h_}, Device::kCuda);
    EmbeddingForward<<<Blocks(rows * h_), 256>>>(ids.data(), w_.value.data(), use_pos_ ? p_.value.data() : nullptr, y->data(), rows, seq_, h_,
                                                 start_, local_);
    PLANNER_RETURN_IF_ERROR(CudaStatus("embedding forward"));
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(y->data(), y->numel()));
    s->t = {ids};
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (s->t.size() != 1) return Status::Internal("embedding: backward without forward");
    *dx = Tensor();
    s->t.push_back(dy);
    return Status::OK();
  }
  Status BackwardWeight(Saved* s) override {
    if (s->t.size() != 2) return Status::Internal("embedding: backward-weight before backward-input");
    const int64_t rows = s->t[0].numel();
    EmbeddingBackward<<<Blocks(rows * h_), 256>>>(s->t[0].data(), s->t[1].data(), w_.grad.data(), use_pos_ ? p_.grad.data() : nullptr, rows, seq_,
                                                  h_, start_, local_);
    s->Clear();
    return CudaStatus("embedding backward-weight");
  }
  std::vector<Param*> Params() override {
    if (p_.value.empty()) return {&w_};
    return {&w_, &p_};
  }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  int64_t seq_, h_, local_, start_;
  bool use_pos_;
  TpGroup* group_;
  Param w_, p_;
};

// Softmax cross-entropy over the last dimension, vocabulary-parallel as the CPU kernel: each rank
// holds V / t logits of every row; the row max, sum and target logit are all-reduced.
class CudaLoss final : public LayerKernel {
 public:
  CudaLoss(std::vector<int64_t> shape, const KernelOptions& o)
      : shape_(shape), v_(shape.back()), rows_(Product(shape) / shape.back()), start_(o.tp_rank * v_), group_(o.tp_group) {}
  void SetTargets(const Tensor& t) override { targets_ = t.To(Device::kCuda); }
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    const int64_t b = x.dim(0), n = b * rows_;
    if (targets_.numel() != n) return Status::InvalidArgument("loss: one target per row is needed");
    Tensor probs = AllocateTensor({n, v_}, Device::kCuda), row_loss = AllocateTensor({n}, Device::kCuda);
    Tensor mx = AllocateTensor({n}, Device::kCuda), tl = AllocateTensor({n}, Device::kCuda), sum = AllocateTensor({n}, Device::kCuda);
    const auto rows = static_cast<unsigned>(n);
    LossRowMax<<<rows, 256, 256 * sizeof(float)>>>(x.data(), targets_.data(), mx.data(), tl.data(), v_, start_);
    PLANNER_RETURN_IF_ERROR(CudaStatus("loss forward"));
    if (group_) {
      PLANNER_RETURN_IF_ERROR(group_->AllReduceMax(mx.data(), n));
      PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(tl.data(), n));
    }
    LossExpRows<<<rows, 256, 256 * sizeof(float)>>>(x.data(), mx.data(), probs.data(), sum.data(), v_);
    PLANNER_RETURN_IF_ERROR(CudaStatus("loss forward"));
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(sum.data(), n));
    LossFinish<<<rows, 256>>>(probs.data(), sum.data(), mx.data(), tl.data(), row_loss.data(), v_);
    *y = AllocateTensor({b, 1}, Device::kCuda);
    SampleMean<<<Blocks(b), 256>>>(row_loss.data(), y->data(), rows_, b);
    sv->t = {probs, targets_};
    return CudaStatus("loss forward");
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 2) return Status::Internal("loss: backward without forward");
    const int64_t n = sv->t[0].dim(0);
    std::vector<int64_t> shape = {n / rows_};
    shape.insert(shape.end(), shape_.begin(), shape_.end());
    *dx = AllocateTensor(shape, Device::kCuda);
    CrossEntropyBackward<<<Blocks(n * v_), 256>>>(sv->t[0].data(), sv->t[1].data(), dy.data(), dx->data(), n, v_, rows_, start_);
    sv->Clear();
    return CudaStatus("loss backward");
  }
  Status BackwardWeight(Saved*) override { return Status::OK(); }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  std::vector<int64_t> shape_;
  int64_t v_, rows_, start_;
  TpGroup* group_;
  Tensor targets_;
};

class CudaDropout final : public LayerKernel {
 public:
  CudaDropout(double p, uint64_t seed) : p_(p), seed_(seed) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    *y = AllocateTensor(x.shape(), Device::kCuda);
    Tensor mask = AllocateTensor(x.shape(), Device::kCuda);
    const float keep = static_cast<float>(1.0 - p_);
    DropoutForward<<<Blocks(x.numel()), 256>>>(x.data(), y->data(), mask.data(), x.numel(), seed_ * 0x632BE59BD9B4E019ull + (++calls_),
                                               static_cast<float>(p_), keep > 0 ? 1.0f / keep : 0.0f);
    s->t = {mask};
    return CudaStatus("dropout forward");
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (s->t.size() != 1) return Status::Internal("dropout: backward without forward");
    *dx = AllocateTensor(dy.shape(), Device::kCuda);
    Multiply<<<Blocks(dy.numel()), 256>>>(dy.data(), s->t[0].data(), dx->data(), dy.numel());
    s->Clear();
    return CudaStatus("dropout backward");
  }
  Status BackwardWeight(Saved*) override { return Status::OK(); }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  double p_;
  uint64_t seed_, calls_ = 0;
};

class CudaFlatten final : public LayerKernel {
 public:
  explicit CudaFlatten(std::vector<int64_t> in) : in_(std::move(in)) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    *y = x.Reshaped({x.dim(0), Product(in_)});
    s->t = {x};
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (s->t.size() != 1) return Status::Internal("flatten: backward without forward");
    *dx = dy.Reshaped(s->t[0].shape());
    s->Clear();
    return Status::OK();
  }
  Status BackwardWeight(Saved*) override { return Status::OK(); }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  std::vector<int64_t> in_;
};

class CudaPool final : public LayerKernel {
 public:
  CudaPool(bool max, std::vector<int64_t> in, int64_t k, int64_t st, int64_t pad)
      : max_(max), in_(std::move(in)), k_(k), st_(st), pad_(pad), ho_((in_[1] + 2 * pad - k) / st + 1), wo_((in_[2] + 2 * pad - k) / st + 1) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    const int64_t b = x.dim(0), planes = b * in_[0];
    *y = AllocateTensor({b, in_[0], ho_, wo_}, Device::kCuda);
    Tensor arg = AllocateTensor({b, in_[0], ho_, wo_}, Device::kCuda);
    PoolForward<<<Blocks(planes * ho_ * wo_), 256>>>(x.data(), y->data(), arg.data(), planes, in_[1], in_[2], ho_, wo_, k_, st_, pad_, max_ ? 1 : 0);
    s->t = {arg, x};
    return CudaStatus("pool forward");
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (s->t.size() != 2) return Status::Internal("pool: backward without forward");
    const int64_t b = s->t[1].dim(0), planes = b * in_[0];
    *dx = Tensor::Zeros(s->t[1].shape(), Device::kCuda);
    PoolBackward<<<Blocks(planes * ho_ * wo_), 256>>>(dy.data(), s->t[0].data(), dx->data(), planes, in_[1], in_[2], ho_, wo_, k_, st_, pad_, max_ ? 1 : 0);
    s->Clear();
    return CudaStatus("pool backward");
  }
  Status BackwardWeight(Saved*) override { return Status::OK(); }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  bool max_;
  std::vector<int64_t> in_;
  int64_t k_, st_, pad_, ho_, wo_;
};

// conv2d with cuDNN (NCHW float; the algorithms cuDNN's heuristics rank first).
class CudaConv2d final : public LayerKernel {
 public:
  CudaConv2d(const std::string& name, std::vector<int64_t> in, int64_t cout, int64_t k, int64_t st, int64_t pad, bool bias, uint64_t seed)
      : in_(std::move(in)), cout_(cout), k_(k), st_(st), pad_(pad), ho_((in_[1] + 2 * pad - k) / st + 1), wo_((in_[2] + 2 * pad - k) / st + 1),
        w_(DeviceParam(name + ".weight", {cout, in_[0], k, k}, seed, 1.0f / std::sqrt(static_cast<float>(in_[0] * k * k)), 0)) {
    if (bias) b_ = DeviceParam(name + ".bias", {cout}, 0, 0, 0.0f);
    cudnnCreate(&h_);
    cudnnCreateTensorDescriptor(&xd_);
    cudnnCreateTensorDescriptor(&yd_);
    cudnnCreateFilterDescriptor(&wd_);
    cudnnCreateConvolutionDescriptor(&cd_);
    cudnnSetFilter4dDescriptor(wd_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(cout), static_cast<int>(in_[0]), static_cast<int>(k), static_cast<int>(k));
    cudnnSetConvolution2dDescriptor(cd_, static_cast<int>(pad), static_cast<int>(pad), static_cast<int>(st), static_cast<int>(st), 1, 1,
                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
    cudnnSetConvolutionMathType(cd_, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
  }
  ~CudaConv2d() override {
    cudnnDestroyConvolutionDescriptor(cd_);
    cudnnDestroyFilterDescriptor(wd_);
    cudnnDestroyTensorDescriptor(yd_);
    cudnnDestroyTensorDescriptor(xd_);
    cudnnDestroy(h_);
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    PLANNER_RETURN_IF_ERROR(Shapes(x.dim(0)));
    *y = AllocateTensor({x.dim(0), cout_, ho_, wo_}, Device::kCuda);
    cudnnConvolutionFwdAlgoPerf_t perf[4];
    int got = 0;
    PLANNER_RETURN_IF_ERROR(Dnn(cudnnGetConvolutionForwardAlgorithm_v7(h_, xd_, wd_, cd_, yd_, 4, &got, perf), "forward algorithm"));
    size_t ws = 0;
    PLANNER_RETURN_IF_ERROR(Dnn(cudnnGetConvolutionForwardWorkspaceSize(h_, xd_, wd_, cd_, yd_, perf[0].algo, &ws), "workspace"));
    Tensor work = AllocateTensor({static_cast<int64_t>(ws / 4 + 1)}, Device::kCuda);
    const float one = 1, zero = 0;
    PLANNER_RETURN_IF_ERROR(Dnn(cudnnConvolutionForward(h_, &one, xd_, x.data(), wd_, w_.value.data(), cd_, perf[0].algo, work.data(), ws, &zero, yd_, y->data()),
                                "convolution forward"));
    if (!b_.value.empty()) AddBiasChannels<<<Blocks(y->numel()), 256>>>(y->data(), b_.value.data(), cout_, ho_ * wo_, y->numel());
    s->t = {x};
    return CudaStatus("conv2d forward");
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (s->t.size() != 1) return Status::Internal("conv2d: backward without forward");
    PLANNER_RETURN_IF_ERROR(Shapes(s->t[0].dim(0)));
    *dx = AllocateTensor(s->t[0].shape(), Device::kCuda);
    cudnnConvolutionBwdDataAlgoPerf_t perf[4];
    int got = 0;
    PLANNER_RETURN_IF_ERROR(Dnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(h_, wd_, yd_, cd_, xd_, 4, &got, perf), "backward-data algorithm"));
    size_t ws = 0;
    PLANNER_RETURN_IF_ERROR(Dnn(cudnnGetConvolutionBackwardDataWorkspaceSize(h_, wd_, yd_, cd_, xd_, perf[0].algo, &ws), "workspace"));
    Tensor work = AllocateTensor({static_cast<int64_t>(ws / 4 + 1)}, Device::kCuda);
    const float one = 1, zero = 0;
    PLANNER_RETURN_IF_ERROR(Dnn(cudnnConvolutionBackwardData(h_, &one, wd_, w_.value.data(), yd_, dy.data(), cd_, perf[0].algo, work.data(), ws, &zero, xd_, dx->data()),
                                "convolution backward-data"));
    s->t.push_back(dy);
    return Status::OK();
  }
  Status BackwardWeight(Saved* s) override {
    if (s->t.size() != 2) return Status::Internal("conv2d: backward-weight before backward-input");
    PLANNER_RETURN_IF_ERROR(Shapes(s->t[0].dim(0)));
    cudnnConvolutionBwdFilterAlgoPerf_t perf[4];
    int got = 0;
    PLANNER_RETURN_IF_ERROR(Dnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h_, xd_, yd_, cd_, wd_, 4, &got, perf), "backward-filter algorithm"));
    size_t ws = 0;
    PLANNER_RETURN_IF_ERROR(Dnn(cudnnGetConvolutionBackwardFilterWorkspaceSize(h_, xd_, yd_, cd_, wd_, perf[0].algo, &ws), "workspace"));
    Tensor work = AllocateTensor({static_cast<int64_t>(ws / 4 + 1)}, Device::kCuda);
    const float one = 1;
    PLANNER_RETURN_IF_ERROR(Dnn(cudnnConvolutionBackwardFilter(h_, &one, xd_, s->t[0].data(), yd_, s->t[1].data(), cd_, perf[0].algo, work.data(), ws, &one, wd_,
                                                               w_.grad.data()),
                                "convolution backward-filter"));
    if (!b_.value.empty()) BiasGradChannels<<<Blocks(cout_), 256>>>(s->t[1].data(), b_.grad.data(), s->t[0].dim(0), cout_, ho_ * wo_);
    s->Clear();
    return CudaStatus("conv2d backward-weight");
  }
  std::vector<Param*> Params() override {
    if (b_.value.empty()) return {&w_};
    return {&w_, &b_};
  }
  KernelFlops Flops(int64_t b) const override {
    double f = 2.0 * static_cast<double>(b) * static_cast<double>(cout_) * static_cast<double>(in_[0] * k_ * k_) * static_cast<double>(ho_ * wo_);
    return {f, f, f};
  }

 private:
  static Status Dnn(cudnnStatus_t st, const char* what) {
    if (st == CUDNN_STATUS_SUCCESS) return Status::OK();
    return Status::Internal(std::string("cuDNN ") + what + ": " + cudnnGetErrorString(st));
  }
  Status Shapes(int64_t b) {
    PLANNER_RETURN_IF_ERROR(Dnn(cudnnSetTensor4dDescriptor(xd_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(b), static_cast<int>(in_[0]),
                                                           static_cast<int>(in_[1]), static_cast<int>(in_[2])), "input descriptor"));
    return Dnn(cudnnSetTensor4dDescriptor(yd_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(b), static_cast<int>(cout_), static_cast<int>(ho_),
                                          static_cast<int>(wo_)), "output descriptor");
  }
  std::vector<int64_t> in_;
  int64_t cout_, k_, st_, pad_, ho_, wo_;
  Param w_, b_;
  cudnnHandle_t h_ = nullptr;
  cudnnTensorDescriptor_t xd_ = nullptr, yd_ = nullptr;
  cudnnFilterDescriptor_t wd_ = nullptr;
  cudnnConvolutionDescriptor_t cd_ = nullptr;
};

}  // namespace

Status MakeCudaKernel(const Layer& l, const KernelOptions& o, std::unique_ptr<LayerKernel>* out) {
  try {
    const auto& in = l.in_shape;
    const int64_t t = std::max<int64_t>(1, o.tp_size);
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
    } else if (l.type == "attention" || l.type == "transformer_block") {
      int64_t heads = l.attrs.Int("heads", 1), ffn = l.attrs.Int("ffn", 4 * in.back());
      if (heads % o.tp_size != 0 || ffn % o.tp_size != 0) return Status::InvalidArgument("tensor-parallel degree does not divide heads / ffn");
      if (l.type == "attention") *out = std::make_unique<CudaAttention>(l.name, in[0], in[1], heads, o);
      else *out = std::make_unique<CudaTransformerBlock>(l.name, in[0], in[1], heads, ffn, o);
    } else if (l.type == "embedding") {
      int64_t vocab = l.attrs.Int("vocab", 0);
      if (vocab % t != 0) return Status::InvalidArgument("tensor-parallel degree does not divide the vocabulary");
      *out = std::make_unique<CudaEmbedding>(l.name, in[0], vocab, l.attrs.Int("hidden", 0), l.attrs.Int("positions", 0), o);
    } else if (l.type == "lm_head") {
      int64_t vocab = l.attrs.Int("vocab", 0);
      if (vocab % t != 0) return Status::InvalidArgument("tensor-parallel degree does not divide the vocabulary");
      *out = std::make_unique<VocabParallelHead>(
          std::make_unique<CudaLinear>(l.name, in.back(), vocab / t, false, in[0], o.seed * 41 + 1, VocabShard(in.back(), vocab, o)), o.tp_group);
    } else if (l.type == "loss") {
      if (in.back() % t != 0) return Status::InvalidArgument("tensor-parallel degree does not divide the classes");
      std::vector<int64_t> shard = in;
      shard.back() /= t;
      *out = std::make_unique<CudaLoss>(shard, o);
    } else if (l.type == "dropout") {
      *out = std::make_unique<CudaDropout>(l.attrs.probability, o.seed);
    } else if (l.type == "flatten") {
      *out = std::make_unique<CudaFlatten>(in);
    } else if (l.type == "maxpool" || l.type == "avgpool") {
      int64_t k = l.attrs.Int("kernel", 2);
      *out = std::make_unique<CudaPool>(l.type == "maxpool", in, k, l.attrs.Int("stride", k), l.attrs.Int("padding", 0));
    } else if (l.type == "conv2d") {
      *out = std::make_unique<CudaConv2d>(l.name, in, l.out_shape[0], l.attrs.Int("kernel", 3), l.attrs.Int("stride", 1), l.attrs.Int("padding", 0),
                                          l.attrs.Bool("bias", true), o.seed);
    } else {
      return Status::NotSupported("layer '" + l.name + "': no CUDA kernel for type '" + l.type + "'");
    }
  } catch (const std::exception& e) {
    return Status::Internal(e.what());
  }
  return Status::OK();
}

}  // namespace planner
