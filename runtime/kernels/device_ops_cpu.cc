// The CPU's leaf operations (device_ops.h): Eigen maps over row-major float
// buffers and plain loops, in the order of operations the CPU kernels have
// always used (so results are bit-for-bit those of earlier versions).
// Derivations of the backwards are in docs/profiler.md; tests/runtime/
// kernels_test.cc checks every layer against finite differences.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "common/half.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/kernels/kernel.h"
#include "spec/dtype_round.h"

namespace planner {

namespace {

using RM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapRM = Eigen::Map<RM>;
using CMapRM = Eigen::Map<const RM>;
using Strided = Eigen::Map<RM, 0, Eigen::OuterStride<>>;
using CStrided = Eigen::Map<const RM, 0, Eigen::OuterStride<>>;

int g_threads = 1;

// C = alpha A B + beta C in the forms Eigen evaluates best (and as the kernels always wrote them).
template <class A, class B, class C>
void Product(const A& a, const B& b, C& c, float alpha, float beta) {
  if (beta == 0.0f) {
    if (alpha == 1.0f) c.noalias() = a * b;
    else c.noalias() = (a * b) * alpha;
  } else {
    if (beta != 1.0f) c *= beta;
    if (alpha == 1.0f) c.noalias() += a * b;
    else c.noalias() += (a * b) * alpha;
  }
}

template <class A, class B, class C>
void Transposed(bool ta, bool tb, const A& a, const B& b, C& c, float alpha, float beta) {
  if (ta && tb) Product(a.transpose(), b.transpose(), c, alpha, beta);
  else if (ta) Product(a.transpose(), b, c, alpha, beta);
  else if (tb) Product(a, b.transpose(), c, alpha, beta);
  else Product(a, b, c, alpha, beta);
}

// A matrix as stored: rows x cols with row length ld (a plain map when ld == cols).
template <class Fn>
void WithStored(const float* p, int64_t rows, int64_t cols, int64_t ld, Fn&& fn) {
  if (ld == cols) fn(CMapRM(p, rows, cols));
  else fn(CStrided(p, rows, cols, Eigen::OuterStride<>(ld)));
}

void GemmOne(const GemmArgs& g, const float* a, const float* b, float* c) {
  const int64_t ar = g.ta ? g.k : g.m, ac = g.ta ? g.m : g.k, br = g.tb ? g.n : g.k, bc = g.tb ? g.k : g.n;
  WithStored(a, ar, ac, g.lda, [&](const auto& A) {
    WithStored(b, br, bc, g.ldb, [&](const auto& B) {
      if (g.ldc == g.n) {
        MapRM C(c, g.m, g.n);
        Transposed(g.ta, g.tb, A, B, C, g.alpha, g.beta);
      } else {
        Strided C(c, g.m, g.n, Eigen::OuterStride<>(g.ldc));
        Transposed(g.ta, g.tb, A, B, C, g.alpha, g.beta);
      }
    });
  });
}

// The stored matrix (rows x cols, row length ld) with every value on the GEMM operand grid, dense.
std::vector<float> RoundedCopy(const float* p, int64_t rows, int64_t cols, int64_t ld, DType precision) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      out[static_cast<size_t>(r * cols + c)] = RoundGemmOperand(precision, p[r * ld + c]);
  }
  return out;
}

// The stored matrix quantised per tensor to e4m3 (device_ops.h) and held as the e4m3 values (exact in
// fp32); *scale receives its dequantisation factor.
std::vector<float> QuantisedCopy(const float* p, int64_t rows, int64_t cols, int64_t ld, float* scale) {
  float amax = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(p[r * ld + c]));
  }
  *scale = Fp8Scale(amax);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(r * cols + c)] = RoundToE4m3(p[r * ld + c] / *scale);
  }
  return out;
}

