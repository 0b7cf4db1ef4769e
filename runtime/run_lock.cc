#include "runtime/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

#include "common/file_writer.h"

namespace planner {

namespace {

namespace fs = std::filesystem;

std::string Holder(int fd) {
  char buf[256] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s.empty() ? "holder unknown" : s;
}

std::string Me() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  const std::time_t now = std::time(nullptr);
  char when[32] = {};
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return fmt::format("pid {} on {}, since {}\n", static_cast<long>(::getpid()), host, when);
}

// AtomicFile's temporaries (<name>.tmp.<pid>.<n>) of a job that died mid-write.
void RemoveStaleTemporaries(const fs::path& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && IsAtomicFileTemporary(it->path().filename().string())) fs::remove(it->path(), ec);
  }
}

}  // namespace

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

Status RunDirLock::Acquire(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / "lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::Unavailable(fmt::format("{}: cannot open the run directory's lock: {}", path, std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    const std::string holder = e == EWOULDBLOCK ? Holder(fd) : std::string();
    ::close(fd);
    if (e != EWOULDBLOCK)
      return Status::Unavailable(fmt::format("{}: cannot lock the run directory: {}", path, std::strerror(e)));
    return Status::InvalidArgument(
        fmt::format("{}: in use by another job ({}); wait for it to end, or choose another --run-id", run_dir, holder));
  }
  fd_ = fd;
  const std::string me = Me();
  // Best effort: the lock holds without the note.
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size()))
    ::fsync(fd_);
  RemoveStaleTemporaries(run_dir);
  return Status::OK();
}

}  // namespace planner
