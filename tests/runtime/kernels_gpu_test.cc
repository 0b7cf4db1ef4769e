// CUDA against the CPU on the same inputs. First every leaf operation of
// runtime/kernels/device_ops.h (CudaOps() against CpuOps()); then every layer
// type, built once in layers.cc over either device's operations, with the
// same initial parameters (same seeds): outputs, input gradients and
// parameter gradients, unsharded and as tensor-parallel shards (2 ranks on
// threads, each running its CPU shard and its CUDA shard; their all-reduces
// go through an in-process communicator, staged through the host for CUDA).
// Runs in every GEMM precision (device_ops.h SetGemmPrecision: fp32 = TF32 on
// CUDA, bf16, fp16, fp8), or in the one named by `--precision P`: the CPU
// emulates the tensor cores' operand rounding, so the GEMMs must agree up to
// fp32 summation order and the layers within the tolerances of Tolerances().
// FP8 on a device below compute capability 8.9: the GEMM must refuse with a
// Status naming the capability (checked), and the FP8 pass is skipped.
// Exits 77 (Meson: skipped) without a CUDA device; 2 on an unknown precision.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>

#include "runtime/comm/communicator.h"
#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/kernels/kernel.h"
#include "spec/layer_catalog.h"

using namespace planner;

namespace {

std::atomic<int> failures{0};
std::mutex print_mu;

// Relative L2 tolerances, CUDA against CPU. fp32: cuBLAS's TF32 against the CPU's fp32 products (10-bit
// mantissas: ~1e-3). 16-bit: both devices multiply the same rounded operands, so a GEMM differs only in
// fp32 summation order (1e-4, well under the ~3e-3 a bf16 rounding would cost, so a device that skipped
// the rounding fails); FP8 likewise, with room for Hopper's FP8 accumulation (1e-3 against the ~3e-2 of
// e4m3). Layers chain GEMMs with other operations; an operand near a rounding boundary may round the
// other way on the other device, which costs a quantum of the format (hence fp8's looser layer bound).
struct Tolerances {
  double gemm, layer;
};
Tolerances TolerancesFor(DType p) {
  if (p == DType::kFp32) return {1e-3, 5e-3};
  if (p == DType::kFp8) return {1e-3, 2e-2};
  return {1e-4, 5e-3};
}
Tolerances tol = TolerancesFor(DType::kFp32);

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

// ---------------------------------------------------------------- leaf operations
// A host tensor and its device copy; the CPU operation runs on the one, the CUDA one on the other.
struct Pair {
  Tensor cpu, gpu;
  float* c() { return cpu.data(); }
  float* g() { return gpu.data(); }
};
Pair Rand(const std::vector<int64_t>& shape, uint64_t seed, float scale = 1.0f) {
  Tensor h = Tensor::Zeros(shape);
  FillUniform(&h, seed, scale);
  return {h, h.To(Device::kCuda)};
}
Pair Filled(const std::vector<int64_t>& shape, float value) {
  Tensor h = Tensor::Zeros(shape);
  for (int64_t i = 0; i < h.numel(); ++i) h.data()[i] = value;
  return {h, h.To(Device::kCuda)};
}
Pair Ids(int64_t n, int64_t modulo, int64_t mul) {
  Tensor h = Tensor::Zeros({n});
  for (int64_t i = 0; i < n; ++i) h.data()[i] = static_cast<float>((i * mul) % modulo);
  return {h, h.To(Device::kCuda)};
}
void Ran(const std::string& what, const Status& c, const Status& g) {
  if (c.ok() && g.ok()) return;
  std::lock_guard<std::mutex> lk(print_mu);
  std::printf("FAIL %s: %s / %s\n", what.c_str(), c.message().c_str(), g.message().c_str());
  ++failures;
}
// Runs op on both devices (op(ops, use_gpu)) and compares the pairs it writes.
template <class Op>
void Leaf(const std::string& what, std::initializer_list<Pair*> outputs, double tol, Op op) {
  Ran(what, op(*CpuOps(), false), op(*CudaOps(), true));
  int i = 0;
  for (Pair* p : outputs) Compare("op " + what + " output " + std::to_string(i++), p->cpu, p->gpu, tol);
}

// Unaligned shapes (bf16 in an FP8 pass) and, unbatched, shapes that are multiples of 16 (FP8's).
void CheckGemms() {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t batch : {1, 3, -1}) {
        const bool aligned = batch == -1;
        if (aligned) batch = 1;
        const int64_t m = aligned ? 64 : 37, n = aligned ? 48 : 29, k = aligned ? 96 : 45, lda = (ta ? m : k) + 3,
                      ldb = (tb ? k : n) + 5, ldc = n + 2;
        GemmArgs g;
        g.ta = ta, g.tb = tb, g.m = m, g.n = n, g.k = k, g.lda = lda, g.ldb = ldb, g.ldc = ldc, g.alpha = 0.5f,
        g.beta = batch == 1 ? 1.0f : 0.0f;
        g.batch = batch, g.stride_a = (ta ? k : m) * lda, g.stride_b = (tb ? n : k) * ldb, g.stride_c = m * ldc;
        Pair a = Rand({batch * g.stride_a}, 1), b = Rand({batch * g.stride_b}, 2), c = Rand({batch * g.stride_c}, 3);
        Leaf(std::string("gemm ") + DTypeName(EffectiveGemmPrecision(g)) + (ta ? " A^T" : " A") + (tb ? " B^T" : " B") +
                 " batch " + std::to_string(batch) + (aligned ? " m,n,k % 16 = 0" : ""),
             {&c}, tol.gemm, [&](DeviceOps& o, bool gpu) {
               return gpu ? o.Gemm(g, a.g(), b.g(), c.g()) : o.Gemm(g, a.c(), b.c(), c.c());
             });
      }
}