// One product in a 16-bit or FP8 precision: the operands' rounded (or quantised) dense copies through
// the fp32 product, so the CPU is the reference the CUDA tensor-core GEMMs are tested against.
void GemmOneRounded(const GemmArgs& g, DType precision, const float* a, const float* b, float* c) {
  const int64_t ar = g.ta ? g.k : g.m, ac = g.ta ? g.m : g.k, br = g.tb ? g.n : g.k, bc = g.tb ? g.k : g.n;
  GemmArgs d = g;
  d.lda = ac;
  d.ldb = bc;
  std::vector<float> ra, rb;
  if (precision == DType::kFp8) {
    float sa = 1, sb = 1;
    ra = QuantisedCopy(a, ar, ac, g.lda, &sa);
    rb = QuantisedCopy(b, br, bc, g.ldb, &sb);
    d.alpha = g.alpha * (sa * sb);
  } else {
    ra = RoundedCopy(a, ar, ac, g.lda, precision);
    rb = RoundedCopy(b, br, bc, g.ldb, precision);
  }
  GemmOne(d, ra.data(), rb.data(), c);
}

std::atomic<DType> g_gemm_precision{DType::kFp32};

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kLayerNormEps = 1e-5f;

class CpuDeviceOps final : public DeviceOps {
 public:
  Device device() const override { return Device::kCpu; }

