#include "runtime/checkpoint.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "common/file_writer.h"
#include "runtime/stage.h"

namespace planner {

namespace {

std::string CheckpointDir(const std::string& run_dir) { return (std::filesystem::path(run_dir) / "ckpt").string(); }

int64_t ParameterFloats(const std::vector<Param*>& params) {
  int64_t n = 0;
  for (Param* prm : params) n += prm->value.numel();
  return n;
}

}  // namespace

Status WriteCheckpoint(const std::string& run_dir, int64_t rank, int64_t iteration, const std::vector<Param*>& params,
                       const Optimizer& optimizer) {
  PLANNER_RETURN_IF_ERROR(MakeDirectories(CheckpointDir(run_dir)));
  const std::vector<float> state = optimizer.State();
  const int64_t header[3] = {iteration, ParameterFloats(params), static_cast<int64_t>(state.size())};
  AtomicFile f;
  PLANNER_RETURN_IF_ERROR(f.Open((std::filesystem::path(CheckpointDir(run_dir)) / fmt::format("rank{}.bin", rank)).string()));
  PLANNER_RETURN_IF_ERROR(f.Write(header, sizeof header));
  for (Param* prm : params) {
    const std::vector<float> v = prm->value.ToVector();
    PLANNER_RETURN_IF_ERROR(f.Write(v.data(), v.size() * 4));
  }
  PLANNER_RETURN_IF_ERROR(f.Write(state.data(), state.size() * 4));
  return f.Commit();
}

Status ReadCheckpoint(const std::string& run_dir, int64_t rank, const std::vector<Param*>& params, Optimizer* optimizer, int64_t* iteration) {
  const std::string path = fmt::format("{}/ckpt/rank{}.bin", run_dir, rank);
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound(fmt::format("{}: no checkpoint for this rank; run with checkpoint_every first", path));
  int64_t header[3] = {0, 0, 0};  // iteration, parameter floats, optimizer floats
  f.read(reinterpret_cast<char*>(header), sizeof header);
  const int64_t want = ParameterFloats(params);
  if (!f || header[1] != want) {
    return Status::InvalidArgument(fmt::format("{} holds {} parameters, this stage has {}; it belongs to another launch", path, header[1], want));
  }
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  if (ec || header[2] < 0 || static_cast<uintmax_t>(sizeof header) + 4 * static_cast<uintmax_t>(want + header[2]) > bytes) {
    return Status::InvalidArgument(fmt::format("{} is truncated", path));
  }
  for (Param* prm : params) {
    std::vector<float> v(static_cast<size_t>(prm->value.numel()));
    f.read(reinterpret_cast<char*>(v.data()), prm->value.numel() * 4);
    CopyIntoTensor(v, &prm->value);
  }
  std::vector<float> state(static_cast<size_t>(header[2]));
  f.read(reinterpret_cast<char*>(state.data()), header[2] * 4);
  if (!f) return Status::InvalidArgument(fmt::format("{} is truncated", path));
  PLANNER_RETURN_IF_ERROR(optimizer->SetState(state, params));
  *iteration = header[0];
  return Status::OK();
}

}  // namespace planner
