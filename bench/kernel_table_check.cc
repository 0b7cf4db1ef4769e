// The kernel table against measured kernel rates (issue 27's GPU section; docs/gpu.md step 8): reads the lines
// bench/kernel_rates_peer.py printed on a GPU and prints, per GEMM and attention measurement, the rate the table
// predicts for that kernel (a burst: peak x GemmFraction for a GEMM, AttentionTflops for attention; no engine
// sustained share) beside the measured one, then the mean |error| per class, and the host lines as they are.
//   kernel_table_check CLUSTER RATES [--kernels NAME_OR_FILE] [--write MEASURED.yaml]
// CLUSTER gives the peaks (gpu.peak_tflops) and, without --kernels, the built-in table for its GPU. Exit 2 on a
// file that cannot be read or a line that does not parse (naming the line). --write writes the measured table:
// the compared table with its GEMM figures fitted to the measured GEMMs (per precision: the ceiling and k_half of
// KernelTable::GemmFraction, least squares on relative error) and its attention curves replaced by the measured
// ones (a kernel, pass, mask and head dim measured at every point of the table's sequence grid); what was not
// measured (other curves, FP8 recipes, power clocks, memory efficiency) is the compared table's, and the file
// says which is which. `planner solve --kernels MEASURED.yaml` then costs with it (docs/gpu.md step 8).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <tuple>
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
  std::string text;
  std::vector<std::string> words;
  std::map<std::string, std::string> fields;
};

Line Split(const std::string& text) {
  Line l;
  l.text = text;
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

// What --write keeps of the measured lines.
struct Measured {
  std::string device;                                              // the "device" line
  std::map<std::string, std::vector<std::array<double, 5>>> gemm;  // precision -> (m, n, k, tflops, weight)
  std::map<std::tuple<std::string, std::string, bool, int64_t>, std::map<double, double>> attention;  // seq -> TF/s
};

// The GEMM figures of one precision fitted to measured (m, n, k, tflops, weight): for each k_half on a grid, the
// ceiling minimising the weighted squared relative error in closed form (c = sum w r / sum w r^2, r = predicted at
// ceiling 1 / measured); the best pair. With fewer than two distinct K the K effect cannot be told apart: k_half stays
// `fixed_k_half` and only the ceiling is fitted. *rms: the fit's root-mean-square relative error.
GemmEfficiency FitGemm(const KernelTable& table, double peak_tflops, const std::vector<std::array<double, 5>>& pts,
                       double fixed_k_half, double* rms) {
  std::vector<double> ks;
  for (const auto& p : pts) ks.push_back(p[2]);
  std::sort(ks.begin(), ks.end());
  const bool k_known = std::unique(ks.begin(), ks.end()) - ks.begin() >= 2;
  GemmEfficiency best{0, fixed_k_half};
  double best_err = INFINITY;
  for (int step = 0; step <= (k_known ? 512 : 0); ++step) {
    const double kh = k_known ? 16.0 * step : fixed_k_half;  // 0 .. 8192 tokens of K in steps of 16
    double sr = 0, sr2 = 0, sw = 0;
    std::vector<double> r;
    for (const auto& p : pts) {
      r.push_back(peak_tflops * table.GemmFraction(GemmEfficiency{1, kh}, p[0], p[1], p[2]) / p[3]);
      sr += p[4] * r.back();
      sr2 += p[4] * r.back() * r.back();
      sw += p[4];
    }
    const double c = sr / sr2;
    double err = 0;
    for (size_t i = 0; i < r.size(); ++i) err += pts[i][4] * (c * r[i] - 1) * (c * r[i] - 1);
    if (err < best_err) best_err = err, best = GemmEfficiency{c, kh}, *rms = std::sqrt(err / sw);
  }
  return best;
}

std::string Join(const std::vector<double>& v, const char* fmt) {
  std::string s;
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, fmt, v[i]);
    s += (i ? ", " : "") + std::string(buf);
  }
  return s;
}

