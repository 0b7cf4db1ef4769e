// The device surface of the layer kernels: the leaf operations every layer
// type in layers.cc is composed of. One implementation per device:
// device_ops_cpu.cc (Eigen and plain loops) and device_ops_cuda.cu (cuBLAS,
// cuDNN and kernels of our own); tests/runtime/kernels_gpu_test.cc compares
// each CUDA operation with the CPU one on the same inputs.
//
// Pointers are float buffers on the operations' device (row-major); counts
// are elements. Operations that "accumulate" add into their output, the
// others overwrite it. Every operation returns a Status (the CUDA ones report
// launch and library errors; the CPU ones cannot fail). Thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "runtime/kernels/tensor.h"
#include "spec/layer.h"

namespace planner {

// Row-major C = alpha op(A) op(B) + beta C with op(A) [m, k], op(B) [k, n], C [m, n].
// ta: A is stored [k, m] and used transposed (else stored [m, k]); likewise tb
// (B stored [n, k]). lda / ldb / ldc: the stored matrices' row lengths.
// batch > 1: the i-th product is at a + i stride_a, b + i stride_b, c + i stride_c.
struct GemmArgs {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};

// ---- GEMM precision (process-wide: a process trains one plan; set it before the first GEMM, from
// one thread). Every Gemm reads it:
// - kFp32 (the default): fp32 operands; CPU fp32 products, CUDA cublasSgemm with TF32 tensor cores.
// - kBf16 / kFp16: A and B rounded to the 16-bit format (round to nearest even; fp16 overflow -> inf)
//   before a product accumulated in fp32 into fp32 C: the tensor cores' contract. CUDA converts the
//   operands on the device and calls cublasGemmEx (CUBLAS_COMPUTE_32F); the CPU rounds them on the host.
// - kFp8: each operand quantised per tensor to e4m3 (scale = amax / 448 over the operand's m x k or
//   k x n values, 1 when amax is 0; q = e4m3(x / scale), round to nearest even, saturating at +-448),
//   products accumulated in fp32, C += alpha scale_a scale_b sum(qa qb). CUDA: cuBLASLt on compute
//   capability >= 8.9 (other devices: the Gemm returns Unavailable). Batched GEMMs (the attention core,
//   as Transformer Engine keeps it) and products whose m, n or k is not a multiple of 16 (cuBLASLt's FP8
//   alignment) run in bf16: EffectiveGemmPrecision says which.
void SetGemmPrecision(DType precision);
DType GemmPrecision();
// The precision GemmPrecision() gives this product (kFp8 falls back to kBf16 as above).
DType EffectiveGemmPrecision(const GemmArgs& g);
// Host rounding of one value to the GEMM operand grid of `precision` (kFp32: x itself). NaN stays NaN.
float RoundGemmOperand(DType precision, float x);
// e4m3 (FN: no infinities, max 448): the nearest representable value, ties to even, saturating.
float RoundToE4m3(float x);
// The per-tensor FP8 scale of an operand whose largest |value| is amax: amax / 448, or 1 for amax 0.
float Fp8Scale(float amax);
constexpr float kE4m3Max = 448.0f;

// A k x k window over `planes` [height, width] planes (convolution, pooling).
struct Window {
  int64_t channels = 0, height = 0, width = 0;  // input [channels, height, width] per sample
  int64_t kernel = 1, stride = 1, pad = 0;
  int64_t out_h() const { return (height + 2 * pad - kernel) / stride + 1; }
  int64_t out_w() const { return (width + 2 * pad - kernel) / stride + 1; }
};

// kRelu2 (Nemotron-4's squared ReLU): y = relu(x)^2.
enum class Activation { kRelu, kGelu, kRelu2 };

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual Device device() const = 0;

  // Tensors on this device: counted (tensor.h), zero-filled, a copy of host (or any) values,
  // and uncounted working memory of one layer pass (what an Eigen temporary was).
  Tensor Alloc(const std::vector<int64_t>& shape) const { return AllocateTensor(shape, device()); }
  Tensor Zeros(const std::vector<int64_t>& shape) const { return Tensor::Zeros(shape, device()); }
  Tensor Upload(const Tensor& t) const { return t.To(device()); }
  Tensor Scratch(const std::vector<int64_t>& shape) const { return AllocateScratch(shape, device()); }

