// Status: the result of every library call that can fail on bad input or on
// the environment (leveldb style). Library code never throws across module
// boundaries and never aborts on user error; the CLI (planner/main.cc) turns
// a failed Status into one "planner: error: ..." line and an exit code.
// A Status is a small value type; it is safe to copy between threads.
#pragma once

#include <exception>
#include <string>
#include <string_view>

namespace planner {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad flag, bad file content
  kNotFound,         // missing file, layer or profile entry
  kNotSupported,     // a combination the tool does not handle
  kUnavailable,      // no GPU, backend not built in
  kInfeasible,       // solver: no plan fits the constraints
  kCommError,        // NCCL / MPI failure
  kInternal,         // a bug
};

// Process exit codes documented in README.md.
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,        // runtime failure (I/O, CUDA, NCCL, MPI)
  kExitInput = 2,          // usage or input error
  kExitInfeasible = 3,     // no feasible plan
  kExitInterrupted = 130,  // SIGINT (Ctrl-C): 128 + 2
  kExitTerminated = 143,   // SIGTERM (kill, a batch system's time limit, mpirun forwarding Ctrl-C): 128 + 15
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string msg) { return Status(StatusCode::kInvalidArgument, std::move(msg)); }
  static Status NotFound(std::string msg) { return Status(StatusCode::kNotFound, std::move(msg)); }
  static Status NotSupported(std::string msg) { return Status(StatusCode::kNotSupported, std::move(msg)); }
  static Status Unavailable(std::string msg) { return Status(StatusCode::kUnavailable, std::move(msg)); }
  static Status Infeasible(std::string msg) { return Status(StatusCode::kInfeasible, std::move(msg)); }
  static Status CommError(std::string msg) { return Status(StatusCode::kCommError, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(StatusCode::kInternal, std::move(msg)); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: <message>", or "OK".
  std::string ToString() const;
  // Returns a copy whose message is "<what>: <message>" (no-op on OK).
  Status WithContext(std::string_view what) const;

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Maps a Status to the process exit code of the CLI.
int ExitCodeFor(const Status& status);

// The Status for an exception caught where none may pass (main, a thread's
// body): std::filesystem::filesystem_error is Unavailable "PATH: reason";
// std::bad_alloc is Unavailable "out of memory"; any other is Internal with
// its what(). All exit 1. Library code converts exceptions where they arise,
// with the file, line and field; this is the last resort.
Status StatusFromException(const std::exception& e);

}  // namespace planner

#define PLANNER_RETURN_IF_ERROR(expr)   \
  do {                                  \
    ::planner::Status status_ = (expr); \
    if (!status_.ok()) return status_;  \
  } while (0)