  Status Gemm(const GemmArgs& g, const float* a, const float* b, float* c) override {
    const DType precision = EffectiveGemmPrecision(g);
    for (int64_t i = 0; i < g.batch; ++i) {
      if (precision == DType::kFp32) GemmOne(g, a + i * g.stride_a, b + i * g.stride_b, c + i * g.stride_c);
      else GemmOneRounded(g, precision, a + i * g.stride_a, b + i * g.stride_b, c + i * g.stride_c);
    }
    return Status::OK();
  }
  Status AddBiasRows(float* y, const float* bias, int64_t rows, int64_t cols) override {
    MapRM(y, rows, cols).rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias, cols);
    return Status::OK();
  }
  Status SumRowsInto(const float* x, float* acc, int64_t rows, int64_t cols) override {
    Eigen::Map<Eigen::RowVectorXf>(acc, cols) += CMapRM(x, rows, cols).colwise().sum();
    return Status::OK();
  }
  Status AddBiasChannels(float* y, const float* bias, int64_t samples, int64_t channels, int64_t hw) override {
    for (int64_t s = 0; s < samples; ++s)
      MapRM(y + s * channels * hw, channels, hw).colwise() += Eigen::Map<const Eigen::VectorXf>(bias, channels);
    return Status::OK();
  }
  Status SumChannelsInto(const float* dy, float* acc, int64_t samples, int64_t channels, int64_t hw) override {
    for (int64_t s = 0; s < samples; ++s)
      Eigen::Map<Eigen::VectorXf>(acc, channels) += CMapRM(dy + s * channels * hw, channels, hw).rowwise().sum();
    return Status::OK();
  }

  Status Add(const float* a, const float* b, float* y, int64_t n) override {
    MapRM(y, 1, n) = CMapRM(a, 1, n) + CMapRM(b, 1, n);
    return Status::OK();
  }
  Status Multiply(const float* a, const float* b, float* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
    return Status::OK();
  }
  Status ActivationForward(Activation act, const float* x, float* y, int64_t n) override {
    if (act == Activation::kRelu) {
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0.0f;
    } else if (act == Activation::kRelu2) {
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] * x[i] : 0.0f;
    } else {
      // Vectorised (Eigen's SIMD tanh): the scalar loop cost more than the block's GEMMs.
      Eigen::Map<const Eigen::ArrayXf> v(x, n);
      Eigen::Map<Eigen::ArrayXf>(y, n) = 0.5f * v * (1.0f + (kGeluC * (v + 0.044715f * v.cube())).tanh());
    }
    return Status::OK();
  }
  Status ActivationBackward(Activation act, const float* kept, const float* dy, float* dx, int64_t n) override {
    if (act == Activation::kRelu) {
      for (int64_t i = 0; i < n; ++i) dx[i] = kept[i] > 0 ? dy[i] : 0.0f;
    } else if (act == Activation::kRelu2) {
      for (int64_t i = 0; i < n; ++i) dx[i] = kept[i] > 0 ? 2.0f * kept[i] * dy[i] : 0.0f;
    } else {
      Eigen::Map<const Eigen::ArrayXf> v(kept, n), gg(dy, n);
      Eigen::ArrayXf t = (kGeluC * (v + 0.044715f * v.cube())).tanh();
      Eigen::Map<Eigen::ArrayXf>(dx, n) =
          gg * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t.square()) * (kGeluC * (1.0f + 3 * 0.044715f * v.square())));
    }
    return Status::OK();
  }
  Status Dropout(const float* x, float* y, float* mask, int64_t n, uint64_t base, double p, float scale) override {
    for (int64_t i = 0; i < n; ++i) {
      double u = static_cast<double>(SplitMix(base + static_cast<uint64_t>(i)) >> 11) * 0x1.0p-53;
      mask[i] = u >= p ? scale : 0.0f;
      y[i] = x[i] * mask[i];
    }
    return Status::OK();
  }

  Status LayerNormForward(const float* x, const float* gamma, const float* beta, float* y, float* xhat, float* rstd,
                          int64_t n, int64_t h) override {
    CMapRM X(x, n, h);
    MapRM XH(xhat, n, h), Y(y, n, h);
    Eigen::Map<const Eigen::RowVectorXf> g(gamma, h), b(beta, h);
    for (int64_t r = 0; r < n; ++r) {
      float mean = X.row(r).mean();
      float var = (X.row(r).array() - mean).square().mean();
      float rs = 1.0f / std::sqrt(var + kLayerNormEps);
      rstd[r] = rs;
      XH.row(r) = (X.row(r).array() - mean) * rs;
      Y.row(r) = XH.row(r).cwiseProduct(g) + b;
    }
    return Status::OK();
  }
  Status LayerNormBackward(const float* dy, const float* gamma, const float* xhat, const float* rstd, float* dx,
                           int64_t n, int64_t h) override {
    CMapRM XH(xhat, n, h), DY(dy, n, h);
    MapRM DX(dx, n, h);
    Eigen::Map<const Eigen::RowVectorXf> gm(gamma, h);
    Eigen::RowVectorXf g(h);
    for (int64_t r = 0; r < n; ++r) {
      g = DY.row(r).cwiseProduct(gm);
      float m1 = g.mean(), m2 = g.cwiseProduct(XH.row(r)).mean();
      DX.row(r) = rstd[r] * (g.array() - m1 - XH.row(r).array() * m2);
    }
    return Status::OK();
  }
  Status LayerNormParamGrads(const float* dy, const float* xhat, float* dgamma, float* dbeta, int64_t n,
                             int64_t h) override {
    CMapRM XH(xhat, n, h), DY(dy, n, h);
    Eigen::Map<Eigen::RowVectorXf>(dgamma, h) += DY.cwiseProduct(XH).colwise().sum();
    Eigen::Map<Eigen::RowVectorXf>(dbeta, h) += DY.colwise().sum();
    return Status::OK();
  }
  Status RmsNormForward(const float* x, const float* weight, float* y, float* xhat, float* rstd, int64_t n,
                        int64_t h) override {
    CMapRM X(x, n, h);
    MapRM XH(xhat, n, h), Y(y, n, h);
    Eigen::Map<const Eigen::RowVectorXf> w(weight, h);
    for (int64_t r = 0; r < n; ++r) {
      float rs = 1.0f / std::sqrt(X.row(r).squaredNorm() / static_cast<float>(h) + kLayerNormEps);
      rstd[r] = rs;
      XH.row(r) = X.row(r) * rs;
      Y.row(r) = XH.row(r).cwiseProduct(w);
    }
    return Status::OK();
  }
  Status RmsNormBackward(const float* dy, const float* weight, const float* xhat, const float* rstd, float* dx,
                         int64_t n, int64_t h) override {
    CMapRM XH(xhat, n, h), DY(dy, n, h);
    MapRM DX(dx, n, h);
    Eigen::Map<const Eigen::RowVectorXf> w(weight, h);
    Eigen::RowVectorXf g(h);
    for (int64_t r = 0; r < n; ++r) {
      g = DY.row(r).cwiseProduct(w);
      float m = g.cwiseProduct(XH.row(r)).mean();
      DX.row(r) = rstd[r] * (g.array() - XH.row(r).array() * m);
    }
    return Status::OK();
  }
  Status RmsNormParamGrads(const float* dy, const float* xhat, float* dweight, int64_t n, int64_t h) override {
    Eigen::Map<Eigen::RowVectorXf>(dweight, h) += CMapRM(dy, n, h).cwiseProduct(CMapRM(xhat, n, h)).colwise().sum();
    return Status::OK();
  }
  Status SwiGluForward(const float* gu, float* a, int64_t rows, int64_t f) override {
    for (int64_t r = 0; r < rows; ++r) {
      const float* g = gu + r * 2 * f;
      for (int64_t c = 0; c < f; ++c) a[r * f + c] = g[c] / (1.0f + std::exp(-g[c])) * g[f + c];
    }
    return Status::OK();
  }
  Status SwiGluBackward(const float* gu, const float* da, float* dgu, int64_t rows, int64_t f) override {
    for (int64_t r = 0; r < rows; ++r) {
      const float* g = gu + r * 2 * f;
      float* d = dgu + r * 2 * f;
      for (int64_t c = 0; c < f; ++c) {
        const float z = g[c], sg = 1.0f / (1.0f + std::exp(-z)), dd = da[r * f + c];
        d[c] = dd * g[f + c] * sg * (1.0f + z * (1.0f - sg));
        d[f + c] = dd * z * sg;
      }
    }
    return Status::OK();
  }
  Status Rope(float* x, int64_t rows, int64_t ld, int64_t seq, int64_t pos0, int64_t heads, int64_t d, double theta,
              bool inverse) override {
    const int64_t half = d / 2;
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    std::vector<double> inv_freq(static_cast<size_t>(half));
    for (int64_t j = 0; j < half; ++j)
      inv_freq[static_cast<size_t>(j)] = std::pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(d));
    for (int64_t r = 0; r < rows; ++r) {
      const double pos = static_cast<double>(pos0 + r % seq);
      for (int64_t j = 0; j < half; ++j) {
        const double a = pos * inv_freq[static_cast<size_t>(j)];
        cs[static_cast<size_t>(j)] = static_cast<float>(std::cos(a));
        sn[static_cast<size_t>(j)] = static_cast<float>(inverse ? -std::sin(a) : std::sin(a));
      }
      for (int64_t hd = 0; hd < heads; ++hd) {
        float* v = x + r * ld + hd * d;
        for (int64_t j = 0; j < half; ++j) {
          const float x1 = v[j], x2 = v[j + half], c = cs[static_cast<size_t>(j)], s = sn[static_cast<size_t>(j)];
          v[j] = x1 * c - x2 * s;
          v[j + half] = x2 * c + x1 * s;
        }
      }
    }
    return Status::OK();
  }
  Status SoftmaxRows(float* p, int64_t rows, int64_t cols, bool causal) override {
    MapRM P(p, rows, cols);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t valid = causal ? r % cols + 1 : cols;
      float mx = P.row(r).head(valid).maxCoeff();
      P.row(r).head(valid) = (P.row(r).head(valid).array() - mx).exp();
      P.row(r).head(valid) /= P.row(r).head(valid).sum();
      if (valid < cols) P.row(r).tail(cols - valid).setZero();
    }
    return Status::OK();
  }
  Status SoftmaxBackwardRows(const float* p, float* dp, int64_t rows, int64_t cols, float scale) override {
    // Square blocks at a time, as the attention kernel always did them (one head's scores).
    const int64_t block = rows % cols == 0 ? cols : rows;
    for (int64_t r0 = 0; r0 < rows; r0 += block) {
      CMapRM P(p + r0 * cols, block, cols);
      MapRM dP(dp + r0 * cols, block, cols);
      Eigen::VectorXf dot = (dP.cwiseProduct(P)).rowwise().sum();
      dP = (P.array() * (dP.colwise() - dot).array()) * scale;
    }
    return Status::OK();
  }

  Status EmbeddingForward(const float* ids, const float* table, const float* positions, float* y, int64_t rows,
                          int64_t seq, int64_t h, int64_t start, int64_t local) override {
    MapRM Y(y, rows, h);
    CMapRM W(table, local, h);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t tok = static_cast<int64_t>(ids[r]);
      if (tok >= start && tok < start + local) Y.row(r) = W.row(tok - start);
      if (positions) Y.row(r) += CMapRM(positions, seq, h).row(r % seq);
    }
    return Status::OK();
  }
  Status EmbeddingBackward(const float* ids, const float* dy, float* dtable, float* dpositions, int64_t rows,
                           int64_t seq, int64_t h, int64_t start, int64_t local) override {
    CMapRM DY(dy, rows, h);
    MapRM GW(dtable, local, h);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t tok = static_cast<int64_t>(ids[r]);
      if (tok >= start && tok < start + local) GW.row(tok - start) += DY.row(r);
      if (dpositions) MapRM(dpositions, seq, h).row(r % seq) += DY.row(r);
    }
    return Status::OK();
  }

  Status CrossEntropyMax(const float* x, const float* targets, float* mx, float* target_logit, int64_t rows, int64_t v,
                         int64_t start) override {
    CMapRM X(x, rows, v);
    for (int64_t r = 0; r < rows; ++r) {
      mx[r] = X.row(r).maxCoeff();
      int64_t t = static_cast<int64_t>(targets[r]) - start;
      target_logit[r] = t >= 0 && t < v ? X(r, t) : 0.0f;
    }
    return Status::OK();
  }
  Status CrossEntropyExp(const float* x, const float* mx, float* probs, float* sum, int64_t rows, int64_t v) override {
    CMapRM X(x, rows, v);
    MapRM P(probs, rows, v);
    for (int64_t r = 0; r < rows; ++r) {
      P.row(r) = (X.row(r).array() - mx[r]).exp();
      sum[r] = P.row(r).sum();
    }
    return Status::OK();
  }
  Status CrossEntropyFinish(float* probs, const float* sum, const float* mx, const float* target_logit, float* loss,
                            int64_t rows, int64_t v, int64_t rows_per_sample) override {
    MapRM P(probs, rows, v);
    for (int64_t r = 0; r < rows; ++r) {
      P.row(r) /= sum[r];
      loss[r / rows_per_sample] += (std::log(sum[r]) + mx[r] - target_logit[r]) / static_cast<float>(rows_per_sample);
    }
    return Status::OK();
  }
  Status CrossEntropyBackward(const float* probs, const float* targets, const float* dy, float* dx, int64_t rows,
                              int64_t v, int64_t rows_per_sample, int64_t start) override {
    MapRM DX(dx, rows, v);
    DX = CMapRM(probs, rows, v);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t t = static_cast<int64_t>(targets[r]) - start;
      if (t >= 0 && t < v) DX(r, t) -= 1.0f;
      DX.row(r) *= dy[r / rows_per_sample] / static_cast<float>(rows_per_sample);
    }
    return Status::OK();
  }

  Status PoolForward(bool max, const Window& w, int64_t samples, const float* x, float* y, float* arg) override;
  Status PoolBackward(bool max, const Window& w, int64_t samples, const float* dy, const float* arg,
                      float* dx) override;
  Status ConvForward(const Window& w, int64_t cout, const Tensor& x, const float* weight, float* y,
                     Tensor* kept) override;
  Status ConvBackwardData(const Window& w, int64_t cout, const Tensor& kept, const float* weight, const float* dy,
                          Tensor* dx) override;
  Status ConvBackwardFilter(const Window& w, int64_t cout, const Tensor& kept, const float* dy, float* dw) override;
};

