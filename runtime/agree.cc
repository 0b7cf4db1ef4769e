#include "runtime/agree.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace planner {

namespace {

constexpr int64_t kMessageBytes = 1000;
constexpr int64_t kSlot = 2 + kMessageBytes;  // code, length, one byte per float (exact)

}  // namespace

Status StatusWithMessage(StatusCode code, std::string m) {
  switch (code) {
    case StatusCode::kOk: return Status::OK();
    case StatusCode::kInvalidArgument: return Status::InvalidArgument(std::move(m));
    case StatusCode::kNotFound: return Status::NotFound(std::move(m));
    case StatusCode::kNotSupported: return Status::NotSupported(std::move(m));
    case StatusCode::kUnavailable: return Status::Unavailable(std::move(m));
    case StatusCode::kInfeasible: return Status::Infeasible(std::move(m));
    case StatusCode::kCommError: return Status::CommError(std::move(m));
    case StatusCode::kInternal: return Status::Internal(std::move(m));
  }
  return Status::Internal(std::move(m));
}

Status AgreeOnStatus(Communicator& comm, const Status& mine) {
  // Bytes travel as small whole floats (exact), never as bit patterns a copy could alter.
  std::vector<float> slot(static_cast<size_t>(kSlot), 0.0f);
  const std::string& msg = mine.message();
  const int64_t n = std::min<int64_t>(kMessageBytes, static_cast<int64_t>(msg.size()));
  slot[0] = static_cast<float>(static_cast<int>(mine.code()));
  slot[1] = static_cast<float>(n);
  for (int64_t i = 0; i < n; ++i)
    slot[static_cast<size_t>(2 + i)] = static_cast<float>(static_cast<unsigned char>(msg[static_cast<size_t>(i)]));
  std::vector<float> all(static_cast<size_t>(kSlot * comm.size()));
  PLANNER_RETURN_IF_ERROR(comm.AllGather(slot.data(), all.data(), kSlot));
  for (int r = 0; r < comm.size(); ++r) {
    const float* s = all.data() + static_cast<size_t>(kSlot) * static_cast<size_t>(r);
    if (s[0] == 0.0f) continue;
    std::string text;
    const int64_t len = std::clamp<int64_t>(static_cast<int64_t>(s[1]), 0, kMessageBytes);
    for (int64_t i = 0; i < len; ++i) text.push_back(static_cast<char>(static_cast<unsigned char>(s[2 + i])));
    return StatusWithMessage(static_cast<StatusCode>(static_cast<int>(s[0])), fmt::format("rank {}: {}", r, text));
  }
  return Status::OK();
}

}  // namespace planner
