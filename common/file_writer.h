// The one way planner writes a file: every output (plan, profile, launch
// directory, run record, checkpoint) goes through AtomicFile, which checks
// every write, flushes the data to disk and replaces the target atomically
// (a uniquely named temporary in the target's directory, fsync, rename, fsync
// of the directory). A reader sees the old file or the whole new one, never a
// half-written one; a failed write leaves no temporary behind. Targets that
// exist and are not regular files (a device, a FIFO, a directory) are refused,
// so `-o /dev/null` never replaces a device node.
// Errors name the path. A target that cannot be used as given (its directory
// is missing, it is not a regular file) is an input error (NotFound /
// InvalidArgument, exit 2); a failure of the file system (permission, full
// disk, file size limit, fsync) is StatusCode::kUnavailable, exit 1.
// Not thread-safe per object; distinct objects are independent.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace planner {

class AtomicFile {
 public:
  AtomicFile() = default;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();  // an uncommitted file is discarded (its temporary removed)

  // Opens a temporary beside `path`. Fails if the directory does not exist or
  // `path` exists and is not a regular file. The new file gets `mode` (less
  // the umask), or the permissions of the file it replaces plus the execute
  // bits of `mode`.
  [[nodiscard]] Status Open(const std::string& path, unsigned mode = 0644);
  // Appends bytes; every short or failed write is an error naming the path.
  [[nodiscard]] Status Write(const void* data, size_t bytes);
  [[nodiscard]] Status Write(std::string_view text) { return Write(text.data(), text.size()); }
  // fsync, close, rename over `path`, fsync of the directory. After an error
  // the temporary is removed and `path` is untouched.
  [[nodiscard]] Status Commit();
  // Removes the temporary without touching `path` (also done by the destructor).
  void Discard();

  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  int slot_ = -1;  // its entry in the registry RemoveOpenTemporaries() reads
};

// Removes the temporaries of every AtomicFile open in this process now. Async-signal-safe
// (unlink only): for a process about to end without unwinding (a second Ctrl-C, the MPI
// watchdog, a rank leaving a failed job), so that no half-written temporary keeps a disk full.
void RemoveOpenTemporaries();

// The directory `path` would be written in exists and is a directory; NotFound otherwise, beginning with
// `shown` (the path, or the flag that named it and the path) and naming the fix. AtomicFile::Open checks it,
// and an output guard can check it before any work is done.
Status CheckOutputDirectory(const std::string& path, const std::string& shown);

// Writes `text` to `path` through AtomicFile (`mode` as in AtomicFile::Open).
[[nodiscard]] Status WriteFileAtomic(const std::string& path, std::string_view text, unsigned mode = 0644);

// Creates `dir` (and its parents) if missing; an error names the directory:
// InvalidArgument (exit 2) when it exists and is not a directory.
[[nodiscard]] Status MakeDirectories(const std::string& dir);

// Whether `filename` (no directory) is one of AtomicFile's temporaries, <name>.tmp.<pid>.<n> with
// <pid> and <n> decimal: what a job that died mid-write leaves, and the only names a clean-up may
// remove (a user's notes.tmp.txt or plot.tmp.py is none).
bool IsAtomicFileTemporary(const std::string& filename);

}  // namespace planner
