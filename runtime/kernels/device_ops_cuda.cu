// The CUDA leaf operations (device_ops.h): GEMMs with cuBLAS in the process's
// GEMM precision (fp32 with TF32 tensor cores; bf16 / fp16 operands through
// cublasGemmEx with fp32 accumulation; FP8 e4m3 through cuBLASLt),
// convolutions with cuDNN, everything else kernels of our own.
// tests/runtime/kernels_gpu_test.cc compares each with the CPU's.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/device_ops.h"

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

cudnnHandle_t DnnHandle() {
  static cudnnHandle_t h = [] {
    cudnnHandle_t x;
    if (cudnnCreate(&x) != CUDNN_STATUS_SUCCESS) throw std::runtime_error("cudnnCreate failed");
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
Status Dnn(cudnnStatus_t st, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return Status::OK();
  return Status::Internal(std::string("cuDNN ") + what + ": " + cudnnGetErrorString(st));
}

__global__ void AddBiasRows_(float* y, const float* b, int64_t n, int64_t cols) {
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
  if (kind == 2) y[i] = v > 0 ? v * v : 0.0f;
  else y[i] = kind == 0 ? (v > 0 ? v : 0.0f) : 0.5f * v * (1.0f + tanhf(kGeluC * (v + 0.044715f * v * v * v)));
}
__global__ void ActBackward(int kind, const float* z, const float* g, float* dx, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float v = z[i];
  if (kind == 0) {
    dx[i] = v > 0 ? g[i] : 0.0f;
  } else if (kind == 2) {
    dx[i] = v > 0 ? 2.0f * v * g[i] : 0.0f;
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
__global__ void LayerNormForward_(const float* x, const float* gamma, const float* beta, float* y, float* xhat,
                                  float* rstd, int64_t h) {
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
__global__ void LayerNormBackward_(const float* dy, const float* gamma, const float* xhat, const float* rstd, float* dx,
                                   int64_t h) {
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
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x)
    dx[blockIdx.x * h + i] = rs * (g[i] * gamma[i] - m1 - xh[i] * m2);
}
__global__ void LayerNormParamGrads_(const float* dy, const float* xhat, float* dgamma, float* dbeta, int64_t n,
                                     int64_t h) {
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

// RMSNorm, one block per row (the sum of squares by BlockSum2).
__global__ void RmsNormForward_(const float* x, const float* w, float* y, float* xhat, float* rstd, int64_t h) {
  extern __shared__ float sh[];
  const float* xr = x + blockIdx.x * h;
  float s2 = 0;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) s2 += xr[i] * xr[i];
  BlockSum2(sh, s2, 0.0f);
  float rs = rsqrtf(sh[0] / h + 1e-5f);
  if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
    float xh = xr[i] * rs;
    xhat[blockIdx.x * h + i] = xh;
    y[blockIdx.x * h + i] = xh * w[i];
  }
}
__global__ void RmsNormBackward_(const float* dy, const float* w, const float* xhat, const float* rstd, float* dx,
                                 int64_t h) {
  extern __shared__ float sh[];
  const float* g = dy + blockIdx.x * h;
  const float* xh = xhat + blockIdx.x * h;
  float s = 0;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) s += g[i] * w[i] * xh[i];
  BlockSum2(sh, s, 0.0f);
  float m = sh[0] / h, rs = rstd[blockIdx.x];
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) dx[blockIdx.x * h + i] = rs * (g[i] * w[i] - xh[i] * m);
}
__global__ void RmsNormParamGrads_(const float* dy, const float* xhat, float* dw, int64_t n, int64_t h) {
  int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= h) return;
  float a = 0;
  for (int64_t r = 0; r < n; ++r) a += dy[r * h + c] * xhat[r * h + c];
  dw[c] += a;
}
// SwiGLU over [gate | up] rows; one thread per output element.
__global__ void SwiGluForward_(const float* gu, float* a, int64_t rows, int64_t f) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * f) return;
  int64_t r = i / f, c = i % f;
  float z = gu[r * 2 * f + c];
  a[i] = z / (1.0f + expf(-z)) * gu[r * 2 * f + f + c];
}
__global__ void SwiGluBackward_(const float* gu, const float* da, float* dgu, int64_t rows, int64_t f) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * f) return;
  int64_t r = i / f, c = i % f;
  float z = gu[r * 2 * f + c], up = gu[r * 2 * f + f + c], sg = 1.0f / (1.0f + expf(-z)), d = da[i];
  dgu[r * 2 * f + c] = d * up * sg * (1.0f + z * (1.0f - sg));
  dgu[r * 2 * f + f + c] = d * z * sg;
}
// RoPE: one thread per (row, head, j < d/2) pair, angles in double as on the CPU.
__global__ void Rope_(float* x, int64_t rows, int64_t ld, int64_t seq, int64_t pos0, int64_t heads, int64_t d,
                      double theta, int inverse) {
  int64_t half = d / 2, i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * heads * half) return;
  int64_t j = i % half, hd = (i / half) % heads, r = i / (half * heads);
  double a = static_cast<double>(pos0 + r % seq) * pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(d));
  float c = static_cast<float>(cos(a)), sn = static_cast<float>(inverse ? -sin(a) : sin(a));
  float* v = x + r * ld + hd * d;
  float x1 = v[j], x2 = v[j + half];
  v[j] = x1 * c - x2 * sn;
  v[j + half] = x2 * c + x1 * sn;
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
// Causal (optional) softmax of each row of [., s] blocks, in place; one block per row.
__global__ void SoftmaxRows_(float* p, int64_t s, int causal) {
  extern __shared__ float sh[];
  const int64_t row = blockIdx.x, r = row % s;
  float* x = p + row * s;
  const int64_t valid = causal ? r + 1 : s;
  float mx = 0;
  const float sum = ExpRow(x, x, valid, 1.0f, sh, &mx);
  for (int64_t i = threadIdx.x; i < s; i += blockDim.x) x[i] = i < valid ? x[i] / sum : 0.0f;
}
// dS = P o (dP - rowsum(dP o P)) x scale, in place in dp; one block per row.
__global__ void SoftmaxBackwardRows_(const float* p, float* dp, int64_t s, float scale) {
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
__global__ void EmbeddingForward_(const float* tok, const float* w, const float* pos, float* y, int64_t rows,
                                  int64_t seq, int64_t h, int64_t start, int64_t local) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * h) return;
  int64_t r = i / h, c = i % h, t = static_cast<int64_t>(tok[r]) - start;
  y[i] = (t >= 0 && t < local ? w[t * h + c] : 0.0f) + (pos ? pos[(r % seq) * h + c] : 0.0f);
}
__global__ void EmbeddingBackward_(const float* tok, const float* dy, float* dw, float* dpos, int64_t rows, int64_t seq,
                                   int64_t h, int64_t start, int64_t local) {
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
__global__ void LossFinish(float* probs, const float* sum, const float* mx, const float* tl, float* row_loss,
                           int64_t v) {
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
__global__ void CrossEntropyBackward_(const float* probs, const float* tgt, const float* dy, float* dx, int64_t rows,
                                      int64_t v, int64_t rows_per_sample, int64_t start) {
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
__global__ void DropoutForward(const float* x, float* y, float* mask, int64_t n, unsigned long long base, double p,
                               float scale) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  double u = static_cast<double>(Mix64(base + static_cast<unsigned long long>(i)) >> 11) * 0x1.0p-53;
  mask[i] = u >= p ? scale : 0.0f;
  y[i] = x[i] * mask[i];
}
__global__ void Multiply_(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = a[i] * b[i];
}
// Pools over [b*C, H, W]: one thread per output element.
__global__ void PoolForward_(const float* x, float* y, float* arg, int64_t planes, int64_t H, int64_t W, int64_t ho,
                             int64_t wo, int64_t k, int64_t st, int64_t pad, int is_max) {
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
__global__ void PoolBackward_(const float* dy, const float* arg, float* dx, int64_t planes, int64_t H, int64_t W,
                              int64_t ho, int64_t wo, int64_t k, int64_t st, int64_t pad, int is_max) {
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
__global__ void AddBiasChannels_(float* y, const float* b, int64_t planes_per_sample, int64_t hw, int64_t n) {
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

constexpr unsigned kRowThreads = 256;  // threads of the one-block-per-row kernels (a power of two)

// Descriptors of one convolution call (cuDNN's own objects, destroyed with it).
class ConvDescriptors {
 public:
  ConvDescriptors() {
    cudnnCreateTensorDescriptor(&x);
    cudnnCreateTensorDescriptor(&y);
    cudnnCreateFilterDescriptor(&w);
    cudnnCreateConvolutionDescriptor(&conv);
  }
  ~ConvDescriptors() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
  ConvDescriptors(const ConvDescriptors&) = delete;
  ConvDescriptors& operator=(const ConvDescriptors&) = delete;
  Status Set(const Window& win, int64_t cout, int64_t samples) {
    auto I = [](int64_t v) { return static_cast<int>(v); };
    PLANNER_RETURN_IF_ERROR(Dnn(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, I(samples),
                                                           I(win.channels), I(win.height), I(win.width)),
                                "input descriptor"));
    PLANNER_RETURN_IF_ERROR(Dnn(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, I(samples), I(cout),
                                                           I(win.out_h()), I(win.out_w())),
                                "output descriptor"));
    PLANNER_RETURN_IF_ERROR(Dnn(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, I(cout),
                                                           I(win.channels), I(win.kernel), I(win.kernel)),
                                "filter descriptor"));
    PLANNER_RETURN_IF_ERROR(
        Dnn(cudnnSetConvolution2dDescriptor(conv, I(win.pad), I(win.pad), I(win.stride), I(win.stride), 1, 1,
                                            CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
            "convolution descriptor"));
    return Dnn(cudnnSetConvolutionMathType(conv, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION), "math type");
  }
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
};

// ---- GEMM precisions (device_ops.h SetGemmPrecision)
constexpr unsigned kConvertThreads = 256;
unsigned ConvertBlocks(int64_t n) { return static_cast<unsigned>((n + kConvertThreads - 1) / kConvertThreads); }

__global__ void ToBf16(const float* x, __nv_bfloat16* y, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = __float2bfloat16_rn(x[i]);
}
__global__ void ToHalf(const float* x, __half* y, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = __float2half_rn(x[i]);
}

// An operand as R x K values, K contiguous in the quantised copy: (r, j) is p[j ld + r] when trans, else p[r ld + j].
__device__ float OperandAt(const float* p, int64_t ld, int trans, int64_t r, int64_t j) {
  return trans ? p[j * ld + r] : p[r * ld + j];
}

// *amax (float bits, zeroed by the caller) = max |value| of the R x K operand: per-warp maxima, one atomic each
// (non-negative floats order as their bit patterns).
__global__ void AbsMax(const float* p, int64_t ld, int trans, int64_t rows, int64_t k, unsigned* amax) {
  float m = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * k;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    m = fmaxf(m, fabsf(OperandAt(p, ld, trans, i / k, i % k)));
  }
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, off));
  if ((threadIdx.x & 31) == 0) atomicMax(amax, __float_as_uint(m));
}
// scale = amax / 448 (1 for amax 0): the CPU's Fp8Scale.
__global__ void Fp8Scales(const unsigned* amax, float* scale, int n) {
  int i = threadIdx.x;
  if (i >= n) return;
  const float a = __uint_as_float(amax[i]);
  scale[i] = a > 0 ? a / 448.0f : 1.0f;
}
// q[r K + j] = e4m3(value / scale), round to nearest even, saturating (the CPU's RoundToE4m3).
__global__ void QuantiseE4m3(const float* p, int64_t ld, int trans, int64_t rows, int64_t k, const float* scale,
                             __nv_fp8_storage_t* q) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * k) return;
  q[i] = __nv_cvt_float_to_fp8(__fdiv_rn(OperandAt(p, ld, trans, i / k, i % k), *scale), __NV_SATFINITE, __NV_E4M3);
}

