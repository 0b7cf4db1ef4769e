#include "runtime/run_record.h"

#include <charconv>
#include <cmath>
#include <string_view>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "common/file_writer.h"

namespace planner {

namespace fs = std::filesystem;

namespace {

// A number of a metrics.csv field (std::from_chars: no locale, no exception); false when it is
// not one, or not finite.
bool ParseNumber(std::string_view text, double* out) {
  if (text.empty()) return false;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), *out);
  return r.ec == std::errc() && r.ptr == text.data() + text.size() && std::isfinite(*out);
}

bool ParseRowNumber(std::string_view text, int64_t* out) {
  const auto r = std::from_chars(text.data(), text.data() + text.size(), *out);
  return !text.empty() && r.ec == std::errc() && r.ptr == text.data() + text.size();
}

constexpr std::string_view kMetricsHeader = "iteration,loss,iteration_seconds";

}  // namespace

Status ReadMetrics(const std::string& run_dir, int64_t iterations, std::vector<double>* loss,
                   std::vector<double>* iteration_s) {
  const std::string path = (fs::path(run_dir) / "metrics.csv").string();
  std::error_code ec;
  std::ifstream in(path);
  if (!fs::is_regular_file(path, ec) || !in) {
    return Status::NotFound(fmt::format(
        "{}: missing: a resumed run needs the losses of its first {} iterations; restore the file or run again "
        "without --resume",
        path, iterations));
  }
  std::string line;
  if (!std::getline(in, line) || line != kMetricsHeader) {
    return Status::InvalidArgument(
        fmt::format("{}:1: not the header '{}': the file is damaged; restore it or run again without --resume", path,
                    kMetricsHeader));
  }
  loss->clear(), iteration_s->clear();
  for (int64_t row = 1; row <= iterations; ++row) {
    if (!std::getline(in, line)) {
      return Status::InvalidArgument(fmt::format(
          "{}:{}: ends after iteration {}, the checkpoint is at iteration {}; restore the file or run again "
          "without --resume",
          path, row + 1, row - 1, iterations));
    }
    const std::string_view v(line);
    const size_t a = v.find(','), b = a == std::string_view::npos ? a : v.find(',', a + 1);
    int64_t number = 0;
    double l = 0, s = 0;
    if (b == std::string_view::npos || !ParseRowNumber(v.substr(0, a), &number) || number != row ||
        !ParseNumber(v.substr(a + 1, b - a - 1), &l) || !ParseNumber(v.substr(b + 1), &s) || s < 0) {
      return Status::InvalidArgument(fmt::format(
          "{}:{}: not '{},<finite loss>,<seconds>': '{}'; the file is damaged; restore it or run again without "
          "--resume",
          path, row + 1, row, line.substr(0, 80)));
    }
    loss->push_back(l), iteration_s->push_back(s);
  }
  return Status::OK();
}

void RunRecord::AddIteration(double loss, double iteration_s, double compute_s, double comm_s) {
  loss_.push_back(loss);
  iteration_s_.push_back(iteration_s);
  compute_s_.push_back(compute_s);
  comm_s_.push_back(comm_s);
}

Status RunRecord::LoadMetrics(const std::string& run_dir, int64_t iterations) {
  std::vector<double> loss, seconds;
  PLANNER_RETURN_IF_ERROR(ReadMetrics(run_dir, iterations, &loss, &seconds));
  for (size_t i = 0; i < loss.size(); ++i) AddIteration(loss[i], seconds[i], 0, 0);
  return Status::OK();
}

Status RunRecord::WriteMetrics(const std::string& run_dir) const {
  std::string text = "iteration,loss,iteration_seconds\n";
  for (size_t i = 0; i < loss_.size(); ++i) text += fmt::format("{},{:.6f},{:.6f}\n", i + 1, loss_[i], iteration_s_[i]);
  return WriteFileAtomic((fs::path(run_dir) / "metrics.csv").string(), text);
}

Status RunRecord::WriteRankTrace(const std::string& run_dir, int64_t rank, double clock_offset_s) const {
  std::string text;
  for (size_t i = 0; i < trace_.size(); ++i) {
    const TraceEvent& e = trace_[i];
    text += fmt::format(
        "{}{{\"name\": \"{}\", \"ph\": \"X\", \"pid\": {}, \"tid\": {}, \"ts\": {:.1f}, \"dur\": {:.1f}}}\n",
        i ? "," : "", e.name, rank, e.tid, (e.start_s - clock_offset_s) * 1e6, e.dur_s * 1e6);
  }
  return WriteFileAtomic((fs::path(run_dir) / fmt::format("trace.rank{}.json", rank)).string(), text);
}

Status MergeTraces(const std::string& run_dir, const LaunchPlan& L) {
  std::string text = "{\"traceEvents\": [\n";
  bool any = false;
  for (size_t r = 0; r < L.ranks.size(); ++r) {
    const fs::path part = fs::path(run_dir) / fmt::format("trace.rank{}.json", r);
    std::ifstream in(part);  // absent where another node's run directory is not shared: left out
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str().empty()) continue;
    if (any) text += ",";
    text += ss.str();
    any = true;
    text += fmt::format(
        ",{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {}, \"args\": {{\"name\": \"rank {} (stage {})\"}}}}\n",
        r, r, L.ranks[r].stage);
  }
  text += "]}\n";
  return WriteFileAtomic((fs::path(run_dir) / "trace.json").string(), text);
}

Status WriteGradients(const std::string& run_dir, const std::vector<NamedGradient>& gradients) {
  const fs::path dir = fs::path(run_dir) / "grads";
  PLANNER_RETURN_IF_ERROR(MakeDirectories(dir.string()));
  for (const NamedGradient& g : gradients) {
    AtomicFile f;
    PLANNER_RETURN_IF_ERROR(f.Open((dir / (g.name + ".bin")).string()));
    PLANNER_RETURN_IF_ERROR(f.Write(g.values.data(), g.values.size() * 4));
    PLANNER_RETURN_IF_ERROR(f.Commit());
  }
  return Status::OK();
}

Status GlobalGradientNorm(Communicator& world, int64_t replica, int64_t tp_rank, const std::vector<NamedGradient>& mine,
                          double* norm, int64_t edp_rank) {
  double sq = 0;
  for (const NamedGradient& g : mine) {
    if (g.expert ? edp_rank != 0 : (replica != 0 || (!g.tp_sharded && tp_rank != 0))) continue;
    for (float x : g.values) sq += static_cast<double>(x) * x;
  }
  float sqf = static_cast<float>(sq);
  PLANNER_RETURN_IF_ERROR(world.AllReduce(&sqf, 1, ReduceOp::kSum));
  *norm = std::sqrt(static_cast<double>(sqf));
  return Status::OK();
}

}  // namespace planner
