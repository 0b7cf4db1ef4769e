// CUDA kernels against the CPU kernels on the same inputs and the same
// initial parameters (same seeds): outputs, input gradients and parameter
// gradients, unsharded and as tensor-parallel shards (2 ranks on threads,
// each running its CPU shard and its CUDA shard; their all-reduces go
// through an in-process communicator, staged through the host for CUDA).
// Exits 77 (Meson: skipped) without a CUDA device.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>

#include "runtime/comm/communicator.h"
#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/kernel.h"
#include "spec/layer_catalog.h"

using namespace planner;

namespace {

std::atomic<int> failures{0};
std::mutex print_mu;

// A TP group over a communicator of host buffers; CUDA shards' buffers go through the host.
class StagedGroup final : public TpGroup {
 public:
  StagedGroup(Communicator* c, Device d) : c_(c), d_(d) {}
  Status AllReduceSum(float* data, int64_t n) override { return Reduce(data, n, ReduceOp::kSum); }
  Status AllReduceMax(float* data, int64_t n) override { return Reduce(data, n, ReduceOp::kMax); }

 private:
  Status Reduce(float* data, int64_t n, ReduceOp op) {
    if (d_ == Device::kCpu) return c_->AllReduce(data, n, op);
    std::vector<float> h(static_cast<size_t>(n));
    CudaCopyToHost(h.data(), data, n * 4);
    PLANNER_RETURN_IF_ERROR(c_->AllReduce(h.data(), n, op));
    CudaCopyToDevice(data, h.data(), n * 4);
    return Status::OK();
  }
  Communicator* c_;
  Device d_;
};

void Compare(const std::string& what, const Tensor& cpu, const Tensor& gpu, double tol) {
  std::vector<float> a = cpu.ToVector(), b = gpu.ToVector();
  std::lock_guard<std::mutex> lk(print_mu);
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


// One shard (tp_rank of tp_size; the whole layer when tp_size is 1) on both devices.
void CheckShard(const std::string& type, const Layer& l, std::vector<int64_t> in, int64_t b, bool ids, int64_t tp_rank, int64_t tp_size,
                TpGroup* cpu_group, TpGroup* gpu_group) {
  KernelOptions oc, og;
  og.device = Device::kCuda;
  for (KernelOptions* o : {&oc, &og}) {
    o->tp_rank = tp_rank;
    o->tp_size = tp_size;
  }
  oc.tp_group = cpu_group;
  og.tp_group = gpu_group;
  const std::string name = tp_size == 1 ? type : type + " tp " + std::to_string(tp_rank) + "/" + std::to_string(tp_size);
  std::unique_ptr<LayerKernel> kc, kg;
  Status sc = MakeKernel(l, oc, &kc), sg = MakeKernel(l, og, &kg);
  if (!sc.ok() || !sg.ok()) {
    std::lock_guard<std::mutex> lk(print_mu);
    std::printf("FAIL %s: %s %s\n", name.c_str(), sc.message().c_str(), sg.message().c_str());
    ++failures;
    return;
  }
  if (type == "loss") in.back() /= tp_size;  // this rank's logits
  std::vector<int64_t> shape = {b};
  shape.insert(shape.end(), in.begin(), in.end());
  Tensor x = Tensor::Zeros(shape);
  FillUniform(&x, 17 + static_cast<uint64_t>(type == "loss" ? tp_rank : 0), 1.5f);  // loss shards: each rank its own logits
  if (ids) for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = static_cast<float>((i * 7) % l.attrs.Int("vocab", 1));
  if (type == "loss") {
    int64_t rows = x.numel() / in.back();
    Tensor t = Tensor::Zeros({rows});
    for (int64_t i = 0; i < rows; ++i) t.data()[i] = static_cast<float>((i * 3) % (in.back() * tp_size));
    kc->SetTargets(t);
    kg->SetTargets(t);
  }
  Saved s1, s2;
  Tensor yc, yg, dxc, dxg;
  (void)kc->Forward(x, &yc, &s1);
  (void)kg->Forward(x.To(Device::kCuda), &yg, &s2);
  Compare(name + " forward", yc, yg, 5e-3);
  Tensor dy = Tensor::Zeros(yc.shape());
  FillUniform(&dy, 19, 1.0f);
  (void)kc->BackwardInput(dy, &dxc, &s1);
  (void)kg->BackwardInput(dy.To(Device::kCuda), &dxg, &s2);
  if (!dxc.empty()) Compare(name + " backward-input", dxc, dxg, 5e-3);
  (void)kc->BackwardWeight(&s1);
  (void)kg->BackwardWeight(&s2);
  auto pc = kc->Params(), pg = kg->Params();
  if (pc.size() != pg.size()) {
    std::lock_guard<std::mutex> lk(print_mu);
    std::printf("FAIL %s: %zu CPU parameters, %zu CUDA parameters\n", name.c_str(), pc.size(), pg.size());
    ++failures;
  }
  for (size_t i = 0; i < pc.size() && i < pg.size(); ++i) {
    Compare(name + " value " + pc[i]->name, pc[i]->value, pg[i]->value, 1e-6);  // the same slice of the same weights
    Compare(name + " grad " + pc[i]->name, pc[i]->grad, pg[i]->grad, 5e-3);
  }
}

void Check(const std::string& type, std::vector<int64_t> in, LayerAttrs attrs, int64_t b, bool ids = false, int tp = 1) {
  Layer l;
  if (!InferLayer(type, attrs, in, DType::kFp32, &l).ok()) {
    std::printf("FAIL %s: shape inference\n", type.c_str());
    ++failures;
    return;
  }
  l.name = type;
  if (tp == 1) {
    CheckShard(type, l, in, b, ids, 0, 1, nullptr, nullptr);
    return;
  }
  Status s = RunThreadRanks(tp, [&](Communicator& c) {
    StagedGroup cpu(&c, Device::kCpu), gpu(&c, Device::kCuda);
    CheckShard(type, l, in, b, ids, c.rank(), tp, &cpu, &gpu);
    return Status::OK();
  });
  if (!s.ok()) {
    std::printf("FAIL %s tp %d: %s\n", type.c_str(), tp, s.message().c_str());
    ++failures;
  }
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
  // Tensor-parallel shards (Megatron's cuts, with their all-reduces) on 2 ranks.
  Check("mlp", {64, 128}, mlp, 2, false, 2);
  Check("attention", {64, 128}, attn, 2, false, 2);
  Check("transformer_block", {64, 128}, blk, 2, false, 2);
  Check("embedding", {64}, emb, 2, true, 2);
  Check("lm_head", {64, 128}, head, 2, false, 2);
  Check("loss", {64, 512}, {}, 2, false, 2);
  std::printf("%s\n", failures.load() == 0 ? "CUDA == CPU on every kernel and shard" : "CUDA and CPU differ");
  return failures.load() == 0 ? 0 : 1;
}