std::string CeilingError(const std::string& precision, double ceiling, double peak_tflops) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "the measured %s GEMMs fit a ceiling of %.3f, above the cluster's peak of %.1f TFLOP/s: is the cluster "
                "file this GPU's?",
                precision.c_str(), ceiling, peak_tflops);
  return buf;
}

// The GEMM section of the measured table: each measured precision fitted, the others the compared table's. A fitted
// ceiling above 1 (rates above the cluster's peak: the wrong cluster file) sets *error instead.
std::string GemmYaml(const KernelTable& table, const ClusterSpec& cluster, const Measured& m, std::string* error) {
  std::string o = "gemm:\n  tiles: [";
  for (size_t i = 0; i < table.tiles.size(); ++i)
    o += (i ? ", [" : "[") + std::to_string(table.tiles[i].first) + ", " + std::to_string(table.tiles[i].second) + "]";
  o += "]\n";
  char buf[512];
  for (const auto& [name, g] : table.gemm) {
    auto it = m.gemm.find(name);
    std::string from = "measured GEMMs";
    if (it == m.gemm.end() && (name == "fp16" || name == "bf16")) {  // the same tensor-core rate stands in
      it = m.gemm.find(name == "fp16" ? "bf16" : "fp16");
      from = std::string("measured GEMMs in ") + (name == "fp16" ? "bf16" : "fp16") + " (the same tensor-core rate)";
    }
    if (it == m.gemm.end()) {
      std::snprintf(buf, sizeof buf, "  %s: {ceiling: %.4f, k_half: %.0f}   # the compared table's (not measured)\n",
                    name.c_str(), g.ceiling, g.k_half);
    } else {
      DType dt = DType::kBf16;
      if (!ParseDType(name, &dt)) continue;  // a table key the parser knows (bf16, fp16, fp8)
      double rms = 0;
      const double peak = cluster.PeakFlops(dt) / 1e12;
      const GemmEfficiency f = FitGemm(table, peak, it->second, g.k_half, &rms);
      if (f.ceiling > 1) {
        *error = CeilingError(name, f.ceiling, peak);
        return "";
      }
      const bool fp8_split = name == "fp8" && std::any_of(it->second.begin(), it->second.end(),
                                                          [](const std::array<double, 5>& p) { return p[4] == 2; });
      if (fp8_split) from += " (TE's forward fast accumulation x1, its two backward GEMMs' split x2)";
      std::snprintf(buf, sizeof buf,
                    "  %s: {ceiling: %.4f, k_half: %.0f}   # fitted to %zu %s, rms relative error %.1f%%; "
                    "the compared table's {ceiling: %.4f, k_half: %.0f}\n",
                    name.c_str(), f.ceiling, f.k_half, it->second.size(), from.c_str(), 100 * rms, g.ceiling, g.k_half);
    }
    o += buf;
  }
  return o;
}

// The attention section: the table's sequence grid; a curve measured at every grid point replaces (or adds to) the
// table's, the others are kept as the table has them. A kernel a table cannot name (not fa2, fa3 or cudnn: the CPU
// smoke's math backend) is left out, said on stdout.
std::string AttentionYaml(const KernelTable& table, const Measured& m) {
  std::string o = "attention:\n  seq: [" + Join(table.attention_seq, "%.0f") + "]\n  curves:\n";
  auto line = [](const std::string& k, const std::string& pass, bool causal, int64_t d, const std::vector<double>& t,
                 const char* why) {
    return "    - {kernel: " + k + ", pass: " + pass + ", causal: " + (causal ? "true" : "false") +
           ", head_dim: " + std::to_string(d) + ", tflops: [" + Join(t, "%.1f") + "]}   # " + why + "\n";
  };
  std::vector<std::tuple<std::string, std::string, bool, int64_t>> written;
  for (const auto& [key, by_seq] : m.attention) {
    std::vector<double> t;
    for (double s : table.attention_seq) {
      auto it = by_seq.find(s);
      if (it == by_seq.end()) break;
      t.push_back(it->second);
    }
    if (t.size() != table.attention_seq.size() || t.empty()) continue;  // not measured at every grid point
    const std::string& kernel = std::get<0>(key);
    if (kernel != "fa2" && kernel != "fa3" && kernel != "cudnn") {
      std::printf("--write: attention kernel '%s' left out (a kernel table names fa2, fa3 or cudnn)\n", kernel.c_str());
      continue;
    }
    o += line(std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key), t, "measured");
    written.push_back(key);
  }
  for (const AttentionCurve& c : table.curves) {
    if (std::find(written.begin(), written.end(), std::make_tuple(c.kernel, c.pass, c.causal, c.head_dim)) ==
        written.end())
      o += line(c.kernel, c.pass, c.causal, c.head_dim, c.tflops, "the compared table's (not measured)");
  }
  return o;
}