Status CpuDeviceOps::PoolForward(bool max, const Window& w, int64_t samples, const float* x, float* y, float* arg) {
  const int64_t H = w.height, W = w.width, ho = w.out_h(), wo = w.out_w(), k = w.kernel;
  for (int64_t bc = 0; bc < samples * w.channels; ++bc) {
    const float* xi = x + bc * H * W;
    for (int64_t oi = 0; oi < ho; ++oi)
      for (int64_t oj = 0; oj < wo; ++oj) {
        float best = -std::numeric_limits<float>::infinity(), acc = 0;
        int64_t where = -1;
        for (int64_t ki = 0; ki < k; ++ki)
          for (int64_t kj = 0; kj < k; ++kj) {
            int64_t ii = oi * w.stride - w.pad + ki, jj = oj * w.stride - w.pad + kj;
            if (ii < 0 || ii >= H || jj < 0 || jj >= W) continue;
            float v = xi[ii * W + jj];
            acc += v;
            if (v > best) {
              best = v;
              where = ii * W + jj;
            }
          }
        int64_t o = (bc * ho + oi) * wo + oj;
        if (max) {
          y[o] = where >= 0 ? best : 0.0f;
          arg[o] = static_cast<float>(where);
        } else {
          y[o] = acc / static_cast<float>(k * k);  // padding counts (count_include_pad)
        }
      }
  }
  return Status::OK();
}

