// What the layer-kernel tests (kernels_test, llama_layers_test, moe_layers_test,
// mixed_precision_test) build their cases from: deterministic uniform tensors and layers
// resolved by spec/'s shape inference. Doctest files only (REQUIRE on a layer that does not infer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "runtime/kernels/kernel.h"
#include "spec/layer.h"
#include "spec/layer_catalog.h"

namespace planner {

// Uniform(-scale, scale) values from `seed` (FillUniform), fp32 on the CPU.
inline Tensor Random(const std::vector<int64_t>& shape, uint64_t seed, float scale = 1.0f) {
  Tensor t = Tensor::Zeros(shape);
  FillUniform(&t, seed, scale);
  return t;
}

// The kind named `type` (a test's layers are named by their kinds' spellings).
inline LayerKind KindNamed(const std::string& type) {
  LayerKind kind = LayerKind::kLinear;
  INFO(type);
  REQUIRE(ParseLayerKind(type, &kind));
  return kind;
}

// `type` over input shape `in` (without the batch) with attributes `a`, inferred as a model file's
// layer is (fp32), named after its type.
inline Layer MakeLayer(const std::string& type, std::vector<int64_t> in, const LayerAttrs& a) {
  Layer l;
  Status s = InferLayer(type, a, in, DType::kFp32, &l);
  INFO(type << ": " << s.ToString());
  REQUIRE(s.ok());
  l.name = type;
  return l;
}

}  // namespace planner