  // ---- GEMM and bias
  virtual Status Gemm(const GemmArgs& g, const float* a, const float* b, float* c) = 0;
  // y[r, c] += bias[c] over rows x cols; acc[c] += sum_r x[r, c].
  virtual Status AddBiasRows(float* y, const float* bias, int64_t rows, int64_t cols) = 0;
  virtual Status SumRowsInto(const float* x, float* acc, int64_t rows, int64_t cols) = 0;
  // NCHW: y[s, c, :] += bias[c]; acc[c] += sum over samples and positions of dy[s, c, :].
  virtual Status AddBiasChannels(float* y, const float* bias, int64_t samples, int64_t channels, int64_t hw) = 0;
  virtual Status SumChannelsInto(const float* dy, float* acc, int64_t samples, int64_t channels, int64_t hw) = 0;

  // ---- element-wise
  // y = a + b (y may be a or b); y = a o b.
  virtual Status Add(const float* a, const float* b, float* y, int64_t n) = 0;
  virtual Status Multiply(const float* a, const float* b, float* y, int64_t n) = 0;
  // ReLU / tanh-GeLU / squared ReLU; the backward takes what the forward's layer keeps: ReLU its output,
  // GeLU and squared ReLU their input.
  virtual Status ActivationForward(Activation a, const float* x, float* y, int64_t n) = 0;
  virtual Status ActivationBackward(Activation a, const float* kept, const float* dy, float* dx, int64_t n) = 0;
  // Inverted dropout: mask[i] = u_i >= p ? scale : 0 with u_i the uniform of SplitMix64(base + i)'s top 53
  // bits, y = x o mask.
  virtual Status Dropout(const float* x, float* y, float* mask, int64_t n, uint64_t base, double p, float scale) = 0;

  // ---- normalisation and softmax (per row of h / cols values)
  // LayerNorm (eps 1e-5): xhat = (x - mean) rstd, y = xhat o gamma + beta; keeps xhat [n, h] and rstd [n].
  virtual Status LayerNormForward(const float* x, const float* gamma, const float* beta, float* y, float* xhat,
                                  float* rstd, int64_t n, int64_t h) = 0;
  virtual Status LayerNormBackward(const float* dy, const float* gamma, const float* xhat, const float* rstd, float* dx,
                                   int64_t n, int64_t h) = 0;
  // Accumulates dgamma += sum_r dy o xhat, dbeta += sum_r dy.
  virtual Status LayerNormParamGrads(const float* dy, const float* xhat, float* dgamma, float* dbeta, int64_t n,
                                     int64_t h) = 0;
  // RMSNorm (eps 1e-5): rstd = 1 / sqrt(mean(x^2) + eps), xhat = x rstd, y = xhat o weight; keeps xhat [n, h]
  // and rstd [n]. Backward: dx = rstd (g - xhat mean(g o xhat)) with g = dy o weight.
  virtual Status RmsNormForward(const float* x, const float* weight, float* y, float* xhat, float* rstd, int64_t n,
                                int64_t h) = 0;
  virtual Status RmsNormBackward(const float* dy, const float* weight, const float* xhat, const float* rstd, float* dx,
                                 int64_t n, int64_t h) = 0;
  // Accumulates dweight += sum_r dy o xhat.
  virtual Status RmsNormParamGrads(const float* dy, const float* xhat, float* dweight, int64_t n, int64_t h) = 0;
  // In place softmax of each row; causal: row r (of each cols x cols block) keeps its first r % cols + 1
  // values, the rest become 0.
  virtual Status SoftmaxRows(float* p, int64_t rows, int64_t cols, bool causal) = 0;
  // In place in dp: dS = P o (dP - rowsum(dP o P)) scale.
  virtual Status SoftmaxBackwardRows(const float* p, float* dp, int64_t rows, int64_t cols, float scale) = 0;

