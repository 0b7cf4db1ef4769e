#include "runtime/kernels/tensor.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include <fmt/format.h>

#include "common/half.h"
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
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {}
}

}  // namespace

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

Tensor Tensor::Allocate(const std::vector<int64_t>& shape, Device device, bool counted, DType dtype) {
  if (dtype == DType::kFp8) throw std::invalid_argument("fp8 is not a tensor storage dtype (fp8 plans store bf16)");
  const int64_t elem = DTypeBytes(dtype);
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("negative tensor dimension");
    n *= d;
  }
  Tensor t;
  t.storage_ = std::make_shared<Tensor::Storage>();
  t.storage_->bytes = std::max<int64_t>(n, 1) * elem;
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
  t.data_ = t.storage_->ptr;
  t.shape_ = shape;
  t.device_ = device;
  t.dtype_ = dtype;
  return t;
}

Tensor AllocateTensor(const std::vector<int64_t>& shape, Device device, DType dtype) {
  return Tensor::Allocate(shape, device, true, dtype);
}
Tensor AllocateScratch(const std::vector<int64_t>& shape, Device device, DType dtype) {
  return Tensor::Allocate(shape, device, false, dtype);
}

void Tensor::AbortNotFp32() const {
  std::fprintf(stderr, "planner: internal error: data() of a %s tensor %s (fp32 only; use raw() or a conversion)\n",
               DTypeName(dtype_), ShapeString().c_str());
  std::abort();
}

Tensor Tensor::Zeros(const std::vector<int64_t>& shape, Device device, DType dtype) {
  Tensor t = AllocateTensor(shape, device, dtype);
  if (device == Device::kCpu) std::memset(t.data_, 0, static_cast<size_t>(t.bytes()));
  else CudaMemset(t.data_, 0, t.bytes());
  return t;
}

namespace {

// n elements from `from` to `to` on the host (same dtype: a copy).
void ConvertHost(const void* src, DType from, void* dst, DType to, int64_t n) {
  if (from == to) {
    std::memcpy(dst, src, static_cast<size_t>(n * DTypeBytes(from)));
    return;
  }
  std::vector<float> tmp;
  const float* f = static_cast<const float*>(src);
  if (from != DType::kFp32) {
    tmp.resize(static_cast<size_t>(n));
    const uint16_t* h = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i)
      tmp[static_cast<size_t>(i)] = from == DType::kFp16 ? HalfToFloat(h[i]) : Bf16ToFloat(h[i]);
    f = tmp.data();
  }
  if (to == DType::kFp32) {
    std::memcpy(dst, f, static_cast<size_t>(n) * 4);
    return;
  }
  uint16_t* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = to == DType::kFp16 ? FloatToHalf(f[i]) : FloatToBf16(f[i]);
}

}  // namespace

Tensor Tensor::FromVector(const std::vector<int64_t>& shape, const std::vector<float>& values, DType dtype) {
  Tensor t = AllocateTensor(shape, Device::kCpu, dtype);
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw std::invalid_argument("FromVector: size does not match the shape");
  ConvertHost(values.data(), DType::kFp32, t.data_, dtype, t.numel());
  return t;
}

Tensor Tensor::ConvertTo(DType to, bool counted) const {
  if (empty()) return Tensor();
  Tensor t = Allocate(shape_, device_, counted, to);
  if (device_ == Device::kCpu) {
    ConvertHost(data_, dtype_, t.data_, to, numel());
  } else {
    Status st = CudaConvert(data_, dtype_, t.data_, to, numel());
    if (!st.ok()) throw std::runtime_error(st.ToString());
  }
  return t;
}

Tensor Tensor::Converted(DType to) const { return ConvertTo(to, true); }
Tensor Tensor::ConvertedScratch(DType to) const { return ConvertTo(to, false); }

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
  if (offset < 0 || offset + n > numel())
    throw std::invalid_argument(fmt::format("view of {} elements at {} exceeds {}", n, offset, ShapeString()));
  Tensor t = *this;
  t.shape_ = shape;
  t.data_ = static_cast<char*>(data_) + offset * DTypeBytes(dtype_);
  return t;
}

Tensor Tensor::To(Device device) const {
  if (device == device_ || empty()) return *this;
  Tensor t = AllocateTensor(shape_, device, dtype_);
  if (device == Device::kCuda) CudaCopyToDevice(t.data_, data_, bytes());
  else CudaCopyToHost(t.data_, data_, bytes());
  return t;
}

std::vector<float> Tensor::ToVector() const {
  std::vector<float> v(static_cast<size_t>(numel()));
  if (v.empty()) return v;
  if (device_ == Device::kCpu) {
    ConvertHost(data_, dtype_, v.data(), DType::kFp32, numel());
  } else if (dtype_ == DType::kFp32) {
    CudaCopyToHost(v.data(), data_, bytes());
  } else {
    std::vector<uint16_t> h(v.size());
    CudaCopyToHost(h.data(), data_, bytes());
    ConvertHost(h.data(), dtype_, v.data(), DType::kFp32, numel());
  }
  return v;
}

std::string Tensor::ShapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
  return s + "]";
}

}  // namespace planner