// The measured table (see the header): a kernel-table file `planner solve --kernels` reads.
std::string MeasuredTableYaml(const KernelTable& table, const ClusterSpec& cluster, const Measured& m,
                              const std::string& rates) {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::string o = "# Kernel table measured by bench/kernel_rates_peer.py (" + rates + ", " + date +
                  ") on: " + (m.device.empty() ? "an unnamed device" : m.device) +
                  "\n# Written by bench/kernel_table_check --write " + "from the table " + table.path +
                  "; lines marked 'not measured' are that table's.\n";
  o += "format_version: 1\nname: " + table.name + "-measured\ngpus: [";
  for (size_t i = 0; i < table.gpus.size(); ++i) o += (i ? ", " : "") + table.gpus[i];
  o += "]\nsms: " + std::to_string(table.sms) + "\n";
  char buf[128];
  std::snprintf(buf, sizeof buf, "memory_efficiency: %.4f   # the compared table's (not measured)\n",
                table.memory_efficiency);
  o += buf;
  if (!table.power_watts.empty())
    o += "power_clock: {watts: [" + Join(table.power_watts, "%.0f") + "], clock: [" + Join(table.power_clock, "%.4f") +
         "]}   # the compared table's (not measured)\n";
  std::string error;
  o += GemmYaml(table, cluster, m, &error);
  if (!error.empty()) return "error: " + error;
  if (!table.fp8_recipes.empty()) {
    o += "fp8_recipes:   # the compared table's (not measured)\n";
    for (const auto& [name, r] : table.fp8_recipes) {
      std::snprintf(buf, sizeof buf,
                    "  %s: {gemm: %.4f, amax_passes: %d, weight_bytes: %.4f, param_gather_bytes: %.4f}\n", name.c_str(),
                    r.gemm, r.amax_passes, r.weight_bytes, r.param_gather_bytes);
      o += buf;
    }
  }
  return o + AttentionYaml(table, m);
}

// --write: the measured table into `path`, read back as a kernel table before it is kept (a file this tool did not
// write is not replaced). 0, or 2 with the reason.
int WriteMeasured(const std::string& path, const KernelTable& table, const ClusterSpec& cluster, const Measured& m,
                  const std::string& rates) {
  if (m.gemm.empty() && m.attention.empty()) {
    std::fprintf(stderr, "kernel_table_check: %s has no gemm or attention line: nothing measured to write\n",
                 rates.c_str());
    return 2;
  }
  const std::string text = MeasuredTableYaml(table, cluster, m, rates);
  if (text.rfind("error: ", 0) == 0) {
    std::fprintf(stderr, "kernel_table_check: %s\n", text.substr(7).c_str());
    return 2;
  }
  KernelTable back;
  Status s = ParseKernelTable(path, text, &back);
  if (!s.ok()) {
    std::fprintf(stderr, "kernel_table_check: the measured table does not read back: %s\n", s.message().c_str());
    return 2;
  }
  if (std::ifstream old(path); old) {
    std::string first;
    std::getline(old, first);
    if (first.rfind("# Kernel table measured by bench/kernel_rates_peer.py", 0) != 0) {
      std::fprintf(stderr, "kernel_table_check: %s exists and was not written by --write; choose another path\n",
                   path.c_str());
      return 2;
    }
  }
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out.flush()) {
    std::fprintf(stderr, "kernel_table_check: cannot write %s\n", path.c_str());
    return 2;
  }
  std::printf("wrote %s: the measured table (planner solve --kernels %s)\n", path.c_str(), path.c_str());
  return 0;
}

