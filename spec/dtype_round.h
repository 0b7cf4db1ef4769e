// Rounding a float to a storage dtype's grid (common/half.h's conversions chosen by DType): the CPU
// GEMMs' operand rounding and the mixed-precision tests. Header-only; C++20 (std::bit_cast), so
// not for CUDA sources.
#pragma once

#include "common/half.h"
#include "spec/dtype.h"

namespace planner {

// x rounded to `dtype`'s grid and back (fp32: x itself; kFp8 stores bf16, so it rounds to bf16).
inline float RoundTo(DType dtype, float x) {
  switch (dtype) {
    case DType::kBf16:
    case DType::kFp8: return Bf16ToFloat(FloatToBf16(x));
    case DType::kFp16: return HalfToFloat(FloatToHalf(x));
    case DType::kFp32: break;
  }
  return x;
}

}  // namespace planner
