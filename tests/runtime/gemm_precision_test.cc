// The CPU's emulation of tensor-core GEMM precisions (device_ops.h SetGemmPrecision): bf16 / fp16
// operands rounded to nearest even, FP8 e4m3 per-tensor scaled, fp32 accumulation. Each emulated
// GEMM is checked against a brute-force product of operands rounded by an independent reference
// (bit manipulation for bf16 and fp16, a search of the 127 positive e4m3 values for FP8), and against the fp32 product within the format's error bound.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/kernels/device_ops.h"
#include "runtime/kernels/kernel.h"

using namespace planner;

namespace {

// Restores the process-wide precision (other tests of this executable assume fp32).
struct PrecisionGuard {
  explicit PrecisionGuard(DType p) { SetGemmPrecision(p); }
  ~PrecisionGuard() { SetGemmPrecision(DType::kFp32); }
};

// Every non-negative finite e4m3 (FN) value, by decoding its bit pattern: s.eeee.mmm, bias 7.
std::vector<float> E4m3Values() {
  std::vector<float> v;
  for (int code = 0; code < 127; ++code) {  // 127 = 0.1111.111 is NaN
    const int e = code >> 3, m = code & 7;
    v.push_back(e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + static_cast<float>(m) / 8, e - 7));
  }
  return v;
}

// The e4m3 value nearest x by search; ties to the even code; beyond 448 saturating.
float ReferenceE4m3(float x) {
  static const std::vector<float> values = E4m3Values();
  const float a = std::fabs(x);
  size_t best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    const float d = std::fabs(values[i] - a), db = std::fabs(values[best] - a);
    if (d < db || (d == db && i % 2 == 0)) best = i;
  }
  return std::copysign(values[best], x);
}

float ReferenceBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t lower = u & 0xffffu, upper = u & 0xffff0000u;
  const bool up = lower > 0x8000u || (lower == 0x8000u && (upper & 0x10000u));
  uint32_t r = upper + (up ? 0x10000u : 0u);
  float y;
  std::memcpy(&y, &r, 4);
  return y;
}

// fp16 by bits: normals drop 13 of float's 23 mantissa bits with ties to even (then overflow past 65504);
// subnormals round a 2^24 to an integer, ties to even.
float ReferenceHalf(float x) {
  const float a = std::fabs(x);
  float r;
  if (a < 6.103515625e-05f) {
    const double s = static_cast<double>(a) * 16777216.0;
    double f = std::floor(s);
    const double frac = s - f;
    if (frac > 0.5 || (frac == 0.5 && std::fmod(f, 2.0) == 1.0)) f += 1;
    r = static_cast<float>(f / 16777216.0);
  } else {
    uint32_t u;
    std::memcpy(&u, &a, 4);
    const uint32_t lower = u & 0x1fffu;
    uint32_t upper = u & ~0x1fffu;
    if (lower > 0x1000u || (lower == 0x1000u && (upper & 0x2000u))) upper += 0x2000u;
    std::memcpy(&r, &upper, 4);
    if (r > 65504.0f) r = std::numeric_limits<float>::infinity();
  }
  return std::copysign(r, x);
}

struct Problem {
  GemmArgs g;
  std::vector<float> a, b, c;
};

// A strided, optionally transposed problem with values spread over several binades.
Problem MakeProblem(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float beta) {
  Problem p;
  GemmArgs& g = p.g;
  g.ta = ta, g.tb = tb, g.m = m, g.n = n, g.k = k, g.alpha = 0.75f, g.beta = beta;
  g.lda = (ta ? m : k) + 3, g.ldb = (tb ? k : n) + 1, g.ldc = n + 2;
  p.a.resize(static_cast<size_t>((ta ? k : m) * g.lda));
  p.b.resize(static_cast<size_t>((tb ? n : k) * g.ldb));
  p.c.resize(static_cast<size_t>(m * g.ldc));
  uint64_t s = 7;
  auto next = [&s] {
    s = SplitMix(s);
    const double u = static_cast<double>(s >> 11) / 9007199254740992.0;
    return static_cast<float>((u - 0.5) * std::exp2(std::floor(u * 97) / 97 * 8 - 4));
  };
  for (auto* v : {&p.a, &p.b, &p.c})
    for (float& x : *v) x = next();
  return p;
}

