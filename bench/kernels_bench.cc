// Kernel and profile benchmarks (docs/performance.md; not tests):
//   kernels_bench gemm [N]                    Eigen's own SGEMM N^3 (default 1024), best and median GFLOP/s
//   kernels_bench kernels MODEL [b]           achieved GFLOP/s of each GEMM layer's F, B, W at the model's shapes
//   kernels_bench fullpass MODEL PROFILE [b]  one process runs the whole model forward + backward; measured
//                                             median against the profile's predicted sum of layer times
// One thread unless --threads N is the last argument.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "runtime/kernels/kernel.h"
#include "spec/model_spec.h"
#include "spec/profile.h"

using namespace planner;

namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Gemm(int n) {
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n), c(n, n);
  std::vector<double> t;
  for (int i = 0; i < 12; ++i) {
    double s = Now();
    c.noalias() = a * b;
    t.push_back(Now() - s);
  }
  t.erase(t.begin(), t.begin() + 2);  // warm-up
  double flops = 2.0 * n * n * n;
  std::printf("eigen sgemm %d^3: best %.1f GFLOP/s, median %.1f GFLOP/s (checksum %.3f)\n", n,
              flops / *std::min_element(t.begin(), t.end()) / 1e9, flops / Median(t) / 1e9,
              static_cast<double>(c(0, 0)));
  return 0;
}

Tensor Input(const Layer& l, int64_t b) {
  std::vector<int64_t> shape = {b};
  shape.insert(shape.end(), l.in_shape.begin(), l.in_shape.end());
  Tensor x = Tensor::Zeros(shape);
  if (l.kind == LayerKind::kEmbedding) {
    for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = static_cast<float>(i % l.attrs.Int("vocab", 1));
  } else {
    FillUniform(&x, 3, 1.0f);
  }
  return x;
}

int Kernels(const ModelSpec& m, int64_t b) {
  std::printf("%-22s %10s %10s %10s   (GFLOP/s, median of 20, b=%lld)\n", "layer", "forward", "bwd-input", "bwd-weight",
              static_cast<long long>(b));
  std::vector<std::string> seen;
  for (const auto& l : m.layers) {
    if (l.fwd_flops == 0 || std::find(seen.begin(), seen.end(), l.signature) != seen.end()) continue;
    seen.push_back(l.signature);
    std::unique_ptr<LayerKernel> k;
    if (!MakeKernel(l, {}, &k).ok()) continue;
    Tensor x = Input(l, b);
    std::vector<double> tf, tb, tw;
    Tensor dy;
    for (int i = 0; i < 23; ++i) {
      Saved s;
      Tensor y, dx;
      double t0 = Now();
      (void)k->Forward(x, &y, &s);
      double t1 = Now();
      if (dy.empty()) {
        dy = Tensor::Zeros(y.shape());
        FillUniform(&dy, 5, 1.0f);
      }
      (void)k->BackwardInput(dy, &dx, &s);
      double t2 = Now();
      (void)k->BackwardWeight(&s);
      double t3 = Now();
      if (i < 3) continue;
      tf.push_back(t1 - t0);
      tb.push_back(t2 - t1);
      tw.push_back(t3 - t2);
    }
    KernelFlops f = k->Flops(b);
    std::printf("%-22s %10.1f %10.1f %10.1f   %s\n", LayerKindName(l.kind), f.forward / Median(tf) / 1e9,
                f.backward_input / Median(tb) / 1e9, f.backward_weight / Median(tw) / 1e9, l.signature.c_str());
  }
  return 0;
}