void CheckElementwise() {
  const int64_t rows = 50, cols = 70, n = rows * cols;
  Pair x = Rand({rows, cols}, 4, 2.0f), bias = Rand({cols}, 5), y = Rand({rows, cols}, 6), acc = Rand({cols}, 7);
  Leaf("bias rows", {&y}, 1e-6, [&](DeviceOps& o, bool gpu) {
    return o.AddBiasRows(gpu ? y.g() : y.c(), gpu ? bias.g() : bias.c(), rows, cols);
  });
  Leaf("row sums", {&acc}, 1e-5,
       [&](DeviceOps& o, bool gpu) { return o.SumRowsInto(gpu ? x.g() : x.c(), gpu ? acc.g() : acc.c(), rows, cols); });
  Pair cb = Rand({5}, 8), cy = Rand({2, 5, 30}, 9), cacc = Rand({5}, 10);
  Leaf("bias channels", {&cy}, 1e-6, [&](DeviceOps& o, bool gpu) {
    return o.AddBiasChannels(gpu ? cy.g() : cy.c(), gpu ? cb.g() : cb.c(), 2, 5, 30);
  });
  Leaf("channel sums", {&cacc}, 1e-5, [&](DeviceOps& o, bool gpu) {
    return o.SumChannelsInto(gpu ? cy.g() : cy.c(), gpu ? cacc.g() : cacc.c(), 2, 5, 30);
  });
  Pair z = Rand({rows, cols}, 11), out = Filled({rows, cols}, 0);
  Leaf("add", {&out}, 1e-7,
       [&](DeviceOps& o, bool gpu) { return gpu ? o.Add(x.g(), z.g(), out.g(), n) : o.Add(x.c(), z.c(), out.c(), n); });
  Leaf("multiply", {&out}, 1e-7, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.Multiply(x.g(), z.g(), out.g(), n) : o.Multiply(x.c(), z.c(), out.c(), n);
  });
  for (Activation a : {Activation::kRelu, Activation::kGelu, Activation::kRelu2}) {
    const std::string name = a == Activation::kRelu ? "relu" : (a == Activation::kGelu ? "gelu" : "relu2");
    Leaf(name + " forward", {&out}, 1e-5, [&](DeviceOps& o, bool gpu) {
      return gpu ? o.ActivationForward(a, x.g(), out.g(), n) : o.ActivationForward(a, x.c(), out.c(), n);
    });
    Leaf(name + " backward", {&out}, 1e-5, [&](DeviceOps& o, bool gpu) {
      return gpu ? o.ActivationBackward(a, x.g(), z.g(), out.g(), n)
                 : o.ActivationBackward(a, x.c(), z.c(), out.c(), n);
    });
  }
  Pair mask = Filled({rows, cols}, 0);
  Leaf("dropout (the same mask)", {&out, &mask}, 0, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.Dropout(x.g(), out.g(), mask.g(), n, 12345, 0.3, 1 / 0.7f)
               : o.Dropout(x.c(), out.c(), mask.c(), n, 12345, 0.3, 1 / 0.7f);
  });
}

