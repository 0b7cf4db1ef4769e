// 16-bit floating-point formats on the host: bfloat16 (1 sign, 8 exponent, 7 mantissa bits: fp32's
// range, 8 significant bits) and IEEE binary16 "fp16" (1, 5, 10: 11 significant bits, largest finite
// 65504, subnormals down to 2^-24). Conversions from float round to nearest, ties to even (what
// cuda_bf16.h's __float2bfloat16_rn / cuda_fp16.h's __float2half_rn do, so host and device agree
// bit for bit); NaN stays NaN (quiet), +-inf stays inf, fp16 overflow (|x| >= 65520) becomes inf,
// and values below fp16's normal range become its subnormals (or +-0). Header-only and branch-light:
// the runtime's mixed-precision kernels call these in their element loops. Pure functions.
#pragma once

#include <bit>
#include <cstdint>

namespace planner {

inline uint16_t FloatToBf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: keep sign, force quiet
  // Round to nearest even on the 16 dropped bits; carries into the exponent (and to inf) are correct.
  const uint32_t bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + bias) >> 16);
}

inline float Bf16ToFloat(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t FloatToHalf(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN (quiet)
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf (and inf)
  if (a >= 0x38800000u) {                // normal in fp16 (>= 2^-14): rebias the exponent, round 13 bits away
    const uint32_t r = a - 0x38000000u;  // exponent 127 -> 15 bias, still 23-bit mantissa
    const uint32_t bias = 0xfffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((r + bias) >> 13));
  }
  if (a < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): +-0
  // Subnormal: value = m * 2^-24 with m = round(a_value * 2^24), computed on the full significand.
  const int exp = static_cast<int>(a >> 23);          // 102..112
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;  // 24-bit significand, value = mant * 2^(exp-150)
  const int shift = 126 - exp;                        // bits to drop so the unit is 2^-24: 14..24
  const uint32_t half_way = 1u << (shift - 1);
  uint32_t m = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1);
  if (rest > half_way || (rest == half_way && (m & 1u))) ++m;  // may carry into the smallest normal: correct
  return static_cast<uint16_t>(sign | m);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in float.
  const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

}  // namespace planner
