// Tensor: a dense array of fp32, bf16 or fp16 elements (spec/layer.h DType; fp8 is never a storage
// dtype here: fp8 plans store bf16) with a shape and a device, sharing its storage on copy (Reshaped
// views share too). Kernels compute on fp32 tensors through data(); 16-bit tensors hold the
// activations, weights and Saved state of a mixed-precision run (runtime/kernels/mixed_precision.h)
// and are read through raw(), ToVector() or a conversion (Converted / ConvertedScratch). CPU storage is host memory;
// CUDA storage is device memory (runtime/kernels/cuda_*.cu). Every
// allocation is counted per device, so a profile can report the peak memory
// of a step. Thread-compatible; the counters are atomic.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spec/kinds.h"
#include "spec/layer.h"

namespace planner {

struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
};
// Bytes live and the peak since the last ResetPeakMemory, per device.
MemoryStats GetMemoryStats(Device d);
void ResetPeakMemory(Device d);
// Host memory policy of a training process: freed blocks stay in the process for reuse
// (glibc: no mmap below 32 MiB, no trimming; a caching allocator's behaviour), instead of
// returning to the kernel and coming back as zeroed page faults on every microbatch. It measured
// 131 ms against 151 ms per tiny-gpt iteration (1 rank, medians of 6; docs/performance.md).
// Idempotent; a no-op without glibc.
void KeepFreedHostMemory();

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled.
  static Tensor Zeros(const std::vector<int64_t>& shape, Device device = Device::kCpu, DType dtype = DType::kFp32);
  // Host data copied in (CPU), rounded to `dtype` (round to nearest even; fp16 overflow -> inf).
  static Tensor FromVector(const std::vector<int64_t>& shape, const std::vector<float>& values,
                           DType dtype = DType::kFp32);

  bool empty() const { return storage_ == nullptr; }
  Device device() const { return device_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[static_cast<size_t>(i < 0 ? static_cast<int>(shape_.size()) + i : i)]; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const;
  DType dtype() const { return dtype_; }
  // Real bytes of the elements: numel x 4 (fp32) or x 2 (bf16 / fp16).
  int64_t bytes() const { return numel() * DTypeBytes(dtype_); }
  // The fp32 elements; a 16-bit tensor aborts the process with a message naming its dtype (a kernel
  // reading bf16 bits as floats is a bug no caller can recover from, and silent garbage is worse).
  float* data() {
    if (dtype_ != DType::kFp32) AbortNotFp32();
    return static_cast<float*>(data_);
  }
  const float* data() const {
    if (dtype_ != DType::kFp32) AbortNotFp32();
    return static_cast<const float*>(data_);
  }
  // The elements in any dtype (uint16_t bit patterns for bf16 / fp16; common/half.h decodes them).
  void* raw() { return data_; }
  const void* raw() const { return data_; }
  // A new tensor of this shape on this device holding the elements converted to `to` (RNE; fp16
  // overflow -> inf; NaN stays NaN): counted (Converted) or a pass's uncounted working memory
  // (ConvertedScratch). Converting to the same dtype copies. CUDA tensors convert on the device.
  Tensor Converted(DType to) const;
  Tensor ConvertedScratch(DType to) const;
  // Same storage, another shape of the same element count.
  Tensor Reshaped(const std::vector<int64_t>& shape) const;
  // Same storage: `shape`'s elements starting `offset` elements in (must fit).
  Tensor View(int64_t offset, const std::vector<int64_t>& shape) const;
  // This tensor on `device`: itself when it is there already, else a copy.
  Tensor To(Device device) const;
  // Host copy of the values as floats (any device, any dtype: 16-bit elements decoded).
  std::vector<float> ToVector() const;
  std::string ShapeString() const;
  // Tensors sharing this storage (views and copies included); 0 when empty.
  long use_count() const { return storage_ ? storage_.use_count() : 0; }

 private:
  struct Storage;
  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  std::vector<int64_t> shape_;
  Device device_ = Device::kCpu;
  DType dtype_ = DType::kFp32;
  [[noreturn]] void AbortNotFp32() const;
  Tensor ConvertTo(DType to, bool counted) const;
  static Tensor Allocate(const std::vector<int64_t>& shape, Device device, bool counted, DType dtype);
  friend Tensor AllocateTensor(const std::vector<int64_t>& shape, Device device, DType dtype);
  friend Tensor AllocateScratch(const std::vector<int64_t>& shape, Device device, DType dtype);
};

// Uninitialised allocation (CUDA: cudaMalloc; fails loudly without a device). dtype kFp8 throws
// std::invalid_argument: fp8 is a GEMM precision, never a storage dtype.
Tensor AllocateTensor(const std::vector<int64_t>& shape, Device device, DType dtype = DType::kFp32);
// The same, not counted in the memory stats: a kernel's working memory within one pass (the
// role of an Eigen temporary), freed before the pass returns.
Tensor AllocateScratch(const std::vector<int64_t>& shape, Device device, DType dtype = DType::kFp32);

}  // namespace planner
