// The run directory's lock: runs/<id>/lock, held (flock, exclusive) by rank 0 of
// the job that writes runs/<id>/ from before its first write until it exits (the
// kernel releases it when the process ends, however it ends). A second job with
// the same run id finds it held and stops before writing anything. The file
// names its holder (pid, host, start time) for the second job's message.
// docs/runtime.md ("Checkpoints").
#pragma once

#include <string>

#include "common/status.h"

namespace planner {

class RunDirLock {
 public:
  RunDirLock() = default;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();  // releases the lock

  // Takes the lock of `run_dir` (which must exist) without waiting. InvalidArgument (exit 2)
  // naming the directory and the holder when another process holds it; Unavailable when the
  // lock file cannot be opened. Once held, temporaries a dead job left in the directory and in
  // its ckpt/ are removed (no live writer can own them).
  Status Acquire(const std::string& run_dir);
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace planner
