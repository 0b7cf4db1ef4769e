#include "runtime/kernels/tensor.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/kernels/cuda_api.h"

namespace planner {

namespace {

struct Counters {
  std::atomic<int64_t> current{0}, peak{0};
};
Counters& CountersFor(Device d) {
  static Counters cpu, cuda;
  return d == Device::kCpu ? cpu : cuda;
}

void Count(Device d, int64_t bytes) {
  Counters& c = CountersFor(d);
  int64_t now = c.current.fetch_add(bytes) + bytes;
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}

}  // namespace

const char* DeviceName(Device d) { return d == Device::kCpu ? "cpu" : "cuda"; }

MemoryStats GetMemoryStats(Device d) {
  Counters& c = CountersFor(d);
  return MemoryStats{c.current.load(), c.peak.load()};
}

void KeepFreedHostMemory() {
#ifdef __GLIBC__
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_TOP_PAD, 64 << 20);
    return true;
  }();
  (void)done;
#endif
}

void ResetPeakMemory(Device d) {
  Counters& c = CountersFor(d);
  c.peak.store(c.current.load());
}

struct Tensor::Storage {
  void* ptr = nullptr;
  int64_t bytes = 0;
  Device device = Device::kCpu;
  bool counted = true;
  ~Storage() {
    if (ptr == nullptr) return;
    if (device == Device::kCpu) std::free(ptr);
    else CudaFree(ptr);
    if (counted) Count(device, -bytes);
  }
};

int64_t Tensor::numel() const {
  if (storage_ == nullptr) return 0;
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

Tensor Tensor::Allocate(const std::vector<int64_t>& shape, Device device, bool counted) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("negative tensor dimension");
    n *= d;
  }
  Tensor t;
  t.storage_ = std::make_shared<Tensor::Storage>();
  t.storage_->bytes = std::max<int64_t>(n, 1) * 4;
  t.storage_->device = device;
  if (device == Device::kCpu) {
    // 64-byte alignment for Eigen's vectorised loads.
    size_t bytes = (static_cast<size_t>(t.storage_->bytes) + 63) / 64 * 64;
    t.storage_->ptr = std::aligned_alloc(64, bytes);
    if (t.storage_->ptr == nullptr) throw std::bad_alloc();
  } else {
    t.storage_->ptr = CudaMalloc(t.storage_->bytes);
  }
  t.storage_->counted = counted;
  if (counted) Count(device, t.storage_->bytes);
  t.data_ = static_cast<float*>(t.storage_->ptr);
  t.shape_ = shape;
  t.device_ = device;
  return t;
}

Tensor AllocateTensor(const std::vector<int64_t>& shape, Device device) { return Tensor::Allocate(shape, device, true); }
Tensor AllocateScratch(const std::vector<int64_t>& shape, Device device) { return Tensor::Allocate(shape, device, false); }

Tensor Tensor::Zeros(const std::vector<int64_t>& shape, Device device) {
  Tensor t = AllocateTensor(shape, device);
  if (device == Device::kCpu) std::memset(t.data_, 0, static_cast<size_t>(t.numel()) * 4);
  else CudaMemset(t.data_, 0, t.numel() * 4);
  return t;
}

Tensor Tensor::FromVector(const std::vector<int64_t>& shape, const std::vector<float>& values) {
  Tensor t = AllocateTensor(shape, Device::kCpu);
  if (static_cast<int64_t>(values.size()) != t.numel()) throw std::invalid_argument("FromVector: size does not match the shape");
  std::memcpy(t.data_, values.data(), values.size() * 4);
  return t;
}

Tensor Tensor::Reshaped(const std::vector<int64_t>& shape) const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n != numel()) throw std::invalid_argument(fmt::format("cannot reshape {} to {} elements", ShapeString(), n));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::View(int64_t offset, const std::vector<int64_t>& shape) const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (offset < 0 || offset + n > numel()) throw std::invalid_argument(fmt::format("view of {} elements at {} exceeds {}", n, offset, ShapeString()));
  Tensor t = *this;
  t.shape_ = shape;
  t.data_ = data_ + offset;
  return t;
}

Tensor Tensor::To(Device device) const {
  if (device == device_ || empty()) return *this;
  Tensor t = AllocateTensor(shape_, device);
  if (device == Device::kCuda) CudaCopyToDevice(t.data_, data_, numel() * 4);
  else CudaCopyToHost(t.data_, data_, numel() * 4);
  return t;
}

std::vector<float> Tensor::ToVector() const {
  std::vector<float> v(static_cast<size_t>(numel()));
  if (v.empty()) return v;
  if (device_ == Device::kCpu) std::memcpy(v.data(), data_, v.size() * 4);
  else CudaCopyToHost(v.data(), data_, numel() * 4);
  return v;
}

std::string Tensor::ShapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
  return s + "]";
}

}  // namespace planner