void CheckNorms() {
  const int64_t n = 40, h = 300;
  Pair x = Rand({n, h}, 12, 3.0f), gamma = Rand({h}, 13), beta = Rand({h}, 14), y = Filled({n, h}, 0),
       xhat = Filled({n, h}, 0), rstd = Filled({n}, 0);
  Leaf("layernorm forward", {&y, &xhat, &rstd}, 1e-5, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.LayerNormForward(x.g(), gamma.g(), beta.g(), y.g(), xhat.g(), rstd.g(), n, h)
               : o.LayerNormForward(x.c(), gamma.c(), beta.c(), y.c(), xhat.c(), rstd.c(), n, h);
  });
  Pair dy = Rand({n, h}, 15), dx = Filled({n, h}, 0), dg = Rand({h}, 16), db = Rand({h}, 17);
  Leaf("layernorm backward", {&dx}, 1e-4, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.LayerNormBackward(dy.g(), gamma.g(), xhat.g(), rstd.g(), dx.g(), n, h)
               : o.LayerNormBackward(dy.c(), gamma.c(), xhat.c(), rstd.c(), dx.c(), n, h);
  });
  Leaf("layernorm parameter gradients", {&dg, &db}, 1e-5, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.LayerNormParamGrads(dy.g(), xhat.g(), dg.g(), db.g(), n, h)
               : o.LayerNormParamGrads(dy.c(), xhat.c(), dg.c(), db.c(), n, h);
  });
  for (bool causal : {false, true}) {
    const int64_t s = 48, rows = 3 * s;
    Pair p = Rand({rows, s}, 18, 4.0f), dp = Rand({rows, s}, 19);
    Leaf(std::string("softmax") + (causal ? " causal" : ""), {&p}, 1e-5,
         [&](DeviceOps& o, bool gpu) { return o.SoftmaxRows(gpu ? p.g() : p.c(), rows, s, causal); });
    Leaf(std::string("softmax backward") + (causal ? " causal" : ""), {&dp}, 1e-4, [&](DeviceOps& o, bool gpu) {
      return gpu ? o.SoftmaxBackwardRows(p.g(), dp.g(), rows, s, 0.25f)
                 : o.SoftmaxBackwardRows(p.c(), dp.c(), rows, s, 0.25f);
    });
  }
}