float At(const std::vector<float>& v, bool t, int64_t ld, int64_t r, int64_t c) {
  return t ? v[static_cast<size_t>(c * ld + r)] : v[static_cast<size_t>(r * ld + c)];
}

// op(A)[i][j] and op(B)[i][j] after `round` (per element), in double; the result and sum |a||b|.
template <class RoundA, class RoundB>
void BruteForce(const Problem& p, RoundA ra, RoundB rb, double scale, std::vector<double>* c,
                std::vector<double>* mag) {
  const GemmArgs& g = p.g;
  c->assign(static_cast<size_t>(g.m * g.n), 0);
  mag->assign(c->size(), 0);
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double acc = 0, abs = 0;
      for (int64_t l = 0; l < g.k; ++l) {
        const double x = ra(At(p.a, g.ta, g.lda, i, l)), y = rb(At(p.b, g.tb, g.ldb, l, j));
        acc += x * y;
        abs += std::fabs(x * y);
      }
      (*c)[static_cast<size_t>(i * g.n + j)] = g.alpha * scale * acc + g.beta * p.c[static_cast<size_t>(i * g.ldc + j)];
      (*mag)[static_cast<size_t>(i * g.n + j)] =
          std::fabs(g.alpha * scale) * abs + std::fabs(g.beta * p.c[static_cast<size_t>(i * g.ldc + j)]);
    }
  }
}

std::vector<float> Run(Problem p, DType precision) {
  PrecisionGuard guard(precision);
  REQUIRE(CpuOps()->Gemm(p.g, p.a.data(), p.b.data(), p.c.data()).ok());
  return p.c;
}

// |got - want| <= tol * mag per element, and returns the largest |got - want| seen.
double CheckAgainst(const Problem& p, const std::vector<float>& got, const std::vector<double>& want,
                    const std::vector<double>& mag, double tol) {
  double worst = 0;
  for (int64_t i = 0; i < p.g.m; ++i) {
    for (int64_t j = 0; j < p.g.n; ++j) {
      const double d = std::fabs(got[static_cast<size_t>(i * p.g.ldc + j)] - want[static_cast<size_t>(i * p.g.n + j)]);
      worst = std::max(worst, d);
      CHECK(d <= tol * mag[static_cast<size_t>(i * p.g.n + j)] + 1e-30);
    }
  }
  return worst;
}

// fp32 summation over k products, in units of sum |a||b|.
double SumTol(int64_t k) { return static_cast<double>(k + 2) * std::ldexp(1.0, -24); }

}  // namespace

TEST_CASE("RoundToE4m3: ties to even, saturation, subnormals, NaN; equal to the reference search") {
  CHECK(RoundToE4m3(0.0f) == 0.0f);
  CHECK(RoundToE4m3(1.0625f) == 1.0f);   // between 1 and 1.125: the even mantissa
  CHECK(RoundToE4m3(1.1875f) == 1.25f);  // between 1.125 and 1.25: the even mantissa
  CHECK(RoundToE4m3(232.0f) == 224.0f);  // between 224 (1.110) and 240 (1.111)
  CHECK(RoundToE4m3(-500.0f) == -448.0f);
  CHECK(RoundToE4m3(std::numeric_limits<float>::infinity()) == 448.0f);
  CHECK(RoundToE4m3(std::ldexp(1.0f, -10)) == 0.0f);                      // half the smallest subnormal: to 0 (even)
  CHECK(RoundToE4m3(3 * std::ldexp(1.0f, -10)) == std::ldexp(1.0f, -8));  // 1.5 subnormal quanta: to 2 (even)
  CHECK(std::isnan(RoundToE4m3(std::nanf(""))));
  for (float x = -470; x < 470; x += 0.0371f) REQUIRE(RoundToE4m3(x) == ReferenceE4m3(x));
  for (float x = 1e-4f; x < 0.1f; x *= 1.0137f) REQUIRE(RoundToE4m3(x) == ReferenceE4m3(x));
  CHECK(Fp8Scale(0) == 1.0f);
  CHECK(Fp8Scale(896) == 2.0f);
}