  // ---- SwiGLU and rotary embedding
  // gu [rows, 2 f] holds gate (columns [0, f)) and up ([f, 2 f)) of each row: a [rows, f] = silu(gate) o up,
  // silu(z) = z sigmoid(z). Backward (dgu like gu): dgate = da o up o silu'(gate), dup = da o silu(gate).
  virtual Status SwiGluForward(const float* gu, float* a, int64_t rows, int64_t f) = 0;
  virtual Status SwiGluBackward(const float* gu, const float* da, float* dgu, int64_t rows, int64_t f) = 0;
  // RoPE in place, rotate-half convention (GPT-NeoX / Llama / Megatron-Core): row r (of rows, each ld
  // floats apart) is the token at position pos0 + r % seq; each of its `heads` vectors of d floats
  // (consecutive from the row's start) becomes, for j < d/2 with a = position theta^(-2j/d),
  // x[j] cos a - x[j + d/2] sin a and x[j + d/2] cos a + x[j] sin a. inverse: the rotation by -a (its
  // transpose, the backward).
  virtual Status Rope(float* x, int64_t rows, int64_t ld, int64_t seq, int64_t pos0, int64_t heads, int64_t d,
                      double theta, bool inverse) = 0;

  // ---- embedding (vocabulary shard: table rows [start, start + local); other ids contribute 0)
  // y (zero-filled by the caller) [rows, h]: table row of each id, plus positions[r % seq] when given.
  virtual Status EmbeddingForward(const float* ids, const float* table, const float* positions, float* y, int64_t rows,
                                  int64_t seq, int64_t h, int64_t start, int64_t local) = 0;
  // Accumulates the scatter of dy into dtable (and dpositions when given).
  virtual Status EmbeddingBackward(const float* ids, const float* dy, float* dtable, float* dpositions, int64_t rows,
                                   int64_t seq, int64_t h, int64_t start, int64_t local) = 0;

  // ---- softmax cross-entropy over a shard of v classes per row starting at class `start`, in steps
  // around the tensor-parallel all-reduces. 1: row max, and the target's logit where the shard holds
  // it (else 0). 2: probs = exp(x - max) and their row sums. 3: probs /= sum and loss[s] (zero-filled
  // by the caller) = mean over the sample's rows of log(sum) + max - target logit.
  virtual Status CrossEntropyMax(const float* x, const float* targets, float* mx, float* target_logit, int64_t rows,
                                 int64_t v, int64_t start) = 0;
  virtual Status CrossEntropyExp(const float* x, const float* mx, float* probs, float* sum, int64_t rows,
                                 int64_t v) = 0;
  virtual Status CrossEntropyFinish(float* probs, const float* sum, const float* mx, const float* target_logit,
                                    float* loss, int64_t rows, int64_t v, int64_t rows_per_sample) = 0;
  // dx = (probs - onehot(target)) dy[sample] / rows_per_sample.
  virtual Status CrossEntropyBackward(const float* probs, const float* targets, const float* dy, float* dx,
                                      int64_t rows, int64_t v, int64_t rows_per_sample, int64_t start) = 0;

  // ---- pooling over samples x channels planes; arg (max only) keeps each output's input index in
  // its plane (-1: none). The backward accumulates into dx (zero-filled by the caller). Average
  // pooling counts the padding (count_include_pad).
  virtual Status PoolForward(bool max, const Window& w, int64_t samples, const float* x, float* y, float* arg) = 0;
  virtual Status PoolBackward(bool max, const Window& w, int64_t samples, const float* dy, const float* arg,
                              float* dx) = 0;

  // ---- convolution (NCHW cross-correlation, weight [cout, channels, k, k], no bias): each device
  // keeps what its backward needs in *kept (CPU: the im2col columns; CUDA: the input). The backward
  // writes dx (the input's shape); the filter gradient accumulates into dw.
  virtual Status ConvForward(const Window& w, int64_t cout, const Tensor& x, const float* weight, float* y,
                             Tensor* kept) = 0;
  virtual Status ConvBackwardData(const Window& w, int64_t cout, const Tensor& kept, const float* weight,
                                  const float* dy, Tensor* dx) = 0;
  virtual Status ConvBackwardFilter(const Window& w, int64_t cout, const Tensor& kept, const float* dy, float* dw) = 0;
};

// The operations of a device: the CPU's always; CUDA's when built with CUDA (else nullptr).
DeviceOps* CpuOps();
DeviceOps* CudaOps();
DeviceOps* OpsFor(Device d);

// SplitMix64, the generator of parameter initialisation and dropout masks.
uint64_t SplitMix(uint64_t x);

}  // namespace planner