// RMSNorm, SwiGLU and RoPE (the Llama-class layers' own operations).
void CheckLlamaOps() {
  const int64_t n = 40, h = 300;
  Pair x = Rand({n, h}, 40, 3.0f), w = Rand({h}, 41), y = Filled({n, h}, 0), xhat = Filled({n, h}, 0),
       rstd = Filled({n}, 0);
  Leaf("rmsnorm forward", {&y, &xhat, &rstd}, 1e-5, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.RmsNormForward(x.g(), w.g(), y.g(), xhat.g(), rstd.g(), n, h)
               : o.RmsNormForward(x.c(), w.c(), y.c(), xhat.c(), rstd.c(), n, h);
  });
  Pair dy = Rand({n, h}, 42), dx = Filled({n, h}, 0), dw = Rand({h}, 43);
  Leaf("rmsnorm backward", {&dx}, 1e-4, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.RmsNormBackward(dy.g(), w.g(), xhat.g(), rstd.g(), dx.g(), n, h)
               : o.RmsNormBackward(dy.c(), w.c(), xhat.c(), rstd.c(), dx.c(), n, h);
  });
  Leaf("rmsnorm weight gradient", {&dw}, 1e-5, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.RmsNormParamGrads(dy.g(), xhat.g(), dw.g(), n, h)
               : o.RmsNormParamGrads(dy.c(), xhat.c(), dw.c(), n, h);
  });
  const int64_t rows = 50, f = 70;
  Pair gu = Rand({rows, 2 * f}, 44, 3.0f), a = Filled({rows, f}, 0), da = Rand({rows, f}, 45),
       dgu = Filled({rows, 2 * f}, 0);
  Leaf("swiglu forward", {&a}, 1e-5, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.SwiGluForward(gu.g(), a.g(), rows, f) : o.SwiGluForward(gu.c(), a.c(), rows, f);
  });
  Leaf("swiglu backward", {&dgu}, 1e-5, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.SwiGluBackward(gu.g(), da.g(), dgu.g(), rows, f)
               : o.SwiGluBackward(gu.c(), da.c(), dgu.c(), rows, f);
  });
  const int64_t seq = 32, heads = 3, d = 16,
                ld = heads * d + 8;  // rows wider than the rotated heads: the rest untouched
  for (bool inverse : {false, true}) {
    Pair q = Rand({2 * seq, ld}, 46);
    Leaf(std::string("rope") + (inverse ? " inverse" : ""), {&q}, 1e-5, [&](DeviceOps& o, bool gpu) {
      return o.Rope(gpu ? q.g() : q.c(), 2 * seq, ld, seq, 5, heads, d, 500000, inverse);
    });
  }
}

void CheckEmbeddingAndLoss() {
  const int64_t rows = 64, seq = 16, h = 40, start = 100, local = 50;
  Pair ids = Ids(rows, 200, 7), table = Rand({local, h}, 20), pos = Rand({seq, h}, 21), y = Filled({rows, h}, 0);
  Leaf("embedding forward", {&y}, 1e-7, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.EmbeddingForward(ids.g(), table.g(), pos.g(), y.g(), rows, seq, h, start, local)
               : o.EmbeddingForward(ids.c(), table.c(), pos.c(), y.c(), rows, seq, h, start, local);
  });
  Pair dy = Rand({rows, h}, 22), dt = Rand({local, h}, 23), dpos = Rand({seq, h}, 24);
  Leaf("embedding backward", {&dt, &dpos}, 1e-6, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.EmbeddingBackward(ids.g(), dy.g(), dt.g(), dpos.g(), rows, seq, h, start, local)
               : o.EmbeddingBackward(ids.c(), dy.c(), dt.c(), dpos.c(), rows, seq, h, start, local);
  });
  const int64_t n = 24, v = 130, rps = 6, cstart = 130;
  Pair x = Rand({n, v}, 25, 3.0f), tgt = Ids(n, 2 * v, 29), mx = Filled({n}, 0), tl = Filled({n}, 0),
       probs = Filled({n, v}, 0), sum = Filled({n}, 0), loss = Filled({n / rps}, 0);
  Leaf("cross-entropy max", {&mx, &tl}, 0, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.CrossEntropyMax(x.g(), tgt.g(), mx.g(), tl.g(), n, v, cstart)
               : o.CrossEntropyMax(x.c(), tgt.c(), mx.c(), tl.c(), n, v, cstart);
  });
  Leaf("cross-entropy exp", {&probs, &sum}, 1e-5, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.CrossEntropyExp(x.g(), mx.g(), probs.g(), sum.g(), n, v)
               : o.CrossEntropyExp(x.c(), mx.c(), probs.c(), sum.c(), n, v);
  });
  Leaf("cross-entropy finish", {&probs, &loss}, 1e-5, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.CrossEntropyFinish(probs.g(), sum.g(), mx.g(), tl.g(), loss.g(), n, v, rps)
               : o.CrossEntropyFinish(probs.c(), sum.c(), mx.c(), tl.c(), loss.c(), n, v, rps);
  });
  Pair g = Rand({n / rps}, 26), dx = Filled({n, v}, 0);
  Leaf("cross-entropy backward", {&dx}, 1e-5, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.CrossEntropyBackward(probs.g(), tgt.g(), g.g(), dx.g(), n, v, rps, cstart)
               : o.CrossEntropyBackward(probs.c(), tgt.c(), g.c(), dx.c(), n, v, rps, cstart);
  });
}

