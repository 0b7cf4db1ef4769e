// CRC-32C against published check values (RFC 3720 B.4, the CRC catalogue), its
// continuation property; AtomicFile's temporaries are unique: two writers of one
// path at once (threads and processes) never share a temporary, every commit
// lands whole, and none is left behind.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "common/file_writer.h"
#include "tests/test_util.h"

namespace planner {
namespace {

namespace fs = std::filesystem;

TEST_CASE("CRC-32C matches the published check values") {
  CHECK(Crc32c("123456789") == 0xE3069283u);  // the CRC catalogue's check value
  CHECK(Crc32c("") == 0u);
  CHECK(Crc32c("a") == 0xC1D04330u);
  // RFC 3720 appendix B.4: 32 bytes of zeros, of ones, ascending and descending.
  std::string zeros(32, '\0'), ones(32, '\xff'), up(32, '\0'), down(32, '\0');
  for (int i = 0; i < 32; ++i)
    up[static_cast<size_t>(i)] = static_cast<char>(i), down[static_cast<size_t>(i)] = static_cast<char>(31 - i);
  CHECK(Crc32c(zeros) == 0x8A9136AAu);
  CHECK(Crc32c(ones) == 0x62A8AB43u);
  CHECK(Crc32c(up) == 0x46DD794Eu);
  CHECK(Crc32c(down) == 0x113FDB5Cu);
}

TEST_CASE("CRC-32C continues over pieces and sees a flipped bit") {
  const std::string text = "a checkpoint's bytes, in two pieces";
  CHECK(Crc32c(text.substr(10), Crc32c(text.substr(0, 10))) == Crc32c(text));
  std::string flipped = text;
  flipped[7] = static_cast<char>(flipped[7] ^ 0x10);
  CHECK(Crc32c(flipped) != Crc32c(text));
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Each writer's content: its id repeated, so a mix of two writers is visible.
std::string Content(int id) { return std::string(64 * 1024, static_cast<char>('a' + id)); }

void CheckWholeAndClean(const fs::path& dir, const fs::path& target, int writers) {
  const std::string got = Slurp(target);
  bool whole = false;
  for (int id = 0; id < writers; ++id) whole = whole || got == Content(id);
  CHECK(whole);
  int left = 0;
  for (const auto& e : fs::directory_iterator(dir)) left += e.path().filename() != target.filename();
  CHECK(left == 0);  // no temporary left behind
}

TEST_CASE("two threads writing one path at once: every commit whole, no temporary shared or left") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("planner-crc-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path target = dir / "metrics.csv";
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int id = 0; id < 4; ++id) {
    threads.emplace_back([&, id] {
      for (int k = 0; k < 50; ++k)
        failures[static_cast<size_t>(id)] += !WriteFileAtomic(target.string(), Content(id)).ok();
    });
  }
  for (auto& t : threads) t.join();
  for (int f : failures) CHECK(f == 0);
  CheckWholeAndClean(dir, target, 4);
  fs::remove_all(dir);
}

TEST_CASE("two processes writing one path at once (two jobs, one run id): every commit whole, none left") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("planner-crc-proc-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path target = dir / "rank0.bin";
  std::vector<pid_t> kids;
  for (int id = 0; id < 2; ++id) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int bad = 0;
      for (int k = 0; k < 100; ++k) bad += !WriteFileAtomic(target.string(), Content(id)).ok();
      ::_exit(bad == 0 ? 0 : 1);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int st = 0;
    REQUIRE(::waitpid(pid, &st, 0) == pid);
    CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  }
  CheckWholeAndClean(dir, target, 2);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace planner