int FullPass(const ModelSpec& m, const Profile& p, int64_t b) {
  std::vector<std::unique_ptr<LayerKernel>> ks;
  for (const auto& l : m.layers) {
    ks.emplace_back();
    Status s = MakeKernel(l, {}, &ks.back());
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
  }
  int64_t rows = 1;
  const Layer& last = m.layers.back();
  for (size_t i = 0; i + 1 < last.in_shape.size(); ++i) rows *= last.in_shape[i];
  Tensor targets = Tensor::Zeros({b * rows});
  for (int64_t i = 0; i < targets.numel(); ++i) targets.data()[i] = static_cast<float>(i % last.in_shape.back());
  ks.back()->SetTargets(targets);
  Tensor x0 = Input(m.layers.front(), b);
  std::vector<double> times;
  std::vector<std::vector<double>> layer_f(ks.size()), layer_b(ks.size());  // per layer, in the pass
  for (int it = 0; it < 33; ++it) {
    double t0 = Now();
    std::vector<Saved> saved(ks.size());
    std::vector<double> tf(ks.size()), tb(ks.size());
    Tensor x = x0;
    for (size_t i = 0; i < ks.size(); ++i) {
      Tensor y;
      const double l0 = Now();
      (void)ks[i]->Forward(x, &y, &saved[i]);
      tf[i] = Now() - l0;
      x = y;
    }
    Tensor g = Tensor::Zeros(x.shape());
    for (int64_t i = 0; i < g.numel(); ++i) g.data()[i] = 1.0f / static_cast<float>(b);
    for (size_t i = ks.size(); i-- > 0;) {
      Tensor dx;
      const double l0 = Now();
      (void)ks[i]->BackwardInput(g, &dx, &saved[i]);
      (void)ks[i]->BackwardWeight(&saved[i]);
      tb[i] = Now() - l0;
      g = dx;
    }
    if (it >= 3) {
      times.push_back(Now() - t0);
      for (size_t i = 0; i < ks.size(); ++i) {
        layer_f[i].push_back(tf[i]);
        layer_b[i].push_back(tb[i]);
      }
    }
  }
  // Per layer: the pass's median F and B + W against the profile's, so a gap can be placed.
  std::printf("%-18s %12s %12s %12s %12s   (b=%lld; ms, medians)\n", "layer", "F in pass", "F profile", "B+W in pass",
              "B+W profile", static_cast<long long>(b));
  for (size_t i = 0; i < ks.size() && i < p.layers.size(); ++i) {
    for (const auto& t : p.layers[i].timings) {
      if (t.microbatch != b || t.tp != 1) continue;
      std::printf("%-18s %12.4f %12.4f %12.4f %12.4f\n", m.layers[i].name.c_str(), Median(layer_f[i]) * 1e3,
                  t.forward_s * 1e3, Median(layer_b[i]) * 1e3, t.backward_s * 1e3);
    }
  }
  double predicted = 0;
  for (size_t i = 0; i < p.layers.size(); ++i) {
    for (const auto& t : p.layers[i].timings) {
      if (t.microbatch == b && t.tp == 1) predicted += t.forward_s + t.backward_s;
    }
  }
  double measured = Median(times);
  std::printf("%s b=%lld: measured full pass %.3f ms (median of 30), profile predicts %.3f ms, ratio %.3f\n",
              m.name.c_str(), static_cast<long long>(b), measured * 1e3, predicted * 1e3, predicted / measured);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  if (argc >= 3 && std::string(argv[argc - 2]) == "--threads") {
    threads = std::atoi(argv[argc - 1]);
    argc -= 2;
  }
  SetCpuThreads(threads);
  KeepFreedHostMemory();  // the runtime's and the profiler's host memory policy (runtime/kernels/tensor.h)
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: kernels_bench gemm [N] | kernels MODEL [b] | fullpass MODEL PROFILE [b] [--threads N]\n");
    return 2;
  }
  std::string what = argv[1];
  if (what == "gemm") return Gemm(argc > 2 ? std::atoi(argv[2]) : 1024);
  ModelSpec m;
  if (argc < 3 || !LoadModelSpec(argv[2], &m).ok()) {
    std::fprintf(stderr, "need a model file\n");
    return 2;
  }
  if (what == "kernels") return Kernels(m, argc > 3 ? std::atoll(argv[3]) : 1);
  if (what == "fullpass" && argc > 3) {
    Profile p;
    Status s = LoadProfile(argv[3], &p);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 2;
    }
    return FullPass(m, p, argc > 4 ? std::atoll(argv[4]) : 1);
  }
  std::fprintf(stderr, "unknown benchmark '%s'\n", what.c_str());
  return 2;
}