// One measured line compared: its measured and predicted rate and its class; what --write keeps goes to *m.
struct Row {
  double measured = 0, predicted = 0;
  std::string cls;
};
enum class Parsed { kRow, kSkip, kError };

// A gemm, attention or ring line against the table (a line the table has no figure for: kSkip; a malformed one:
// kError, reported naming file:line).
Parsed CompareLine(const Line& l, const KernelTable& table, const ClusterSpec& cluster, const char* file, int number,
                   Row* row, Measured* m, std::map<std::string, Tally>* tally) {
  const std::string& kind = l.words[0];
  const auto fail = [&](const char* what) {
    std::fprintf(stderr, "kernel_table_check: %s:%d: %s\n", file, number, what);
    return Parsed::kError;
  };
  if (kind == "gemm" && l.words.size() == 2) {
    double mm = 0, n = 0, k = 0;
    DType dt;
    if (!ParseDType(l.words[1], &dt) || !Number(l, "m", &mm) || !Number(l, "n", &n) || !Number(l, "k", &k) ||
        !Number(l, "tflops", &row->measured))
      return fail("a gemm line needs PRECISION m= n= k= tflops=");
    const GemmEfficiency* g = table.Gemm(dt);
    if (g == nullptr) return Parsed::kSkip;  // no figures for this precision in the table
    auto acc = l.fields.find("accum");
    // TE runs FP8's forward GEMM with fast accumulation, its two backward GEMMs with split: weighted 1 and 2.
    const double weight = acc != l.fields.end() && acc->second == "split" ? 2 : 1;
    if (row->measured > 0) m->gemm[l.words[1]].push_back({mm, n, k, row->measured, weight});
    row->predicted = cluster.PeakFlops(dt) / 1e12 * table.GemmFraction(*g, mm, n, k);
    row->cls = "gemm " + l.words[1] + (acc != l.fields.end() ? " accum=" + acc->second : "");
  } else if (kind == "attention" && l.words.size() == 3) {
    double causal = 0, d = 0, seq = 0;
    if (!Number(l, "causal", &causal) || !Number(l, "d", &d) || !Number(l, "seq", &seq) ||
        !Number(l, "tflops", &row->measured))
      return fail("an attention line needs KERNEL PASS causal= d= seq= tflops=");
    if (row->measured > 0 && (l.words[2] == "fwd" || l.words[2] == "bwd"))
      m->attention[{l.words[1], l.words[2], causal > 0, static_cast<int64_t>(d)}][seq] = row->measured;
    row->predicted = table.AttentionTflops(l.words[1], l.words[2], causal > 0, d, seq);
    if (row->predicted <= 0) return Parsed::kSkip;  // the table has no curve of this kernel
    row->cls = "attention " + l.words[1] + " " + l.words[2];
  } else if (kind == "ring" && l.words.size() == 3) {
    // One rank's ring-attention steps (kernel_rates_peer.py ring_lines): the planner's step blend on the table
    // (KernelTable::RingStepTflops, as AttentionRates prices them; no wave fill, no engine share), against the
    // steps alone and against the steps with their merges run serially after each.
    double cp = 0, d = 0, seq = 0, with_merges = 0;
    if (!Number(l, "cp", &cp) || !Number(l, "d", &d) || !Number(l, "seq", &seq) ||
        !Number(l, "tflops", &row->measured) || !Number(l, "with_merges_tflops", &with_merges) || !(cp >= 2))
      return fail("a ring line needs KERNEL PASS cp= (2 or more) d= seq= tflops= with_merges_tflops=");
    row->predicted = table.RingStepTflops(l.words[1], l.words[2], d, seq / cp, cp);
    if (row->predicted <= 0) return Parsed::kSkip;  // the table has no curve of this kernel
    row->cls = "ring " + l.words[1] + " " + l.words[2];
    if (with_merges > 0) (*tally)[row->cls + " with merges"].Add((row->predicted - with_merges) / with_merges);
  } else {
    std::fprintf(stderr, "kernel_table_check: %s:%d: unknown line '%s'\n", file, number, l.text.c_str());
    return Parsed::kError;
  }
  if (!(row->measured > 0)) return fail("tflops must be above 0");
  return Parsed::kRow;
}