// c[i ldc + j] = d[i n + j] + beta c[i ldc + j] (beta 0: c is not read, as cuBLAS).
__global__ void CombineStrided(const float* d, float* c, int64_t m, int64_t n, int64_t ldc, float beta) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= m * n) return;
  float* out = c + (i / n) * ldc + i % n;
  *out = beta == 0.0f ? d[i] : d[i] + beta * *out;
}

cublasLtHandle_t LtHandle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t x;
    if (cublasLtCreate(&x) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasLtCreate failed");
    return x;
  }();
  return h;
}

// The descriptors of one cuBLASLt product, destroyed with it.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    for (auto l : {a, b, c})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// Elements of a stored operand a GEMM reads (rows x cols with row length ld, batch items stride apart).
int64_t StoredExtent(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

// Per-thread device working memory of the GEMM precisions (converted operands, FP8 copies, scales, the
// cuBLASLt workspace), grown on demand and kept: a cudaMalloc / cudaFree per GEMM would cost more than a
// small GEMM (cudaFree synchronises the device). Per thread, because kernels_gpu_test's TP shards issue
// GEMMs from two threads onto one stream: a shared buffer could be overwritten between one thread's
// conversion and its product. Reuse within a thread is safe: its work is ordered on the stream.
class GemmWorkspace {
 public:
  ~GemmWorkspace() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  // One region per size, each 256-byte aligned.
  Status Carve(std::initializer_list<size_t> sizes, std::vector<char*>* out) {
    auto up = [](size_t v) { return (v + 255) / 256 * 256; };
    size_t total = 0;
    for (size_t v : sizes) total += up(v);
    if (total > bytes_) {
      if (ptr_ != nullptr) cudaFree(ptr_);  // waits for the work still reading it
      ptr_ = nullptr;
      bytes_ = 0;
      if (cudaMalloc(&ptr_, total) != cudaSuccess) {
        cudaGetLastError();
        ptr_ = nullptr;
        return Status::Internal("out of GPU memory for " + std::to_string(total >> 20) + " MiB of GEMM working memory");
      }
      bytes_ = total;
    }
    out->clear();
    size_t at = 0;
    for (size_t v : sizes) {
      out->push_back(static_cast<char*>(ptr_) + at);
      at += up(v);
    }
    return Status::OK();
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};
thread_local GemmWorkspace gemm_workspace;

// A 16-bit copy of n floats (same layout) at dst.
void Convert16(DType to, const float* x, int64_t n, void* dst) {
  if (to == DType::kBf16) ToBf16<<<ConvertBlocks(n), kConvertThreads>>>(x, static_cast<__nv_bfloat16*>(dst), n);
  else ToHalf<<<ConvertBlocks(n), kConvertThreads>>>(x, static_cast<__half*>(dst), n);
}

// Row-major C = op(A) op(B) as column-major C^T = op(B)^T op(A)^T, with 16-bit operands and fp32 accumulation.
Status Gemm16(const GemmArgs& g, DType precision, const float* a, const float* b, float* c) {
  const cublasOperation_t opb = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cudaDataType_t t = precision == DType::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
  auto I = [](int64_t v) { return static_cast<int>(v); };
  const int64_t na = StoredExtent(g.ta ? g.k : g.m, g.ta ? g.m : g.k, g.lda, g.batch, g.stride_a);
  const int64_t nb = StoredExtent(g.tb ? g.n : g.k, g.tb ? g.k : g.n, g.ldb, g.batch, g.stride_b);
  std::vector<char*> r;
  PLANNER_RETURN_IF_ERROR(gemm_workspace.Carve({static_cast<size_t>(na) * 2, static_cast<size_t>(nb) * 2}, &r));
  Convert16(precision, a, na, r[0]);
  Convert16(precision, b, nb, r[1]);
  PLANNER_RETURN_IF_ERROR(CudaStatus("16-bit operand conversion"));
  if (g.batch == 1) {
    return CublasStatus(
        cublasGemmEx(Handle(), opb, opa, I(g.n), I(g.m), I(g.k), &g.alpha, r[1], t, I(g.ldb), r[0], t, I(g.lda),
                     &g.beta, c, CUDA_R_32F, I(g.ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  }
  return CublasStatus(
      cublasGemmStridedBatchedEx(Handle(), opb, opa, I(g.n), I(g.m), I(g.k), &g.alpha, r[1], t, I(g.ldb), g.stride_b,
                                 r[0], t, I(g.lda), g.stride_a, &g.beta, c, CUDA_R_32F, I(g.ldc), g.stride_c,
                                 I(g.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx");
}

constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

// The cuBLASLt FP8 product of quantised copies qa [m, k] and qb [n, k] (both K-major: Hopper's FP8 kernels
// take only the "TN" layout). Column-major, D^T [n, m] = (Lt's A = qb, stored k x n, transposed) (Lt's B = qa,
// stored k x m) scaled by the two per-tensor scales (device pointers), fp32 accumulation, fp32 D = alpha A B.
// Out of place, beta 0: cuBLASLt 13.1 refuses every FP8 algorithm (status 15) when C and D are one buffer
// (H200, 2026-11-30: tools/gpu/fp8_probe.cu, CUBLASLT_LOG_LEVEL=5 shows outOfPlace=0; PyTorch's _scaled_mm
// passes a distinct C with beta 0 and runs). C is not read at beta 0; like PyTorch, an operand stands in for it.
Status LtFp8Matmul(const GemmArgs& g, const void* qa, const void* qb, const float* scales, float* out, int64_t ldc,
                   void* ws) {
  const float beta = 0.0f;
  LtDescriptors d;
  const cublasOperation_t tn[2] = {CUBLAS_OP_T, CUBLAS_OP_N};
  const size_t ws_bytes = kLtWorkspaceBytes;
  PLANNER_RETURN_IF_ERROR(
      CublasStatus(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate"));
  PLANNER_RETURN_IF_ERROR(CublasStatus(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &tn[0], sizeof tn[0]), "FP8 TRANSA"));
  PLANNER_RETURN_IF_ERROR(CublasStatus(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tn[1], sizeof tn[1]), "FP8 TRANSB"));
  const float* scale_lt_a = scales + 1;  // Lt's A is our B
  const float* scale_lt_b = scales;
  PLANNER_RETURN_IF_ERROR(CublasStatus(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_lt_a, sizeof scale_lt_a),
      "FP8 A scale"));
  PLANNER_RETURN_IF_ERROR(CublasStatus(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_lt_b, sizeof scale_lt_b),
      "FP8 B scale"));
  PLANNER_RETURN_IF_ERROR(
      CublasStatus(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_8F_E4M3, g.k, g.n, g.k), "FP8 A layout"));
  PLANNER_RETURN_IF_ERROR(
      CublasStatus(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_8F_E4M3, g.k, g.m, g.k), "FP8 B layout"));
  PLANNER_RETURN_IF_ERROR(CublasStatus(cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32F, g.n, g.m, ldc), "FP8 C layout"));
  PLANNER_RETURN_IF_ERROR(CublasStatus(cublasLtMatmulPreferenceCreate(&d.pref), "cublasLtMatmulPreferenceCreate"));
  PLANNER_RETURN_IF_ERROR(
      CublasStatus(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                        sizeof ws_bytes),
                   "FP8 workspace preference"));
  // The heuristic assumes 256-byte-aligned operands unless told: tell it each pointer's alignment, so that it offers
  // only algorithms that accept them (D may be the caller's C, 16-byte aligned).
  auto alignment = [](const void* p) {
    uint32_t a = 256;
    while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
    return a;
  };
  const uint32_t aligned[4] = {alignment(qb), alignment(qa), alignment(qa), alignment(out)};
  const cublasLtMatmulPreferenceAttributes_t align_keys[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    PLANNER_RETURN_IF_ERROR(
        CublasStatus(cublasLtMatmulPreferenceSetAttribute(d.pref, align_keys[i], &aligned[i], sizeof aligned[i]),
                     "FP8 alignment preference"));
  }
  // The heuristic ranks algorithms without seeing the pointers; one can still refuse at run time (status 15,
  // NOT_SUPPORTED), so each offered algorithm is tried in rank order before the product is refused.
  constexpr int kAlgorithms = 8;
  cublasLtMatmulHeuristicResult_t heuristic[kAlgorithms] = {};
  int found = 0;
  PLANNER_RETURN_IF_ERROR(CublasStatus(
      cublasLtMatmulAlgoGetHeuristic(LtHandle(), d.op, d.a, d.b, d.c, d.c, d.pref, kAlgorithms, heuristic, &found),
      "cublasLtMatmulAlgoGetHeuristic"));
  if (found == 0) {
    return Status::Unavailable("cuBLASLt offers no FP8 algorithm for m " + std::to_string(g.m) + ", n " +
                               std::to_string(g.n) + ", k " + std::to_string(g.k));
  }
  std::string statuses;
  for (int i = 0; i < found; ++i) {
    if (heuristic[i].state != CUBLAS_STATUS_SUCCESS || heuristic[i].workspaceSize > ws_bytes) continue;
    const cublasStatus_t s = cublasLtMatmul(LtHandle(), d.op, &g.alpha, qb, d.a, qa, d.b, &beta, qa, d.c, out, d.c,
                                            &heuristic[i].algo, ws, ws_bytes, 0);
    if (s == CUBLAS_STATUS_SUCCESS) return Status::OK();
    statuses += (statuses.empty() ? "" : ", ") + std::to_string(static_cast<int>(s));
  }
  return Status::Internal("cublasLtMatmul (FP8): cuBLAS refused all " + std::to_string(found) +
                          " offered algorithms (statuses " + statuses + ") for m " + std::to_string(g.m) + ", n " +
                          std::to_string(g.n) + ", k " + std::to_string(g.k));
}

// FP8: both operands quantised per tensor on the device (amax, scale, e4m3 copy), then cuBLASLt.
Status GemmFp8(const GemmArgs& g, const float* a, const float* b, float* c) {
  int device = 0;
  cudaGetDevice(&device);
  if (!CudaSupportsFp8(device)) {
    const int cc = CudaComputeCapability(device);
    return Status::Unavailable("FP8 GEMMs need compute capability 8.9 or newer (Ada, Hopper); this device is " +
                               std::to_string(cc / 10) + "." + std::to_string(cc % 10) + "; use precision bf16");
  }
  // cuBLASLt's FP8 kernels need D 16-byte aligned with 16-byte row strides and write out of place at beta 0
  // (LtFp8Matmul); otherwise the product goes to a dense scratch D and is combined into C here
  // (the same C = alpha A B + beta C).
  const bool direct = g.beta == 0.0f && g.ldc % 4 == 0 && reinterpret_cast<uintptr_t>(c) % 16 == 0;
  std::vector<char*>
      r;  // qa [m, k], qb [n, k] (e4m3 bytes), amax bits of A and B then their scales, the Lt workspace, D
  PLANNER_RETURN_IF_ERROR(
      gemm_workspace.Carve({static_cast<size_t>(g.m * g.k), static_cast<size_t>(g.n * g.k), 4 * sizeof(float),
                            kLtWorkspaceBytes, direct ? 0 : static_cast<size_t>(g.m * g.n) * sizeof(float)},
                           &r));
  auto* qa = reinterpret_cast<__nv_fp8_storage_t*>(r[0]);
  auto* qb = reinterpret_cast<__nv_fp8_storage_t*>(r[1]);
  auto* amax = reinterpret_cast<unsigned*>(r[2]);
  float* scales = reinterpret_cast<float*>(r[2]) + 2;
  cudaMemsetAsync(amax, 0, 2 * sizeof(unsigned));
  AbsMax<<<std::min(ConvertBlocks(g.m * g.k), 1024u), kConvertThreads>>>(a, g.lda, g.ta ? 1 : 0, g.m, g.k, amax);
  AbsMax<<<std::min(ConvertBlocks(g.n * g.k), 1024u), kConvertThreads>>>(b, g.ldb, g.tb ? 0 : 1, g.n, g.k, amax + 1);
  Fp8Scales<<<1, 32>>>(amax, scales, 2);
  QuantiseE4m3<<<ConvertBlocks(g.m * g.k), kConvertThreads>>>(a, g.lda, g.ta ? 1 : 0, g.m, g.k, scales, qa);
  QuantiseE4m3<<<ConvertBlocks(g.n * g.k), kConvertThreads>>>(b, g.ldb, g.tb ? 0 : 1, g.n, g.k, scales + 1, qb);
  PLANNER_RETURN_IF_ERROR(CudaStatus("FP8 quantisation"));
  if (direct) return LtFp8Matmul(g, qa, qb, scales, c, g.ldc, r[3]);
  auto* d = reinterpret_cast<float*>(r[4]);
  PLANNER_RETURN_IF_ERROR(LtFp8Matmul(g, qa, qb, scales, d, g.n, r[3]));
  CombineStrided<<<ConvertBlocks(g.m * g.n), kConvertThreads>>>(d, c, g.m, g.n, g.ldc, g.beta);
  return CudaStatus("FP8 product into C");
}

int ActKind(Activation a) { return a == Activation::kRelu ? 0 : (a == Activation::kGelu ? 1 : 2); }

Tensor Workspace(size_t bytes) { return AllocateScratch({static_cast<int64_t>(bytes / 4 + 1)}, Device::kCuda); }

class CudaDeviceOps final : public DeviceOps {
 public:
  Device device() const override { return Device::kCuda; }

  // Row-major C = op(A) op(B) through column-major cuBLAS: C^T = op(B)^T op(A)^T.
  Status Gemm(const GemmArgs& g, const float* a, const float* b, float* c) override {
    const DType precision = EffectiveGemmPrecision(g);
    if (precision == DType::kFp8) return GemmFp8(g, a, b, c);
    if (precision != DType::kFp32) return Gemm16(g, precision, a, b, c);
    const cublasOperation_t opb = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    auto I = [](int64_t v) { return static_cast<int>(v); };
    if (g.batch == 1) {
      return CublasStatus(cublasSgemm(Handle(), opb, opa, I(g.n), I(g.m), I(g.k), &g.alpha, b, I(g.ldb), a, I(g.lda),
                                      &g.beta, c, I(g.ldc)),
                          "cublasSgemm");
    }
    return CublasStatus(
        cublasSgemmStridedBatched(Handle(), opb, opa, I(g.n), I(g.m), I(g.k), &g.alpha, b, I(g.ldb), g.stride_b, a,
                                  I(g.lda), g.stride_a, &g.beta, c, I(g.ldc), g.stride_c, I(g.batch)),
        "cublasSgemmStridedBatched");
  }
  Status AddBiasRows(float* y, const float* bias, int64_t rows, int64_t cols) override {
    AddBiasRows_<<<Blocks(rows * cols), 256>>>(y, bias, rows, cols);
    return CudaStatus("bias");
  }
  Status SumRowsInto(const float* x, float* acc, int64_t rows, int64_t cols) override {
    ColumnSumAccumulate<<<Blocks(cols), 256>>>(x, acc, rows, cols);
    return CudaStatus("column sums");
  }
  Status AddBiasChannels(float* y, const float* bias, int64_t samples, int64_t channels, int64_t hw) override {
    AddBiasChannels_<<<Blocks(samples * channels * hw), 256>>>(y, bias, channels, hw, samples * channels * hw);
    return CudaStatus("channel bias");
  }
  Status SumChannelsInto(const float* dy, float* acc, int64_t samples, int64_t channels, int64_t hw) override {
    BiasGradChannels<<<Blocks(channels), 256>>>(dy, acc, samples, channels, hw);
    return CudaStatus("channel sums");
  }
  Status Add(const float* a, const float* b, float* y, int64_t n) override {
    AddInto<<<Blocks(n), 256>>>(y, a, b, n);
    return CudaStatus("add");
  }
  Status Multiply(const float* a, const float* b, float* y, int64_t n) override {
    Multiply_<<<Blocks(n), 256>>>(a, b, y, n);
    return CudaStatus("multiply");
  }
  Status ActivationForward(Activation act, const float* x, float* y, int64_t n) override {
    ActForward<<<Blocks(n), 256>>>(ActKind(act), x, y, n);
    return CudaStatus("activation forward");
  }
  Status ActivationBackward(Activation act, const float* kept, const float* dy, float* dx, int64_t n) override {
    ActBackward<<<Blocks(n), 256>>>(ActKind(act), kept, dy, dx, n);
    return CudaStatus("activation backward");
  }
  Status Dropout(const float* x, float* y, float* mask, int64_t n, uint64_t base, double p, float scale) override {
    DropoutForward<<<Blocks(n), 256>>>(x, y, mask, n, base, p, scale);
    return CudaStatus("dropout");
  }
  Status LayerNormForward(const float* x, const float* gamma, const float* beta, float* y, float* xhat, float* rstd,
                          int64_t n, int64_t h) override {
    LayerNormForward_<<<static_cast<unsigned>(n), kRowThreads, 2 * kRowThreads * sizeof(float)>>>(x, gamma, beta, y,
                                                                                                  xhat, rstd, h);
    return CudaStatus("layernorm forward");
  }
  Status LayerNormBackward(const float* dy, const float* gamma, const float* xhat, const float* rstd, float* dx,
                           int64_t n, int64_t h) override {
    LayerNormBackward_<<<static_cast<unsigned>(n), kRowThreads, 2 * kRowThreads * sizeof(float)>>>(dy, gamma, xhat,
                                                                                                   rstd, dx, h);
    return CudaStatus("layernorm backward");
  }
  Status LayerNormParamGrads(const float* dy, const float* xhat, float* dgamma, float* dbeta, int64_t n,
                             int64_t h) override {
    LayerNormParamGrads_<<<Blocks(h), 256>>>(dy, xhat, dgamma, dbeta, n, h);
    return CudaStatus("layernorm parameter gradients");
  }
  Status RmsNormForward(const float* x, const float* weight, float* y, float* xhat, float* rstd, int64_t n,
                        int64_t h) override {
    RmsNormForward_<<<static_cast<unsigned>(n), kRowThreads, 2 * kRowThreads * sizeof(float)>>>(x, weight, y, xhat,
                                                                                                rstd, h);
    return CudaStatus("rmsnorm forward");
  }
  Status RmsNormBackward(const float* dy, const float* weight, const float* xhat, const float* rstd, float* dx,
                         int64_t n, int64_t h) override {
    RmsNormBackward_<<<static_cast<unsigned>(n), kRowThreads, 2 * kRowThreads * sizeof(float)>>>(dy, weight, xhat, rstd,
                                                                                                 dx, h);
    return CudaStatus("rmsnorm backward");
  }
  Status RmsNormParamGrads(const float* dy, const float* xhat, float* dweight, int64_t n, int64_t h) override {
    RmsNormParamGrads_<<<Blocks(h), 256>>>(dy, xhat, dweight, n, h);
    return CudaStatus("rmsnorm weight gradient");
  }
  Status SwiGluForward(const float* gu, float* a, int64_t rows, int64_t f) override {
    SwiGluForward_<<<Blocks(rows * f), 256>>>(gu, a, rows, f);
    return CudaStatus("swiglu forward");
  }
  Status SwiGluBackward(const float* gu, const float* da, float* dgu, int64_t rows, int64_t f) override {
    SwiGluBackward_<<<Blocks(rows * f), 256>>>(gu, da, dgu, rows, f);
    return CudaStatus("swiglu backward");
  }
  Status Rope(float* x, int64_t rows, int64_t ld, int64_t seq, int64_t pos0, int64_t heads, int64_t d, double theta,
              bool inverse) override {
    Rope_<<<Blocks(rows * heads * (d / 2)), 256>>>(x, rows, ld, seq, pos0, heads, d, theta, inverse ? 1 : 0);
    return CudaStatus("rope");
  }
  Status SoftmaxRows(float* p, int64_t rows, int64_t cols, bool causal) override {
    SoftmaxRows_<<<static_cast<unsigned>(rows), kRowThreads, kRowThreads * sizeof(float)>>>(p, cols, causal ? 1 : 0);
    return CudaStatus("softmax");
  }
  Status SoftmaxBackwardRows(const float* p, float* dp, int64_t rows, int64_t cols, float scale) override {
    SoftmaxBackwardRows_<<<static_cast<unsigned>(rows), kRowThreads, kRowThreads * sizeof(float)>>>(p, dp, cols, scale);
    return CudaStatus("softmax backward");
  }
  Status EmbeddingForward(const float* ids, const float* table, const float* positions, float* y, int64_t rows,
                          int64_t seq, int64_t h, int64_t start, int64_t local) override {
    EmbeddingForward_<<<Blocks(rows * h), 256>>>(ids, table, positions, y, rows, seq, h, start, local);
    return CudaStatus("embedding forward");
  }
  Status EmbeddingBackward(const float* ids, const float* dy, float* dtable, float* dpositions, int64_t rows,
                           int64_t seq, int64_t h, int64_t start, int64_t local) override {
    EmbeddingBackward_<<<Blocks(rows * h), 256>>>(ids, dy, dtable, dpositions, rows, seq, h, start, local);
    return CudaStatus("embedding backward");
  }
  Status CrossEntropyMax(const float* x, const float* targets, float* mx, float* target_logit, int64_t rows, int64_t v,
                         int64_t start) override {
    LossRowMax<<<static_cast<unsigned>(rows), kRowThreads, kRowThreads * sizeof(float)>>>(x, targets, mx, target_logit,
                                                                                          v, start);
    return CudaStatus("cross-entropy max");
  }
  Status CrossEntropyExp(const float* x, const float* mx, float* probs, float* sum, int64_t rows, int64_t v) override {
    LossExpRows<<<static_cast<unsigned>(rows), kRowThreads, kRowThreads * sizeof(float)>>>(x, mx, probs, sum, v);
    return CudaStatus("cross-entropy exp");
  }
  Status CrossEntropyFinish(float* probs, const float* sum, const float* mx, const float* target_logit, float* loss,
                            int64_t rows, int64_t v, int64_t rows_per_sample) override {
    Tensor row_loss = AllocateScratch({rows}, Device::kCuda);
    LossFinish<<<static_cast<unsigned>(rows), kRowThreads>>>(probs, sum, mx, target_logit, row_loss.data(), v);
    PLANNER_RETURN_IF_ERROR(CudaStatus("cross-entropy finish"));
    const int64_t samples = rows / rows_per_sample;
    SampleMean<<<Blocks(samples), 256>>>(row_loss.data(), loss, rows_per_sample, samples);
    return CudaStatus("cross-entropy mean");
  }
  Status CrossEntropyBackward(const float* probs, const float* targets, const float* dy, float* dx, int64_t rows,
                              int64_t v, int64_t rows_per_sample, int64_t start) override {
    CrossEntropyBackward_<<<Blocks(rows * v), 256>>>(probs, targets, dy, dx, rows, v, rows_per_sample, start);
    return CudaStatus("cross-entropy backward");
  }
  Status PoolForward(bool max, const Window& w, int64_t samples, const float* x, float* y, float* arg) override {
    const int64_t planes = samples * w.channels;
    PoolForward_<<<Blocks(planes * w.out_h() * w.out_w()), 256>>>(x, y, arg, planes, w.height, w.width, w.out_h(),
                                                                  w.out_w(), w.kernel, w.stride, w.pad, max ? 1 : 0);
    return CudaStatus("pool forward");
  }
  Status PoolBackward(bool max, const Window& w, int64_t samples, const float* dy, const float* arg,
                      float* dx) override {
    const int64_t planes = samples * w.channels;
    PoolBackward_<<<Blocks(planes * w.out_h() * w.out_w()), 256>>>(dy, arg, dx, planes, w.height, w.width, w.out_h(),
                                                                   w.out_w(), w.kernel, w.stride, w.pad, max ? 1 : 0);
    return CudaStatus("pool backward");
  }

  // Convolutions: the algorithms cuDNN's heuristics rank first; the input is what the backward needs.
  Status ConvForward(const Window& win, int64_t cout, const Tensor& x, const float* weight, float* y,
                     Tensor* kept) override {
    ConvDescriptors d;
    PLANNER_RETURN_IF_ERROR(d.Set(win, cout, x.dim(0)));
    cudnnConvolutionFwdAlgoPerf_t perf[4];
    int got = 0;
    PLANNER_RETURN_IF_ERROR(
        Dnn(cudnnGetConvolutionForwardAlgorithm_v7(DnnHandle(), d.x, d.w, d.conv, d.y, 4, &got, perf),
            "forward algorithm"));
    size_t ws = 0;
    PLANNER_RETURN_IF_ERROR(Dnn(
        cudnnGetConvolutionForwardWorkspaceSize(DnnHandle(), d.x, d.w, d.conv, d.y, perf[0].algo, &ws), "workspace"));
    Tensor work = Workspace(ws);
    const float one = 1, zero = 0;
    PLANNER_RETURN_IF_ERROR(Dnn(cudnnConvolutionForward(DnnHandle(), &one, d.x, x.data(), d.w, weight, d.conv,
                                                        perf[0].algo, work.data(), ws, &zero, d.y, y),
                                "convolution forward"));
    *kept = x;
    return Status::OK();
  }
  Status ConvBackwardData(const Window& win, int64_t cout, const Tensor& kept, const float* weight, const float* dy,
                          Tensor* dx) override {
    ConvDescriptors d;
    PLANNER_RETURN_IF_ERROR(d.Set(win, cout, kept.dim(0)));
    *dx = AllocateTensor(kept.shape(), Device::kCuda);
    cudnnConvolutionBwdDataAlgoPerf_t perf[4];
    int got = 0;
    PLANNER_RETURN_IF_ERROR(
        Dnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(DnnHandle(), d.w, d.y, d.conv, d.x, 4, &got, perf),
            "backward-data algorithm"));
    size_t ws = 0;
    PLANNER_RETURN_IF_ERROR(
        Dnn(cudnnGetConvolutionBackwardDataWorkspaceSize(DnnHandle(), d.w, d.y, d.conv, d.x, perf[0].algo, &ws),
            "workspace"));
    Tensor work = Workspace(ws);
    const float one = 1, zero = 0;
    return Dnn(cudnnConvolutionBackwardData(DnnHandle(), &one, d.w, weight, d.y, dy, d.conv, perf[0].algo, work.data(),
                                            ws, &zero, d.x, dx->data()),
               "convolution backward-data");
  }
  Status ConvBackwardFilter(const Window& win, int64_t cout, const Tensor& kept, const float* dy, float* dw) override {
    ConvDescriptors d;
    PLANNER_RETURN_IF_ERROR(d.Set(win, cout, kept.dim(0)));
    cudnnConvolutionBwdFilterAlgoPerf_t perf[4];
    int got = 0;
    PLANNER_RETURN_IF_ERROR(
        Dnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(DnnHandle(), d.x, d.y, d.conv, d.w, 4, &got, perf),
            "backward-filter algorithm"));
    size_t ws = 0;
    PLANNER_RETURN_IF_ERROR(
        Dnn(cudnnGetConvolutionBackwardFilterWorkspaceSize(DnnHandle(), d.x, d.y, d.conv, d.w, perf[0].algo, &ws),
            "workspace"));
    Tensor work = Workspace(ws);
    const float one = 1;
    return Dnn(cudnnConvolutionBackwardFilter(DnnHandle(), &one, d.x, kept.data(), d.y, dy, d.conv, perf[0].algo,
                                              work.data(), ws, &one, d.w, dw),
               "convolution backward-filter");
  }
};

}  // namespace

DeviceOps* CudaOps() {
  static CudaDeviceOps ops;
  return &ops;
}

}  // namespace planner
