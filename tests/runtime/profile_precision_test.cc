// The profiler in a GEMM precision: the profile records the precision it was timed in and the
// process's precision is restored after; the published peak table matches devices by name and
// compute capability and gives no figure it does not have.
#include "profiler/layer_profiler.h"
#include "profiler/peaks.h"
#include "runtime/kernels/device_ops.h"
#include "spec/profile.h"
#include "tests/test_util.h"

namespace planner {
namespace {

TEST_CASE("a bf16 profile records dtype bf16, times in bf16 and restores the GEMM precision") {
  ModelSpec m;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/tiny-gpt.yaml"), &m));
  LayerProfileOptions o;
  o.precision = DType::kBf16;
  o.min_repetitions = 1;
  o.warmup = 0;
  o.rounds = 1;
  o.budget_s = 0.01;
  o.progress = false;
  REQUIRE(GemmPrecision() == DType::kFp32);
  Profile p;
  REQUIRE_OK(ProfileModel(m, o, &p));
  CHECK(p.dtype == DType::kBf16);
  CHECK(GemmPrecision() == DType::kFp32);
  // Weights stored in bf16 (WrapMixedPrecision): 2 bytes per parameter in the profile's sizes.
  for (size_t i = 0; i < p.layers.size(); ++i)
    CHECK(p.layers[i].params_bytes == 2.0 * static_cast<double>(m.layers[i].params));
  // The file round trip keeps it (an fp8 one too: profiles may now be timed in fp8).
  for (DType dtype : {DType::kBf16, DType::kFp8}) {
    p.dtype = dtype;
    Profile back;
    REQUIRE_OK(ParseProfile("p.yaml", ProfileToYaml(p), &back));
    CHECK(back.dtype == dtype);
  }
}

TEST_CASE("published dense peaks: H100 SXM / PCIe, H200, A100; nothing for unknown devices or precisions") {
  CHECK(PublishedGpuPeak("NVIDIA H100 80GB HBM3", 90, DType::kBf16).tflops == doctest::Approx(989.4));
  CHECK(PublishedGpuPeak("NVIDIA H100 80GB HBM3", 90, DType::kFp8).tflops == doctest::Approx(1978.9));
  CHECK(PublishedGpuPeak("NVIDIA H100 80GB HBM3", 90, DType::kFp32).tflops == doctest::Approx(494.7));  // TF32
  CHECK(PublishedGpuPeak("NVIDIA H100 PCIe", 90, DType::kBf16).tflops == doctest::Approx(756));
  CHECK(PublishedGpuPeak("NVIDIA H200", 90, DType::kFp16).tflops == doctest::Approx(989.4));
  CHECK(PublishedGpuPeak("NVIDIA A100-SXM4-80GB", 80, DType::kBf16).tflops == doctest::Approx(312));
  const DevicePeak a100_fp8 = PublishedGpuPeak("NVIDIA A100-SXM4-80GB", 80, DType::kFp8);
  CHECK(a100_fp8.tflops == 0);
  CHECK(a100_fp8.source.find("no fp8") != std::string::npos);
  CHECK(PublishedGpuPeak("NVIDIA H100 NVL", 90, DType::kBf16).tflops == 0);
  CHECK(PublishedGpuPeak("NVIDIA H200 NVL", 90, DType::kBf16).tflops == 0);
  CHECK(PublishedGpuPeak("NVIDIA H100 80GB HBM3", 80, DType::kBf16).tflops == 0);  // the name alone is not enough
  const DevicePeak l40 = PublishedGpuPeak("NVIDIA L40S", 89, DType::kBf16);
  CHECK(l40.tflops == 0);
  CHECK(l40.source.find("no published peak") != std::string::npos);
}

}  // namespace
}  // namespace planner
