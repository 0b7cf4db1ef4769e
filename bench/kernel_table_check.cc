// The kernel table against measured kernel rates (issue 27's GPU section; docs/gpu.md step 8): reads the lines
// bench/kernel_rates_peer.py printed on a GPU and prints, per GEMM and attention measurement, the rate the table
// predicts for that kernel (a burst: peak x GemmFraction for a GEMM, AttentionTflops for attention; no engine
// sustained share) beside the measured one, then the mean |error| per class, and the host lines as they are.
//   kernel_table_check CLUSTER RATES [--kernels NAME_OR_FILE]
// CLUSTER gives the peaks (gpu.peak_tflops) and, without --kernels, the built-in table for its GPU. Exit 2 on a
// file that cannot be read or a line that does not parse (naming the line).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "spec/cluster_spec.h"
#include "spec/dtype.h"
#include "spec/kernel_table.h"

using namespace planner;

namespace {

// key=value fields of one line ("m=8192" -> fields["m"] = "8192"); the bare words in order.
struct Line {
  std::vector<std::string> words;
  std::map<std::string, std::string> fields;
};

Line Split(const std::string& text) {
  Line l;
  std::istringstream in(text);
  std::string w;
  while (in >> w) {
    const size_t eq = w.find('=');
    if (eq == std::string::npos) l.words.push_back(w);
    else l.fields[w.substr(0, eq)] = w.substr(eq + 1);
  }
  return l;
}

bool Number(const Line& l, const char* key, double* out) {
  auto it = l.fields.find(key);
  if (it == l.fields.end()) return false;
  char* end = nullptr;
  *out = std::strtod(it->second.c_str(), &end);
  return end != it->second.c_str() && *end == '\0' && std::isfinite(*out) && *out >= 0;
}

struct Tally {
  double abs_sum = 0, signed_sum = 0;
  int n = 0;
  void Add(double e) {
    abs_sum += std::fabs(e);
    signed_sum += e;
    ++n;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 5 && std::string(argv[3]) == "--kernels")) {
    std::fprintf(stderr, "usage: kernel_table_check CLUSTER RATES [--kernels NAME_OR_FILE]\n");
    return 2;
  }
  ClusterSpec cluster;
  Status s = LoadClusterSpec(argv[1], &cluster);
  if (!s.ok()) {
    std::fprintf(stderr, "kernel_table_check: %s\n", s.message().c_str());
    return 2;
  }
  KernelTable table;
  if (argc == 5) s = LoadKernelTable(argv[4], &table);
  else if (!BuiltinKernelTableFor(cluster.gpu_name, &table))
    s = Status::InvalidArgument("no built-in kernel table for GPU '" + cluster.gpu_name + "'; pass --kernels");
  if (!s.ok()) {
    std::fprintf(stderr, "kernel_table_check: %s\n", s.message().c_str());
    return 2;
  }
  std::ifstream in(argv[2]);
  if (!in) {
    std::fprintf(stderr, "kernel_table_check: cannot read %s\n", argv[2]);
    return 2;
  }
  std::printf("kernel table %s against %s (peaks of %s)\n", table.path.c_str(), argv[2], cluster.gpu_name.c_str());
  std::printf("%-58s %14s %14s %8s\n", "kernel", "measured TF/s", "table TF/s", "error");
  std::map<std::string, Tally> tally;
  std::string text;
  int number = 0;
  while (std::getline(in, text)) {
    ++number;
    const Line l = Split(text);
    if (l.words.empty() || l.words[0][0] == '#') continue;
    const std::string& kind = l.words[0];
    if (kind == "device" || kind == "launch" || kind == "experts") {
      std::printf("%s\n", text.c_str());
      continue;
    }
    double measured = 0, predicted = 0;
    std::string cls;
    if (kind == "gemm" && l.words.size() == 2) {
      double m = 0, n = 0, k = 0;
      DType dt;
      if (!ParseDType(l.words[1], &dt) || !Number(l, "m", &m) || !Number(l, "n", &n) || !Number(l, "k", &k) ||
          !Number(l, "tflops", &measured)) {
        std::fprintf(stderr, "kernel_table_check: %s:%d: a gemm line needs PRECISION m= n= k= tflops=\n", argv[2],
                     number);
        return 2;
      }
      const GemmEfficiency* g = table.Gemm(dt);
      if (g == nullptr) continue;  // no figures for this precision in the table
      predicted = cluster.PeakFlops(dt) / 1e12 * table.GemmFraction(*g, m, n, k);
      cls = "gemm " + l.words[1];
      if (auto acc = l.fields.find("accum"); acc != l.fields.end()) cls += " accum=" + acc->second;
    } else if (kind == "attention" && l.words.size() == 3) {
      double causal = 0, d = 0, seq = 0;
      if (!Number(l, "causal", &causal) || !Number(l, "d", &d) || !Number(l, "seq", &seq) ||
          !Number(l, "tflops", &measured)) {
        std::fprintf(stderr, "kernel_table_check: %s:%d: an attention line needs KERNEL PASS causal= d= seq= tflops=\n",
                     argv[2], number);
        return 2;
      }
      predicted = table.AttentionTflops(l.words[1], l.words[2], causal > 0, d, seq);
      if (predicted <= 0) continue;  // the table has no curve of this kernel
      cls = "attention " + l.words[1] + " " + l.words[2];
    } else if (kind == "ring" && l.words.size() == 3) {
      // One rank's ring-attention steps (kernel_rates_peer.py ring_lines): the planner's step blend on the table
      // (KernelTable::RingStepTflops, as AttentionRates prices them; no wave fill, no engine share), against the
      // steps alone and against the steps with their merges run serially after each.
      double cp = 0, d = 0, seq = 0, with_merges = 0;
      if (!Number(l, "cp", &cp) || !Number(l, "d", &d) || !Number(l, "seq", &seq) || !Number(l, "tflops", &measured) ||
          !Number(l, "with_merges_tflops", &with_merges) || !(cp >= 2)) {
        std::fprintf(stderr,
                     "kernel_table_check: %s:%d: a ring line needs KERNEL PASS cp= (2 or more) d= seq= tflops= "
                     "with_merges_tflops=\n",
                     argv[2], number);
        return 2;
      }
      predicted = table.RingStepTflops(l.words[1], l.words[2], d, seq / cp, cp);
      if (predicted <= 0) continue;  // the table has no curve of this kernel
      cls = "ring " + l.words[1] + " " + l.words[2];
      if (with_merges > 0) {
        const double err = (predicted - with_merges) / with_merges;
        tally[cls + " with merges"].Add(err);
      }
    } else {
      std::fprintf(stderr, "kernel_table_check: %s:%d: unknown line '%s'\n", argv[2], number, text.c_str());
      return 2;
    }
    if (!(measured > 0)) {
      std::fprintf(stderr, "kernel_table_check: %s:%d: tflops must be above 0\n", argv[2], number);
      return 2;
    }
    const double err = (predicted - measured) / measured;
    tally[cls].Add(err);
    std::string name = text.substr(0, text.find(" tflops="));
    std::printf("%-58s %14.1f %14.1f %+7.1f%%\n", name.c_str(), measured, predicted, 100 * err);
  }
  for (const auto& [cls, t] : tally) {
    std::printf("%s: %d kernels, mean |error| %.1f%%, signed %+.1f%% (table over measured)\n", cls.c_str(), t.n,
                100 * t.abs_sum / t.n, 100 * t.signed_sum / t.n);
  }
  return 0;
}