Status CpuDeviceOps::PoolBackward(bool max, const Window& w, int64_t samples, const float* dy, const float* arg,
                                  float* dx) {
  const int64_t H = w.height, W = w.width, ho = w.out_h(), wo = w.out_w(), k = w.kernel;
  for (int64_t bc = 0; bc < samples * w.channels; ++bc) {
    float* d = dx + bc * H * W;
    for (int64_t oi = 0; oi < ho; ++oi)
      for (int64_t oj = 0; oj < wo; ++oj) {
        int64_t o = (bc * ho + oi) * wo + oj;
        if (max) {
          int64_t where = static_cast<int64_t>(arg[o]);
          if (where >= 0) d[where] += dy[o];
          continue;
        }
        float g = dy[o] / static_cast<float>(k * k);
        for (int64_t ki = 0; ki < k; ++ki)
          for (int64_t kj = 0; kj < k; ++kj) {
            int64_t ii = oi * w.stride - w.pad + ki, jj = oj * w.stride - w.pad + kj;
            if (ii >= 0 && ii < H && jj >= 0 && jj < W) d[ii * W + jj] += g;
          }
      }
  }
  return Status::OK();
}

// Convolution as GEMMs over im2col columns [channels k k, out_h out_w] per sample.
void Im2Col(const Window& w, const float* x, float* col) {
  const int64_t H = w.height, W = w.width, ho = w.out_h(), wo = w.out_w(), k = w.kernel, hw = ho * wo;
  for (int64_t c = 0; c < w.channels; ++c)
    for (int64_t ki = 0; ki < k; ++ki)
      for (int64_t kj = 0; kj < k; ++kj) {
        float* row = col + ((c * k + ki) * k + kj) * hw;
        for (int64_t oi = 0; oi < ho; ++oi) {
          int64_t ii = oi * w.stride - w.pad + ki;
          for (int64_t oj = 0; oj < wo; ++oj) {
            int64_t jj = oj * w.stride - w.pad + kj;
            row[oi * wo + oj] = (ii >= 0 && ii < H && jj >= 0 && jj < W) ? x[(c * H + ii) * W + jj] : 0.0f;
          }
        }
      }
}