void CheckWindows() {
  Window w{6, 13, 11, 3, 2, 1};
  const int64_t samples = 2, out = samples * w.channels * w.out_h() * w.out_w();
  Pair x = Rand({samples, w.channels, w.height, w.width}, 27);
  for (bool max : {true, false}) {
    const std::string name = max ? "maxpool" : "avgpool";
    Pair y = Filled({out}, 0), arg = Filled({out}, 0), dy = Rand({out}, 28), dx = Filled({x.cpu.numel()}, 0);
    Leaf(name + " forward", {&y, &arg}, 1e-6, [&](DeviceOps& o, bool gpu) {
      return gpu ? o.PoolForward(max, w, samples, x.g(), y.g(), max ? arg.g() : nullptr)
                 : o.PoolForward(max, w, samples, x.c(), y.c(), max ? arg.c() : nullptr);
    });
    Leaf(name + " backward", {&dx}, 1e-6, [&](DeviceOps& o, bool gpu) {
      return gpu ? o.PoolBackward(max, w, samples, dy.g(), max ? arg.g() : nullptr, dx.g())
                 : o.PoolBackward(max, w, samples, dy.c(), max ? arg.c() : nullptr, dx.c());
    });
  }
  const int64_t cout = 10, conv_out = samples * cout * w.out_h() * w.out_w();
  Pair weight = Rand({cout, w.channels, w.kernel, w.kernel}, 29), y = Filled({conv_out}, 0), dy = Rand({conv_out}, 30);
  Pair dw = Rand({weight.cpu.numel()}, 31), dx;
  Tensor kept_c, kept_g;
  Leaf("conv forward", {&y}, 1e-3, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.ConvForward(w, cout, x.gpu, weight.g(), y.g(), &kept_g)
               : o.ConvForward(w, cout, x.cpu, weight.c(), y.c(), &kept_c);
  });
  Leaf("conv backward-data", {}, 0, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.ConvBackwardData(w, cout, kept_g, weight.g(), dy.g(), &dx.gpu)
               : o.ConvBackwardData(w, cout, kept_c, weight.c(), dy.c(), &dx.cpu);
  });
  Compare("op conv backward-data output 0", dx.cpu, dx.gpu, 1e-3);
  Leaf("conv backward-filter", {&dw}, 1e-3, [&](DeviceOps& o, bool gpu) {
    return gpu ? o.ConvBackwardFilter(w, cout, kept_g, dy.g(), dw.g())
               : o.ConvBackwardFilter(w, cout, kept_c, dy.c(), dw.c());
  });
}

