#include "common/status.h"

#include <filesystem>
#include <new>

namespace planner {

namespace {
const char* CodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kNotSupported: return "NotSupported";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kInfeasible: return "Infeasible";
    case StatusCode::kCommError: return "CommError";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}
}  // namespace

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

Status Status::WithContext(std::string_view what) const {
  if (ok()) return *this;
  return Status(code_, std::string(what) + ": " + message_);
}

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kNotSupported: return kExitInput;
    case StatusCode::kInfeasible: return kExitInfeasible;
    case StatusCode::kUnavailable:
    case StatusCode::kCommError:
    case StatusCode::kInternal: return kExitFailure;
  }
  return kExitFailure;
}

Status StatusFromException(const std::exception& e) {
  if (const auto* fe = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) {
    std::string paths = fe->path1().string();
    if (!fe->path2().empty()) paths += " -> " + fe->path2().string();
    if (paths.empty()) return Status::Unavailable(fe->what());
    return Status::Unavailable(paths + ": " + fe->code().message());
  }
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return Status::Unavailable("out of memory");
  return Status::Internal(std::string("internal error: ") + e.what());
}

}  // namespace planner