void Col2Im(const Window& w, const float* col, float* dx) {
  const int64_t H = w.height, W = w.width, ho = w.out_h(), wo = w.out_w(), k = w.kernel, hw = ho * wo;
  for (int64_t c = 0; c < w.channels; ++c)
    for (int64_t ki = 0; ki < k; ++ki)
      for (int64_t kj = 0; kj < k; ++kj) {
        const float* row = col + ((c * k + ki) * k + kj) * hw;
        for (int64_t oi = 0; oi < ho; ++oi) {
          int64_t ii = oi * w.stride - w.pad + ki;
          if (ii < 0 || ii >= H) continue;
          for (int64_t oj = 0; oj < wo; ++oj) {
            int64_t jj = oj * w.stride - w.pad + kj;
            if (jj >= 0 && jj < W) dx[(c * H + ii) * W + jj] += row[oi * wo + oj];
          }
        }
      }
}

Status CpuDeviceOps::ConvForward(const Window& w, int64_t cout, const Tensor& x, const float* weight, float* y,
                                 Tensor* kept) {
  const int64_t b = x.dim(0), hw = w.out_h() * w.out_w(), ckk = w.channels * w.kernel * w.kernel,
                in = w.channels * w.height * w.width;
  *kept = AllocateTensor({b, ckk, hw}, Device::kCpu);
  for (int64_t bi = 0; bi < b; ++bi) {
    Im2Col(w, x.data() + bi * in, kept->data() + bi * ckk * hw);
    MapRM(y + bi * cout * hw, cout, hw).noalias() =
        CMapRM(weight, cout, ckk) * CMapRM(kept->data() + bi * ckk * hw, ckk, hw);
  }
  return Status::OK();
}