TEST_CASE("RoundGemmOperand: bf16 and fp16 round to nearest even; fp32 unchanged") {
  const float one = 1.0f;
  CHECK(RoundGemmOperand(DType::kBf16, one + std::ldexp(1.0f, -8)) == one);
  CHECK(RoundGemmOperand(DType::kBf16, one + 3 * std::ldexp(1.0f, -8)) == one + std::ldexp(1.0f, -6));
  CHECK(RoundGemmOperand(DType::kFp16, one + std::ldexp(1.0f, -11)) == one);
  CHECK(std::isinf(RoundGemmOperand(DType::kFp16, 65520.0f)));
  CHECK(RoundGemmOperand(DType::kFp32, 0.1f) == 0.1f);
  CHECK(std::isnan(RoundGemmOperand(DType::kBf16, std::nanf(""))));
  for (float x = -3e4f; x < 3e4f; x += 1.37f) REQUIRE(RoundGemmOperand(DType::kBf16, x) == ReferenceBf16(x));
  for (float x = -7e4f; x < 7e4f; x += 1.37f) REQUIRE(RoundGemmOperand(DType::kFp16, x) == ReferenceHalf(x));
  for (float x = 1e-9f; x < 1e-3f; x *= 1.0173f)
    REQUIRE(RoundGemmOperand(DType::kFp16, x) == ReferenceHalf(x));  // subnormals
  CHECK(RoundGemmOperand(DType::kFp16, 65519.0f) == 65504.0f);
  CHECK(RoundGemmOperand(DType::kFp16, 3 * std::ldexp(1.0f, -25)) ==
        std::ldexp(1.0f, -23));  // 1.5 subnormal quanta: to 2 (even)
}

TEST_CASE(
    "16-bit GEMMs: the rounded operands' exact product up to fp32 summation, and within the format's bound of fp32") {
  for (DType precision : {DType::kBf16, DType::kFp16}) {
    // u: the unit roundoff of the operands (8 and 11 significant bits).
    const double u = precision == DType::kBf16 ? std::ldexp(1.0, -9) : std::ldexp(1.0, -12);
    auto round = [precision](float x) { return precision == DType::kBf16 ? ReferenceBf16(x) : ReferenceHalf(x); };
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        CAPTURE(DTypeName(precision));
        CAPTURE(ta);
        CAPTURE(tb);
        const Problem p = MakeProblem(ta, tb, 19, 23, 77, 0.5f);
        const std::vector<float> got = Run(p, precision), fp32 = Run(p, DType::kFp32);
        std::vector<double> want, mag;
        BruteForce(p, round, round, 1.0, &want, &mag);
        CheckAgainst(p, got, want, mag, SumTol(p.g.k));
        std::vector<double> exact;
        BruteForce(
            p, [](float x) { return x; }, [](float x) { return x; }, 1.0, &exact, &mag);
        const double worst = CheckAgainst(p, got, exact, mag, 2 * u + u * u + SumTol(p.g.k));
        CHECK(worst > 1e-7);  // the operands were rounded: not the fp32 product
        CHECK(CheckAgainst(p, fp32, exact, mag, SumTol(p.g.k)) < worst);
      }
    }
  }
}

