// DType: the storage and GEMM precisions a model trains in, their names and
// bytes, and the gradient buffer's dtype as the engines keep it. Parsed once where a file or flag
// is read. Included by CUDA sources (C++17): nothing newer here (spec/dtype_round.h rounds floats).
#pragma once

#include <optional>
#include <string>

namespace planner {

// kFp8: FP8 GEMMs (Transformer Engine's hybrid E4M3/E5M2 recipe) with bf16
// activations, weights and everything else: 2 bytes per element stored.
enum class DType { kFp32, kFp16, kBf16, kFp8 };
int DTypeBytes(DType dtype);
const char* DTypeName(DType dtype);
// Parses "fp32" | "fp16" | "bf16" | "fp8"; false on anything else.
bool ParseDType(const std::string& text, DType* out);
// The dtype gradients are accumulated over microbatches and reduced over data parallelism in, as
// Megatron-LM does by default (arguments.py: accumulate_allreduce_grads_in_fp32 is forced on for
// bf16; off for fp16, so the DDP grad buffer takes the parameters' fp16; fp32 models fp32): fp32
// for fp32, bf16 and fp8 (bf16 storage), fp16 for fp16.
DType DefaultGradDType(DType model);
// Whether `grad` is a gradient dtype a model trained in `model` can use: fp32, or the model's own
// 16-bit storage dtype (fp16 for fp16; bf16 for bf16 and fp8: Megatron --grad-reduce-in-bf16).
bool GradDTypeAllowed(DType model, DType grad);
// The gradient dtype a plan or launch file states, or DefaultGradDType(model) where it states none
// (files written before the field) or one the model does not allow.
DType EffectiveGradDType(DType model, std::optional<DType> stated);
// The gradient dtypes `model` allows, as error messages name them: "fp32", or "fp32 or <16-bit dtype>".
std::string GradDTypeChoices(DType model);

}  // namespace planner