Status CpuDeviceOps::ConvBackwardData(const Window& w, int64_t cout, const Tensor& kept, const float* weight,
                                      const float* dy, Tensor* dx) {
  const int64_t b = kept.dim(0), hw = w.out_h() * w.out_w(), ckk = w.channels * w.kernel * w.kernel,
                in = w.channels * w.height * w.width;
  *dx = Tensor::Zeros({b, w.channels, w.height, w.width});
  RM dcol(ckk, hw);
  for (int64_t bi = 0; bi < b; ++bi) {
    dcol.noalias() = CMapRM(weight, cout, ckk).transpose() * CMapRM(dy + bi * cout * hw, cout, hw);
    Col2Im(w, dcol.data(), dx->data() + bi * in);
  }
  return Status::OK();
}

Status CpuDeviceOps::ConvBackwardFilter(const Window& w, int64_t cout, const Tensor& kept, const float* dy, float* dw) {
  const int64_t b = kept.dim(0), hw = w.out_h() * w.out_w(), ckk = w.channels * w.kernel * w.kernel;
  MapRM GW(dw, cout, ckk);
  for (int64_t bi = 0; bi < b; ++bi)
    GW.noalias() += CMapRM(dy + bi * cout * hw, cout, hw) * CMapRM(kept.data() + bi * ckk * hw, ckk, hw).transpose();
  return Status::OK();
}

}  // namespace

void SetGemmPrecision(DType precision) { g_gemm_precision.store(precision); }
DType GemmPrecision() { return g_gemm_precision.load(); }

DType EffectiveGemmPrecision(const GemmArgs& g) {
  const DType p = GemmPrecision();
  if (p != DType::kFp8) return p;
  const bool aligned = g.m % 16 == 0 && g.n % 16 == 0 && g.k % 16 == 0;
  return g.batch == 1 && aligned ? DType::kFp8 : DType::kBf16;
}

float RoundToE4m3(float x) {
  if (std::isnan(x)) return x;
  const float a = std::fabs(x);
  if (a >= kE4m3Max) return std::copysign(kE4m3Max, x);  // saturating (NVIDIA's __NV_SATFINITE)
  // The spacing of e4m3 values around a: 2^-9 below the smallest normal 2^-6, else 2^(E - 3) in [2^E, 2^(E+1)).
  int e = 0;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1): E = e - 1
  const float quantum = a < 0.015625f ? 0.001953125f : std::ldexp(1.0f, e - 4);
  return std::copysign(std::nearbyint(a / quantum) * quantum, x);  // a / quantum is exact; nearbyint: ties to even
}

float Fp8Scale(float amax) { return amax > 0 ? amax / kE4m3Max : 1.0f; }

float RoundGemmOperand(DType precision, float x) {
  // The tensor cores' 16-bit inputs: the storage formats' own round-to-nearest-even (common/half.h,
  // bit-equal to CUDA's __float2bfloat16_rn / __float2half_rn); fp32 and FP8 operands pass through
  // (FP8 is quantised per tensor by the caller).
  return precision == DType::kBf16 || precision == DType::kFp16 ? RoundTo(precision, x) : x;
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

DeviceOps* CpuOps() {
  static CpuDeviceOps ops;
  return &ops;
}

DeviceOps* OpsFor(Device d) { return d == Device::kCpu ? CpuOps() : CudaOps(); }

void SetCpuThreads(int threads) {
  g_threads = std::max(1, threads);
  Eigen::setNbThreads(g_threads);
}
int CpuThreads() { return g_threads; }

}  // namespace planner
