// CUDA kernels against the CPU kernels on the same inputs and the same
// initial parameters (same seeds): outputs, input gradients and parameter
// gradients. Exits 77 (Meson: skipped) without a CUDA device.
#include <cmath>
#include <cstdio>
#include <string>

#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/kernel.h"
#include "spec/layer_catalog.h"

using namespace planner;

namespace {

int failures = 0;

void Compare(const std::string& what, const Tensor& cpu, const Tensor& gpu, double tol) {
  std::vector<float> a = cpu.ToVector(), b = gpu.ToVector();
  if (a.size() != b.size()) {
    std::printf("FAIL %s: %zu vs %zu elements\n", what.c_str(), a.size(), b.size());
    ++failures;
    return;
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
    den += static_cast<double>(a[i]) * a[i];
  }
  double rel = std::sqrt(num / std::max(den, 1e-30));
  std::printf("%-40s relative L2 difference %.2e %s\n", what.c_str(), rel, rel <= tol ? "ok" : "FAIL");
  if (rel > tol) ++failures;
}


void Check(const std::string& type, std::vector<int64_t> in, LayerAttrs attrs, int64_t b, bool ids = false) {
  Layer l;
  if (!InferLayer(type, attrs, in, DType::kFp32, &l).ok()) {
    std::printf("FAIL %s: shape inference\n", type.c_str());
    ++failures;
    return;
  }
  l.name = type;
  KernelOptions oc, og;
  og.device = Device::kCuda;
  std::unique_ptr<LayerKernel> kc, kg;
  Status sc = MakeKernel(l, oc, &kc), sg = MakeKernel(l, og, &kg);
  if (!sc.ok() || !sg.ok()) {
    std::printf("FAIL %s: %s %s\n", type.c_str(), sc.message().c_str(), sg.message().c_str());
    ++failures;
    return;
  }
  std::vector<int64_t> shape = {b};
  shape.insert(shape.end(), in.begin(), in.end());
  Tensor x = Tensor::Zeros(shape);
  FillUniform(&x, 17, 1.5f);
  if (ids) for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = static_cast<float>((i * 7) % l.attrs.Int("vocab", 1));
  if (type == "loss") {
    int64_t rows = x.numel() / in.back();
    Tensor t = Tensor::Zeros({rows});
    for (int64_t i = 0; i < rows; ++i) t.data()[i] = static_cast<float>((i * 3) % in.back());
    kc->SetTargets(t);
    kg->SetTargets(t);
  }
  Saved s1, s2;
  Tensor yc, yg, dxc, dxg;
  (void)kc->Forward(x, &yc, &s1);
  (void)kg->Forward(x.To(Device::kCuda), &yg, &s2);
  Compare(type + " forward", yc, yg, 5e-3);
  Tensor dy = Tensor::Zeros(yc.shape());
  FillUniform(&dy, 19, 1.0f);
  (void)kc->BackwardInput(dy, &dxc, &s1);
  (void)kg->BackwardInput(dy.To(Device::kCuda), &dxg, &s2);
  if (!dxc.empty()) Compare(type + " backward-input", dxc, dxg, 5e-3);
  (void)kc->BackwardWeight(&s1);
  (void)kg->BackwardWeight(&s2);
  auto pc = kc->Params(), pg = kg->Params();
  for (size_t i = 0; i < pc.size() && i < pg.size(); ++i) Compare(type + " grad " + pc[i]->name, pc[i]->grad, pg[i]->grad, 5e-3);
}

}  // namespace

int main() {
  std::string why;
  if (CudaDeviceCount(&why) == 0) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  std::printf("device: %s\n", CudaDescribeDevice(0).c_str());
  LayerAttrs lin;
  lin.ints = {{"out_features", 96}};
  Check("linear", {64, 128}, lin, 4);
  Check("relu", {64, 128}, {}, 4);
  Check("gelu", {64, 128}, {}, 4);
  Check("layernorm", {64, 128}, {}, 4);
  LayerAttrs mlp;
  mlp.ints = {{"ffn", 512}};
  Check("mlp", {64, 128}, mlp, 4);
  LayerAttrs attn;
  attn.ints = {{"heads", 4}};
  Check("attention", {64, 128}, attn, 2);
  LayerAttrs blk;
  blk.ints = {{"heads", 4}, {"ffn", 512}};
  Check("transformer_block", {64, 128}, blk, 2);
  LayerAttrs emb;
  emb.ints = {{"vocab", 512}, {"hidden", 128}, {"positions", 64}};
  Check("embedding", {64}, emb, 2, true);
  LayerAttrs head;
  head.ints = {{"vocab", 512}};
  Check("lm_head", {64, 128}, head, 2);
  Check("loss", {64, 512}, {}, 2);
  LayerAttrs conv;
  conv.ints = {{"out_channels", 16}, {"kernel", 3}, {"stride", 1}, {"padding", 1}};
  Check("conv2d", {8, 16, 16}, conv, 2);
  LayerAttrs pool;
  pool.ints = {{"kernel", 2}, {"stride", 2}};
  Check("maxpool", {8, 16, 16}, pool, 2);
  Check("avgpool", {8, 16, 16}, pool, 2);
  Check("flatten", {8, 4, 4}, {}, 2);
  std::printf("%s\n", failures == 0 ? "CUDA == CPU on every kernel" : "CUDA and CPU differ");
  return failures == 0 ? 0 : 1;
}