// ---------------------------------------------------------------- layers
// One shard (tp_rank of tp_size; the whole layer when tp_size is 1) on both devices.
void CheckShard(const std::string& type, const Layer& l, std::vector<int64_t> in, int64_t b, bool ids, int64_t tp_rank,
                int64_t tp_size, TpGroup* cpu_group, TpGroup* gpu_group) {
  KernelOptions oc, og;
  og.device = Device::kCuda;
  for (KernelOptions* o : {&oc, &og}) {
    o->tp_rank = tp_rank;
    o->tp_size = tp_size;
  }
  oc.tp_group = cpu_group;
  og.tp_group = gpu_group;
  const std::string name =
      tp_size == 1 ? type : type + " tp " + std::to_string(tp_rank) + "/" + std::to_string(tp_size);
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
  FillUniform(&x, 17 + static_cast<uint64_t>(type == "loss" ? tp_rank : 0),
              1.5f);  // loss shards: each rank its own logits
  if (ids)
    for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = static_cast<float>((i * 7) % l.attrs.Int("vocab", 1));
  if (type == "loss") {
    int64_t rows = x.numel() / in.back();
    Tensor t = Tensor::Zeros({rows});
    for (int64_t i = 0; i < rows; ++i) t.data()[i] = static_cast<float>((i * 3) % (in.back() * tp_size));
    kc->SetTargets(t);
    kg->SetTargets(t);
  }
  Saved s1, s2;
  Tensor yc, yg, dxc, dxg;
  Ran(name + " forward", kc->Forward(x, &yc, &s1), kg->Forward(x.To(Device::kCuda), &yg, &s2));
  Compare(name + " forward", yc, yg, tol.layer);
  Tensor dy = Tensor::Zeros(yc.shape());
  FillUniform(&dy, 19, 1.0f);
  Ran(name + " backward-input", kc->BackwardInput(dy, &dxc, &s1), kg->BackwardInput(dy.To(Device::kCuda), &dxg, &s2));
  if (!dxc.empty()) Compare(name + " backward-input", dxc, dxg, tol.layer);
  Ran(name + " backward-weight", kc->BackwardWeight(&s1), kg->BackwardWeight(&s2));
  auto pc = kc->Params(), pg = kg->Params();
  if (pc.size() != pg.size()) {
    std::lock_guard<std::mutex> lk(print_mu);
    std::printf("FAIL %s: %zu CPU parameters, %zu CUDA parameters\n", name.c_str(), pc.size(), pg.size());
    ++failures;
  }
  for (size_t i = 0; i < pc.size() && i < pg.size(); ++i) {
    Compare(name + " value " + pc[i]->name, pc[i]->value, pg[i]->value, 1e-6);  // the same slice of the same weights
    Compare(name + " grad " + pc[i]->name, pc[i]->grad, pg[i]->grad, tol.layer);
  }
}

