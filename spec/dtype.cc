#include "spec/dtype.h"

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
DType DefaultGradDType(DType model) { return model == DType::kFp16 ? DType::kFp16 : DType::kFp32; }
bool GradDTypeAllowed(DType model, DType grad) {
  if (grad == DType::kFp32) return true;
  if (grad == DType::kFp8) return false;
  return grad == (model == DType::kFp8 ? DType::kBf16 : model);
}
DType EffectiveGradDType(DType model, std::optional<DType> stated) {
  return stated && GradDTypeAllowed(model, *stated) ? *stated : DefaultGradDType(model);
}
std::string GradDTypeChoices(DType model) {
  return model == DType::kFp32 ? "fp32"
                               : std::string("fp32 or ") + DTypeName(model == DType::kFp8 ? DType::kBf16 : model);
}
bool ParseDType(const std::string& text, DType* out) {
  if (text == "fp32") {
    *out = DType::kFp32;
    return true;
  }
  if (text == "fp16") {
    *out = DType::kFp16;
    return true;
  }
  if (text == "bf16") {
    *out = DType::kBf16;
    return true;
  }
  if (text == "fp8") {
    *out = DType::kFp8;
    return true;
  }
  return false;
}

}  // namespace planner