TEST_CASE("FP8 GEMMs: per-tensor scaled e4m3 operands, fp32 accumulation; batched and unaligned products in bf16") {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      const Problem p = MakeProblem(ta, tb, 32, 48, 64, 1.0f);
      REQUIRE(EffectiveGemmPrecision(p.g) == DType::kFp32);
      float amax_a = 0, amax_b = 0;
      for (int64_t i = 0; i < p.g.m; ++i)
        for (int64_t l = 0; l < p.g.k; ++l) amax_a = std::max(amax_a, std::fabs(At(p.a, ta, p.g.lda, i, l)));
      for (int64_t l = 0; l < p.g.k; ++l)
        for (int64_t j = 0; j < p.g.n; ++j) amax_b = std::max(amax_b, std::fabs(At(p.b, tb, p.g.ldb, l, j)));
      const float sa = amax_a / 448, sb = amax_b / 448;
      std::vector<double> want, mag, exact, mag_exact;
      BruteForce(
          p, [sa](float x) { return ReferenceE4m3(x / sa); }, [sb](float x) { return ReferenceE4m3(x / sb); },
          static_cast<double>(sa) * sb, &want, &mag);
      {
        PrecisionGuard guard(DType::kFp8);
        CHECK(EffectiveGemmPrecision(p.g) == DType::kFp8);
      }
      const std::vector<float> got = Run(p, DType::kFp8);
      CheckAgainst(p, got, want, mag, SumTol(p.g.k) + 1e-6);
      // Against fp32: each operand off by at most 2^-4 of itself (3 mantissa bits) or half a subnormal
      // quantum (2^-10 of its scale); the bound per element sums those over k.
      BruteForce(
          p, [](float x) { return x; }, [](float x) { return x; }, 1.0, &exact, &mag_exact);
      double worst_ratio = 0;
      for (int64_t i = 0; i < p.g.m; ++i) {
        for (int64_t j = 0; j < p.g.n; ++j) {
          double bound = 0;
          for (int64_t l = 0; l < p.g.k; ++l) {
            const double x = At(p.a, ta, p.g.lda, i, l), y = At(p.b, tb, p.g.ldb, l, j);
            const double ex = std::max(std::fabs(x) / 16, std::ldexp(static_cast<double>(sa), -10)),
                         ey = std::max(std::fabs(y) / 16, std::ldexp(static_cast<double>(sb), -10));
            bound += ex * std::fabs(y) + std::fabs(x) * ey + ex * ey;
          }
          bound = p.g.alpha * bound + SumTol(p.g.k) * mag_exact[static_cast<size_t>(i * p.g.n + j)];
          const double d =
              std::fabs(got[static_cast<size_t>(i * p.g.ldc + j)] - exact[static_cast<size_t>(i * p.g.n + j)]);
          CHECK(d <= bound);
          worst_ratio = std::max(worst_ratio, d / bound);
        }
      }
      CHECK(worst_ratio > 0.01);  // quantisation moved the result: the bound is not vacuous
    }
  }
  SUBCASE("batched (the attention core) and unaligned products fall back to bf16") {
    Problem p = MakeProblem(false, true, 19, 23, 77, 0.0f);
    PrecisionGuard guard(DType::kFp8);
    CHECK(EffectiveGemmPrecision(p.g) == DType::kBf16);
    Problem q = MakeProblem(false, false, 32, 32, 32, 0.0f);
    q.g.batch = 2;
    CHECK(EffectiveGemmPrecision(q.g) == DType::kBf16);
    q.g.batch = 1;
    CHECK(EffectiveGemmPrecision(q.g) == DType::kFp8);
    const std::vector<float> fp8 = Run(p, DType::kFp8), bf16 = Run(p, DType::kBf16);
    CHECK(fp8 == bf16);
  }
}

TEST_CASE("fp32 GEMM precision is the default and bit-identical to before any change") {
  CHECK(GemmPrecision() == DType::kFp32);
  const Problem p = MakeProblem(true, false, 17, 13, 29, 1.0f);
  const std::vector<float> before = Run(p, DType::kFp32);
  (void)Run(p, DType::kBf16);
  CHECK(GemmPrecision() == DType::kFp32);
  CHECK(Run(p, DType::kFp32) == before);
}
