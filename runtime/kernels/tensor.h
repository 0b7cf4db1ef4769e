// Tensor: a dense float32 array with a shape and a device, sharing its
// storage on copy (Reshaped views share too). CPU storage is host memory;
// CUDA storage is device memory (runtime/kernels/cuda_*.cu). Every
// allocation is counted per device, so a profile can report the peak memory
// of a step. Thread-compatible; the counters are atomic.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace planner {

enum class Device { kCpu, kCuda };
const char* DeviceName(Device d);

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
  static Tensor Zeros(const std::vector<int64_t>& shape, Device device = Device::kCpu);
  // Host data copied in (CPU).
  static Tensor FromVector(const std::vector<int64_t>& shape, const std::vector<float>& values);

  bool empty() const { return storage_ == nullptr; }
  Device device() const { return device_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[static_cast<size_t>(i < 0 ? static_cast<int>(shape_.size()) + i : i)]; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const;
  int64_t bytes() const { return numel() * 4; }
  float* data() { return data_; }
  const float* data() const { return data_; }
  // Same storage, another shape of the same element count.
  Tensor Reshaped(const std::vector<int64_t>& shape) const;
  // Same storage: `shape`'s elements starting `offset` elements in (must fit).
  Tensor View(int64_t offset, const std::vector<int64_t>& shape) const;
  // This tensor on `device`: itself when it is there already, else a copy.
  Tensor To(Device device) const;
  // Host copy of the values (any device).
  std::vector<float> ToVector() const;
  std::string ShapeString() const;
  // Tensors sharing this storage (views and copies included); 0 when empty.
  long use_count() const { return storage_ ? storage_.use_count() : 0; }

 private:
  struct Storage;
  std::shared_ptr<Storage> storage_;
  float* data_ = nullptr;
  std::vector<int64_t> shape_;
  Device device_ = Device::kCpu;
  static Tensor Allocate(const std::vector<int64_t>& shape, Device device, bool counted);
  friend Tensor AllocateTensor(const std::vector<int64_t>& shape, Device device);
  friend Tensor AllocateScratch(const std::vector<int64_t>& shape, Device device);
};

// Uninitialised allocation (CUDA: cudaMalloc; fails loudly without a device).
Tensor AllocateTensor(const std::vector<int64_t>& shape, Device device);
// The same, not counted in the memory stats: a kernel's working memory within one pass (the
// role of an Eigen temporary), freed before the pass returns.
Tensor AllocateScratch(const std::vector<int64_t>& shape, Device device);

}  // namespace planner