void CheckLayer(const std::string& type, const Layer& l, const std::vector<int64_t>& in, int64_t b, bool ids, int tp) {
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

void Check(const std::string& type, std::vector<int64_t> in, LayerAttrs attrs, int64_t b, bool ids = false,
           int tp = 1) {
  Layer l;
  if (!InferLayer(type, attrs, in, DType::kFp32, &l).ok()) {
    std::printf("FAIL %s: shape inference\n", type.c_str());
    ++failures;
    return;
  }
  l.name = type;
  CheckLayer(type, l, in, b, ids, tp);
}

// Llama-class layers, built by hand (type, shapes and ATTRS.md's attributes) so that this test
// does not depend on spec/'s inference of them.
void CheckLlama(const std::string& type, std::vector<int64_t> in, const std::string& act, int64_t kv, int64_t b,
                int tp = 1) {
  Layer l;
  l.name = type + " " + act + " kv " + std::to_string(kv);
  if (!ParseLayerKind(type, &l.kind)) {
    std::printf("FAIL %s: no layer kind of that name\n", type.c_str());
    ++failures;
    return;
  }
  l.in_shape = l.out_shape = in;
  l.attrs.ints = {{"heads", 4}, {"kv_heads", kv}, {"ffn", 512}, {"rope_theta", 500000}};
  l.attrs.strings = {{"act", act}, {"norm", "rmsnorm"}, {"position", "rope"}};
  l.attrs.bools = {{"bias", false}};
  CheckLayer(l.name, l, in, b, false, tp);
}

// Every layer type, unsharded and as TP shards, in the current GEMM precision.
void CheckLayers() {
  LayerAttrs lin;
  lin.ints = {{"out_features", 96}};
  Check("linear", {64, 128}, lin, 4);
  Check("relu", {64, 128}, {}, 4);
  Check("gelu", {64, 128}, {}, 4);
  LayerAttrs drop;
  drop.probability = 0.25;
  Check("dropout", {64, 128}, drop, 4);  // the same mask on both devices
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
  // Llama-class layers: GQA and MQA with RoPE, SwiGLU and squared-ReLU MLPs, RMSNorm, no biases.
  CheckLlama("rmsnorm", {64, 128}, "swiglu", 4, 4);
  CheckLlama("attention", {64, 128}, "swiglu", 2, 2);
  CheckLlama("attention", {64, 128}, "swiglu", 1, 2);
  CheckLlama("mlp", {64, 128}, "swiglu", 4, 2);
  CheckLlama("mlp", {64, 128}, "relu2", 4, 2);
  CheckLlama("transformer_block", {64, 128}, "swiglu", 2, 2);
  CheckLlama("attention", {64, 128}, "swiglu", 2, 2, 2);
  CheckLlama("mlp", {64, 128}, "swiglu", 4, 2, 2);
  CheckLlama("transformer_block", {64, 128}, "swiglu", 2, 2, 2);
}

// A device without FP8 must refuse an FP8 GEMM with a Status that names the requirement.
bool Fp8Refused() {
  if (CudaSupportsFp8(0)) return false;
  GemmArgs g;
  g.m = g.n = g.k = g.lda = g.ldb = g.ldc = 16;
  Pair a = Rand({256}, 1), b = Rand({256}, 2), c = Filled({256}, 0);
  Status s = CudaOps()->Gemm(g, a.g(), b.g(), c.g());
  const bool named = !s.ok() && s.message().find("compute capability 8.9") != std::string::npos;
  std::printf("fp8 on compute capability %d: %s (%s)\n", CudaComputeCapability(0), named ? "refused, ok" : "FAIL",
              s.message().c_str());
  if (!named) ++failures;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<DType> precisions = {DType::kFp32, DType::kBf16, DType::kFp16, DType::kFp8};
  if (argc == 3 && std::string(argv[1]) == "--precision") {
    DType p;
    if (!ParseDType(argv[2], &p)) {
      std::printf("kernels_gpu_test: --precision %s: unknown; use fp32, bf16, fp16 or fp8\n", argv[2]);
      return 2;
    }
    precisions = {p};
  } else if (argc != 1) {
    std::printf("usage: kernels_gpu_test [--precision fp32|bf16|fp16|fp8]\n");
    return 2;
  }
  std::string why;
  if (CudaDeviceCount(&why) == 0) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  std::printf("device: %s, compute capability %d\n", CudaDescribeDevice(0).c_str(), CudaComputeCapability(0));
  for (DType p : precisions) {
    std::printf("---- GEMM precision %s\n", DTypeName(p));
    SetGemmPrecision(p);
    tol = TolerancesFor(p);
    if (p == DType::kFp8 && Fp8Refused()) continue;
    CheckGemms();
    if (p == DType::kFp32) {  // the other leaf operations do not depend on the GEMM precision
      CheckElementwise();
      CheckNorms();
      CheckLlamaOps();
      CheckEmbeddingAndLoss();
      CheckWindows();
    }
    CheckLayers();
  }
  SetGemmPrecision(DType::kFp32);
  std::printf("%s\n", failures.load() == 0
                          ? "CUDA == CPU on every leaf operation, layer and shard, in each precision run"
                          : "CUDA and CPU differ");
  return failures.load() == 0 ? 0 : 1;
}
