#include "runtime/run_record.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "common/file_writer.h"

namespace planner {

namespace fs = std::filesystem;

namespace {

// A number of a metrics.csv field; false when it is not one.
bool ParseNumber(const std::string& text, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return errno == 0 && end == text.c_str() + text.size();
}

}  // namespace

void RunRecord::AddIteration(double loss, double iteration_s, double compute_s, double comm_s) {
  loss_.push_back(loss);
  iteration_s_.push_back(iteration_s);
  compute_s_.push_back(compute_s);
  comm_s_.push_back(comm_s);
}

Status RunRecord::LoadMetrics(const std::string& run_dir, int64_t iterations) {
  const std::string path = (fs::path(run_dir) / "metrics.csv").string();
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  for (int64_t row = 2; iterations > this->iterations() && std::getline(in, line); ++row) {
    const size_t a = line.find(','), b = a == std::string::npos ? a : line.find(',', a + 1);
    double loss = 0, seconds = 0;
    if (b == std::string::npos || !ParseNumber(line.substr(a + 1, b - a - 1), &loss) || !ParseNumber(line.substr(b + 1), &seconds)) {
      return Status::InvalidArgument(fmt::format("{}:{}: not 'iteration,loss,iteration_seconds': {}", path, row, line));
    }
    AddIteration(loss, seconds, 0, 0);
  }
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
    text += fmt::format("{}{{\"name\": \"{}\", \"ph\": \"X\", \"pid\": {}, \"tid\": {}, \"ts\": {:.1f}, \"dur\": {:.1f}}}\n", i ? "," : "", e.name,
                        rank, e.tid, (e.start_s - clock_offset_s) * 1e6, e.dur_s * 1e6);
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
    text += fmt::format(",{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {}, \"args\": {{\"name\": \"rank {} (stage {})\"}}}}\n", r, r,
                        L.ranks[r].stage);
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

Status GlobalGradientNorm(Communicator& world, int64_t replica, int64_t tp_rank, const std::vector<NamedGradient>& mine, double* norm,
                          int64_t edp_rank) {
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