// The command line, the cluster and the table; false (after the message) when one of them is wrong.
bool Setup(int argc, char** argv, ClusterSpec* cluster, KernelTable* table, std::string* write) {
  std::string kernels;
  bool usage = argc < 3;
  for (int i = 3; i < argc && !usage; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc || (flag != "--kernels" && flag != "--write")) usage = true;
    else (flag == "--kernels" ? kernels : *write) = argv[i + 1];
  }
  if (usage) {
    std::fprintf(stderr, "usage: kernel_table_check CLUSTER RATES [--kernels NAME_OR_FILE] [--write MEASURED.yaml]\n");
    return false;
  }
  Status s = LoadClusterSpec(argv[1], cluster);
  if (s.ok() && !kernels.empty()) s = LoadKernelTable(kernels, table);
  else if (s.ok() && !BuiltinKernelTableFor(cluster->gpu_name, table))
    s = Status::InvalidArgument("no built-in kernel table for GPU '" + cluster->gpu_name + "'; pass --kernels");
  if (!s.ok()) std::fprintf(stderr, "kernel_table_check: %s\n", s.message().c_str());
  return s.ok();
}

}  // namespace

int main(int argc, char** argv) {
  ClusterSpec cluster;
  KernelTable table;
  std::string write;
  if (!Setup(argc, argv, &cluster, &table, &write)) return 2;
  std::ifstream in(argv[2]);
  if (!in) {
    std::fprintf(stderr, "kernel_table_check: cannot read %s\n", argv[2]);
    return 2;
  }
  std::printf("kernel table %s against %s (peaks of %s)\n", table.path.c_str(), argv[2], cluster.gpu_name.c_str());
  std::printf("%-58s %14s %14s %8s\n", "kernel", "measured TF/s", "table TF/s", "error");
  std::map<std::string, Tally> tally;
  Measured measured;
  std::string text;
  int number = 0;
  while (std::getline(in, text)) {
    ++number;
    const Line l = Split(text);
    if (l.words.empty() || l.words[0][0] == '#') continue;
    if (l.words[0] == "device" || l.words[0] == "launch" || l.words[0] == "experts") {
      std::printf("%s\n", text.c_str());
      if (l.words[0] == "device") measured.device = text.substr(text.find(' ') + 1);
      continue;
    }
    Row row;
    const Parsed p = CompareLine(l, table, cluster, argv[2], number, &row, &measured, &tally);
    if (p == Parsed::kError) return 2;
    if (p == Parsed::kSkip) continue;
    const double err = (row.predicted - row.measured) / row.measured;
    tally[row.cls].Add(err);
    const std::string name = text.substr(0, text.find(" tflops="));
    std::printf("%-58s %14.1f %14.1f %+7.1f%%\n", name.c_str(), row.measured, row.predicted, 100 * err);
  }
  for (const auto& [cls, t] : tally) {
    std::printf("%s: %d kernels, mean |error| %.1f%%, signed %+.1f%% (table over measured)\n", cls.c_str(), t.n,
                100 * t.abs_sum / t.n, 100 * t.signed_sum / t.n);
  }
  return write.empty() ? 0 : WriteMeasured(write, table, cluster, measured, argv[2]);
}
