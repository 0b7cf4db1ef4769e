#include "common/file_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace planner {

namespace {

std::string ErrnoText(int e) { return std::strerror(e); }

// A temporary name unique across processes and threads: <path>.tmp.<pid>.<n>.
std::string TemporaryName(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  return fmt::format("{}.tmp.{}.{}", path, static_cast<long>(::getpid()), counter.fetch_add(1));
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string DirectoryOf(const std::string& path) {
  std::filesystem::path p(path);
  std::string d = p.parent_path().string();
  return d.empty() ? "." : d;
}

// The open temporaries, for RemoveOpenTemporaries(): fixed slots holding a copy of the name
// (a signal handler may read them while the owner runs on). A temporary whose name does not
// fit, or one beyond the slots, is not registered (still removed on every return path).
struct TempSlot {
  std::atomic<int> state{0};  // 0 free, 1 being written, 2 holds a name
  char name[4096];
};
constexpr int kTempSlots = 64;
TempSlot g_temps[kTempSlots];

int RegisterTemporary(const std::string& name) {
  if (name.size() >= sizeof(TempSlot::name)) return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    int expected = 0;
    if (!g_temps[i].state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(g_temps[i].name, name.c_str(), name.size() + 1);
    g_temps[i].state.store(2);
    return i;
  }
  return -1;
}

void UnregisterTemporary(int slot) {
  if (slot >= 0) g_temps[slot].state.store(0);
}

}  // namespace

void RemoveOpenTemporaries() {
  for (TempSlot& t : g_temps) {
    if (t.state.load() == 2) ::unlink(t.name);
  }
}

Status CheckOutputDirectory(const std::string& path, const std::string& shown) {
  const std::string dir = DirectoryOf(path);
  struct stat dst {};
  if (::stat(dir.c_str(), &dst) == 0 && S_ISDIR(dst.st_mode)) return Status::OK();
  if (::stat(dir.c_str(), &dst) == 0)
    return Status::NotFound(
        fmt::format("{}: cannot write the file: '{}' is not a directory; choose a path in a directory", shown, dir));
  return Status::NotFound(
      fmt::format("{}: cannot write the file: directory '{}' does not exist; create it first", shown, dir));
}

AtomicFile::~AtomicFile() { Discard(); }

void AtomicFile::Discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  UnregisterTemporary(slot_);
  slot_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
}

Status AtomicFile::Open(const std::string& path, unsigned mode) {
  Discard();
  path_ = path;
  if (path.empty()) return Status::InvalidArgument("an empty output path; name a file");
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(
        fmt::format("{}: exists and is not a regular file; write to a file path instead", path));
  }
  PLANNER_RETURN_IF_ERROR(CheckOutputDirectory(path, path));
  // A temporary left by a process that died with the same pid holds its name: take the next.
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    tmp_ = TemporaryName(path);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode & 07777));
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    const int e = errno;
    tmp_.clear();
    return Status::Unavailable(fmt::format("{}: cannot write the file: {}", path, ErrnoText(e)));
  }
  slot_ = RegisterTemporary(tmp_);
  // The replacement keeps the permissions of the file it replaces (plus the execute bits asked for).
  if (exists && ::fchmod(fd_, static_cast<mode_t>((st.st_mode & 07777) | (mode & 0111))) != 0) {
    const int e = errno;
    Discard();
    return Status::Unavailable(fmt::format("{}: cannot set the permissions of the new file: {}", path, ErrnoText(e)));
  }
  return Status::OK();
}

Status AtomicFile::Write(const void* data, size_t bytes) {
  if (fd_ < 0) return Status::Internal(fmt::format("{}: write to a file that is not open", path_));
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : ENOSPC;
      Discard();
      return Status::Unavailable(fmt::format("{}: write failed: {}", path_, ErrnoText(e)));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return Status::OK();
}

Status AtomicFile::Commit() {
  if (fd_ < 0) return Status::Internal(fmt::format("{}: commit of a file that is not open", path_));
  if (::fsync(fd_) != 0) {
    const int e = errno;
    Discard();
    return Status::Unavailable(fmt::format("{}: write failed (fsync): {}", path_, ErrnoText(e)));
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int e = errno;
    Discard();
    return Status::Unavailable(fmt::format("{}: write failed (close): {}", path_, ErrnoText(e)));
  }
  // The target may have become a non-regular file since Open.
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    Discard();
    return Status::InvalidArgument(
        fmt::format("{}: exists and is not a regular file; write to a file path instead", path_));
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    Discard();
    return Status::Unavailable(fmt::format("{}: cannot replace the file: {}", path_, ErrnoText(e)));
  }
  UnregisterTemporary(slot_);
  slot_ = -1;
  tmp_.clear();
  const int dfd = ::open(DirectoryOf(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    const int rc = ::fsync(dfd);
    const int e = errno;
    ::close(dfd);
    // Some file systems (tmpfs on old kernels) refuse fsync on a directory; the rename stands.
    if (rc != 0 && e != EINVAL && e != EROFS)
      return Status::Unavailable(fmt::format("{}: fsync of its directory failed: {}", path_, ErrnoText(e)));
  }
  return Status::OK();
}

Status WriteFileAtomic(const std::string& path, std::string_view text, unsigned mode) {
  AtomicFile f;
  PLANNER_RETURN_IF_ERROR(f.Open(path, mode));
  PLANNER_RETURN_IF_ERROR(f.Write(text));
  return f.Commit();
}

Status MakeDirectories(const std::string& dir) {
  if (dir.empty()) return Status::InvalidArgument("an empty directory path; name a directory");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::error_code type_ec;
  const bool is_dir = std::filesystem::is_directory(dir, type_ec);
  if (!is_dir && !type_ec) {  // it exists (or a parent does) as something else
    return Status::InvalidArgument(fmt::format("{}: exists and is not a directory; choose another path", dir));
  }
  if (ec) {
    const bool input = ec == std::errc::not_a_directory || ec == std::errc::file_exists;
    const std::string text = fmt::format("{}: cannot create the directory: {}", dir, ec.message());
    return input ? Status::InvalidArgument(text + "; a part of the path is a file") : Status::Unavailable(text);
  }
  return Status::OK();
}

bool IsAtomicFileTemporary(const std::string& filename) {
  const std::string_view f = filename;
  const size_t n_dot = f.rfind('.');
  if (n_dot == std::string_view::npos || n_dot == 0) return false;
  const size_t pid_dot = f.rfind('.', n_dot - 1);
  if (pid_dot == std::string_view::npos) return false;
  return AllDigits(f.substr(n_dot + 1)) && AllDigits(f.substr(pid_dot + 1, n_dot - pid_dot - 1)) && pid_dot > 4 &&
         f.substr(pid_dot - 4, 4) == ".tmp";
}

}  // namespace planner
