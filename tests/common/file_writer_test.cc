// AtomicFile / WriteFileAtomic: the whole file or the old one, never a part;
// errors name the path; no temporary is left behind; devices and directories
// are never replaced. A write failure is simulated with RLIMIT_FSIZE in a
// forked child (SIGXFSZ ignored, so write() fails with EFBIG as on a full disk).
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/file_writer.h"
#include "tests/test_util.h"

namespace planner {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system's temporary one, removed at the end of the case.
struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "planner-fw-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path)) names.push_back(e.path().filename().string());
    return names;
  }
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_CASE("IsAtomicFileTemporary: the writer's own temporaries, not names that merely contain .tmp.") {
  CHECK(IsAtomicFileTemporary("rank1.bin.tmp.4242.0"));
  CHECK(IsAtomicFileTemporary("metrics.csv.tmp.1.17"));
  CHECK(!IsAtomicFileTemporary("notes.tmp.txt"));
  CHECK(!IsAtomicFileTemporary("plot.tmp.py"));
  CHECK(!IsAtomicFileTemporary("x.tmp.12.3a"));
  CHECK(!IsAtomicFileTemporary("x.tmp..3"));
  CHECK(!IsAtomicFileTemporary(".tmp.1.2"));
  CHECK(!IsAtomicFileTemporary("x.tmp.1"));
  CHECK(!IsAtomicFileTemporary("x.tmpx.1.2"));
}

TEST_CASE("WriteFileAtomic writes the whole file and leaves only it") {
  TempDir d;
  REQUIRE_OK(WriteFileAtomic(d / "a.yaml", "one\n"));
  CHECK(Slurp(d / "a.yaml") == "one\n");
  REQUIRE_OK(WriteFileAtomic(d / "a.yaml", "two\n"));
  CHECK(Slurp(d / "a.yaml") == "two\n");
  CHECK(d.Names() == std::vector<std::string>{"a.yaml"});
}

TEST_CASE("AtomicFile: nothing reaches the target before Commit; an uncommitted file is discarded") {
  TempDir d;
  REQUIRE_OK(WriteFileAtomic(d / "p.yaml", "old"));
  {
    AtomicFile f;
    REQUIRE_OK(f.Open(d / "p.yaml"));
    REQUIRE_OK(f.Write("new, but never committed"));
    CHECK(Slurp(d / "p.yaml") == "old");
    CHECK(d.Names().size() == 2);  // the target and its temporary
  }
  CHECK(Slurp(d / "p.yaml") == "old");
  CHECK(d.Names() == std::vector<std::string>{"p.yaml"});

  AtomicFile f;
  REQUIRE_OK(f.Open(d / "p.yaml"));
  std::string big(3 << 20, 'x');
  REQUIRE_OK(f.Write(big.data(), big.size()));
  REQUIRE_OK(f.Commit());
  CHECK(Slurp(d / "p.yaml") == big);
  CHECK(d.Names() == std::vector<std::string>{"p.yaml"});
}

TEST_CASE("AtomicFile: two writers of one path do not share a temporary; the last commit wins") {
  TempDir d;
  AtomicFile a, b;
  REQUIRE_OK(a.Open(d / "x"));
  REQUIRE_OK(b.Open(d / "x"));
  REQUIRE_OK(a.Write("from a"));
  REQUIRE_OK(b.Write("from b"));
  REQUIRE_OK(a.Commit());
  REQUIRE_OK(b.Commit());
  CHECK(Slurp(d / "x") == "from b");
  CHECK(d.Names() == std::vector<std::string>{"x"});
}

TEST_CASE("AtomicFile: a missing directory, a directory and a device are refused, naming the path") {
  TempDir d;
  Status s = WriteFileAtomic(d / "no/such/dir/p.yaml", "x");
  CHECK(s.code() == StatusCode::kNotFound);
  CHECK(ExitCodeFor(s) == kExitInput);
  CHECK(s.message() == (d / "no/such/dir/p.yaml") + ": cannot write the file: directory '" + (d / "no/such/dir") +
                           "' does not exist; create it first");

  s = WriteFileAtomic(d.path, "x");
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() == d.path + ": exists and is not a regular file; write to a file path instead");
  CHECK(fs::is_directory(d.path));

  struct stat st {};
  if (::stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode)) {
    s = WriteFileAtomic("/dev/null", "x");
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message() == "/dev/null: exists and is not a regular file; write to a file path instead");
    REQUIRE(::stat("/dev/null", &st) == 0);
    CHECK(S_ISCHR(st.st_mode));
  }
  CHECK(WriteFileAtomic("", "x").code() == StatusCode::kInvalidArgument);
  CHECK(d.Names().empty());
}

TEST_CASE("AtomicFile: a write that fails (file size limit) is an error naming the path, and leaves no temporary") {
  TempDir d;
  REQUIRE_OK(WriteFileAtomic(d / "old.yaml", "the old plan"));
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child: 4 KiB is the most any file may grow to; writing 64 KiB fails with EFBIG.
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim {
      4096, 4096
    };
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(10);
    const std::string big(64 << 10, 'y');
    Status s = WriteFileAtomic(d / "new.yaml", big);
    if (s.ok()) ::_exit(11);
    if (s.code() != StatusCode::kUnavailable || ExitCodeFor(s) != kExitFailure) ::_exit(12);
    if (s.message().rfind((d / "new.yaml") + ": write failed: ", 0) != 0) ::_exit(13);
    s = WriteFileAtomic(d / "old.yaml", big);  // replacing: the old file stays whole
    if (s.ok() || s.message().rfind((d / "old.yaml") + ": write failed: ", 0) != 0) ::_exit(14);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 11: no error; 12: wrong code; 13, 14: message without the path
  CHECK(d.Names() == std::vector<std::string>{"old.yaml"});
  CHECK(Slurp(d / "old.yaml") == "the old plan");
}

TEST_CASE("AtomicFile: the new file's permissions: the mode asked for, or the replaced file's") {
  TempDir d;
  const mode_t old_umask = ::umask(022);
  REQUIRE_OK(WriteFileAtomic(d / "run.sh", "#!/bin/bash\n", 0755));
  REQUIRE_OK(WriteFileAtomic(d / "plan.yaml", "x"));
  struct stat st {};
  REQUIRE(::stat((d / "run.sh").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0755);
  REQUIRE(::stat((d / "plan.yaml").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0644);
  REQUIRE(::chmod((d / "plan.yaml").c_str(), 0600) == 0);
  REQUIRE_OK(WriteFileAtomic(d / "plan.yaml", "y"));
  REQUIRE(::stat((d / "plan.yaml").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  ::umask(old_umask);
}

TEST_CASE("MakeDirectories: creates parents; a file in the way is an input error") {
  TempDir d;
  REQUIRE_OK(MakeDirectories(d / "a/b/c"));
  CHECK(fs::is_directory(d / "a/b/c"));
  REQUIRE_OK(MakeDirectories(d / "a/b/c"));  // already there
  REQUIRE_OK(WriteFileAtomic(d / "f", "x"));
  Status s = MakeDirectories(d / "f");
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() == (d / "f") + ": exists and is not a directory; choose another path");
  s = MakeDirectories(d / "f/g");
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().rfind((d / "f/g") + ": cannot create the directory: ", 0) == 0);
}

}  // namespace
}  // namespace planner
