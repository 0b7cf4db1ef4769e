// The checkpoint manifest's text and strict reader, metrics.csv's strict reader, the run
// directory's lock and the agreement step (runtime/checkpoint.h, run_record.h, run_lock.h,
// agree.h). The refusals of whole checkpoints on thread ranks: executor_test.cc; under mpirun:
// checkpoint_faults_test.sh.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/timing.h"
#include "runtime/agree.h"
#include "runtime/checkpoint.h"
#include "runtime/run_lock.h"
#include "runtime/run_record.h"
#include "tests/runtime/thread_run.h"
#include "tests/test_util.h"

namespace planner {
namespace {

namespace fs = std::filesystem;

CheckpointManifest Sample() {
  CheckpointManifest m;
  m.iteration = 6;
  m.directory = "iter-6";
  m.model_digest = "0123456789abcdef";
  m.layout_digest = "fedcba9876543210";
  m.files = {{1234, 0xe3069283u}, {80, 0x00000001u}};
  return m;
}

TEST_CASE("the manifest's text reads back to the same manifest") {
  const CheckpointManifest m = Sample();
  const std::string text = ManifestText(m);
  CHECK(text.find("rank1: {bytes: 80, crc32c: 00000001}") != std::string::npos);
  CheckpointManifest back;
  REQUIRE_OK(ParseManifest("m.yaml", text, &back));
  CHECK(back.iteration == 6);
  CHECK(back.directory == "iter-6");
  CHECK(back.model_digest == m.model_digest);
  CHECK(back.layout_digest == m.layout_digest);
  REQUIRE(back.files.size() == 2);
  CHECK(back.files[0].bytes == 1234);
  CHECK(back.files[0].crc32c == 0xe3069283u);
  CHECK(back.files[1].crc32c == 1u);
}

// The first error of the manifest text `text`.
std::string Refusal(const std::string& text) {
  CheckpointManifest m;
  const Status s = ParseManifest("ck/manifest.yaml", text, &m);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  return s.message();
}

std::string Edit(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

TEST_CASE("a damaged manifest is refused with its line") {
  const std::string t = ManifestText(Sample());
  CHECK(Refusal(Edit(t, "iteration: 6", "iteration: 6x")) ==
        "ck/manifest.yaml:3: iteration: '6x' is not an iteration from 1 to 10000000; the manifest is damaged");
  CHECK(Refusal(Edit(t, "iteration: 6", "iteration: -1")).find("ck/manifest.yaml:3: iteration") == 0);
  CHECK(
      Refusal(Edit(t, "directory: iter-6", "directory: ../../etc")).find(":4: directory: '../../etc' is not iter-6") !=
      std::string::npos);
  CHECK(Refusal(Edit(t, "format: 1", "format: 2")).find(":2: format") != std::string::npos);
  CHECK(Refusal(Edit(t, "crc32c: 00000001", "crc32c: 0000001")).find(":9: rank1:") != std::string::npos);
  CHECK(Refusal(Edit(t, "crc32c: 00000001", "crc32c: 0000000g")).find(":9: rank1:") != std::string::npos);
  CHECK(Refusal(Edit(t, "crc32c: 00000001", "crc32c: -0000001")).find(":9: rank1:") != std::string::npos);
  CHECK(Refusal(Edit(t, "{bytes: 80", "{bytes: 79")).find(":9: rank1:") !=
        std::string::npos);  // below the header's size
  CHECK(Refusal(Edit(t, "ranks: 2", "ranks: 3")) == "ck/manifest.yaml: no 'rank2' field; the manifest is damaged");
  CHECK(Refusal(Edit(t, "model_digest: 0123456789abcdef", "model_digest: 0123")).find(":5: model_digest") !=
        std::string::npos);
  CHECK(Refusal(t + "rank0: {bytes: 1, crc32c: 00000000}\n").find(":10: rank0 appears twice (first on line 8)") !=
        std::string::npos);
  CHECK(Refusal(t + "extra: 1\n").find(":10: unknown field 'extra'") != std::string::npos);
  CHECK(Refusal(t + "garbage\n").find(":10: not 'key: value'") != std::string::npos);
  CHECK(Refusal("").find("no 'format' field") != std::string::npos);
}

// A metrics.csv of `text` in a fresh directory; ReadMetrics of its first `n` rows.
Status Metrics(const std::string& text, int64_t n, std::vector<double>* loss) {
  const std::string dir = testing::FreshRunDir("checkpoint-test", "metrics");
  if (!text.empty()) std::ofstream(fs::path(dir) / "metrics.csv") << text;
  std::vector<double> secs;
  return ReadMetrics(dir, n, loss, &secs);
}

TEST_CASE("metrics.csv is read back strictly: missing, garbled or short is an error with its line") {
  const std::string good =
      "iteration,loss,iteration_seconds\n1,2.500000,0.010000\n2,2.250000,0.020000\n3,2.000000,0.010000\n";
  std::vector<double> loss;
  REQUIRE_OK(Metrics(good, 2, &loss));
  CHECK(loss == std::vector<double>{2.5, 2.25});  // extra rows (after the checkpoint) are not read
  Status s = Metrics("", 2, &loss);
  CHECK(s.code() == StatusCode::kNotFound);
  CHECK(s.message().find("metrics.csv: missing") != std::string::npos);
  auto line_of = [&](const std::string& text, int64_t n) {
    const Status r = Metrics(text, n, &loss);
    CHECK(r.code() == StatusCode::kInvalidArgument);
    const size_t at = r.message().find("metrics.csv:");
    return at == std::string::npos ? r.message() : r.message().substr(at, 14);
  };
  CHECK(line_of(Edit(good, "2,2.250000", "2,abc"), 3) == "metrics.csv:3:");
  CHECK(line_of(Edit(good, "2,2.250000", "3,2.250000"), 3) == "metrics.csv:3:");  // renumbered
  CHECK(line_of(Edit(good, "2,2.250000", "2,nan"), 3) == "metrics.csv:3:");
  CHECK(line_of(Edit(good, "0.020000", "-1"), 3) == "metrics.csv:3:");
  CHECK(line_of(Edit(good, "0.020000", "1e999"), 3) == "metrics.csv:3:");  // out of range: no exception
  CHECK(line_of(Edit(good, "iteration,loss", "iter,loss"), 1) == "metrics.csv:1:");
  CHECK(line_of(good, 5) == "metrics.csv:5:");  // ends after iteration 3
  CHECK(Metrics(good, 5, &loss).message().find("ends after iteration 3, the checkpoint is at iteration 5") !=
        std::string::npos);
}

TEST_CASE("the run directory's lock: a second holder is refused with the first's pid; released at the end") {
  const std::string dir = testing::FreshRunDir("checkpoint-test", "lock");
  fs::create_directories(fs::path(dir) / "ckpt" / "iter-3");
  const fs::path stale = fs::path(dir) / "ckpt" / "iter-3" / "rank1.bin.tmp.4242.0";
  std::ofstream(stale) << "half";
  // A user's files whose names merely contain ".tmp." are not the job's temporaries: they stay.
  fs::create_directories(fs::path(dir) / "analysis");
  const fs::path notes = fs::path(dir) / "notes.tmp.txt", plot = fs::path(dir) / "analysis" / "plot.tmp.py";
  std::ofstream(notes) << "mine";
  std::ofstream(plot) << "mine";
  {
    RunDirLock first;
    REQUIRE_OK(first.Acquire(dir));
    CHECK(first.held());
    CHECK(!fs::exists(stale));  // a dead job's temporary, removed under the lock
    CHECK(fs::exists(notes));
    CHECK(fs::exists(plot));
    RunDirLock second;  // another open file description: flock refuses it as it would another process
    const Status s = second.Acquire(dir);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find(dir + ": in use by another job (pid " + std::to_string(::getpid()) + " on ") == 0);
    CHECK(s.message().find("choose another --run-id") != std::string::npos);
    CHECK(!second.held());
  }
  RunDirLock again;
  CHECK(again.Acquire(dir).ok());
}

// A file of `bytes` whose first 8 are the checkpoint magic when `magic`.
void WriteRankFile(const fs::path& path, bool magic) {
  std::ofstream(path, std::ios::binary) << (magic ? std::string("PLNCKPT2") : std::string("MYWEIGHT"))
                                        << std::string(72, 'x');
}

TEST_CASE("rotation removes only the planner's older checkpoint files; a user's files, links and names stay") {
  const fs::path dir = testing::FreshRunDir("checkpoint-test", "rotation");
  const fs::path ck = dir / "ckpt";
  for (const char* d : {"iter-10", "iter-20", "iter-5", "iter-15", "iter-best", "iter-07", "iter-3"})
    fs::create_directories(ck / d);
  WriteRankFile(ck / "iter-10" / "rank0.bin", true);  // an older checkpoint: goes
  WriteRankFile(ck / "iter-10" / "rank1.bin", true);
  std::ofstream(ck / "iter-3" / "rank1.bin.tmp.4242.0") << "half";  // a killed job's temporary: goes
  WriteRankFile(ck / "iter-20" / "rank0.bin", true);                // the new one: stays
  WriteRankFile(ck / "iter-5" / "rank0.bin", true);                 // goes; the user's note beside it stays
  std::ofstream(ck / "iter-5" / "notes.txt") << "loss spike here";
  std::ofstream(ck / "iter-5" / "plot.tmp.12.3") << "mine";  // a temporary's form, not of a rank file: stays
  WriteRankFile(ck / "iter-15" / "rank0.bin", false);        // the planner's name, not its content: stays
  WriteRankFile(ck / "iter-best" / "rank0.bin", true);       // not an iter-<n> name: stays
  WriteRankFile(ck / "iter-07" / "rank0.bin", true);         // not a name the planner writes: stays
  const fs::path outside = dir / "elsewhere";
  fs::create_directories(outside);
  WriteRankFile(outside / "rank0.bin", true);
  fs::create_directory_symlink(outside, ck / "iter-30");  // a link: neither it nor its target is touched
  CheckpointManifest m = Sample();
  m.iteration = 20;
  m.directory = "iter-20";
  std::vector<std::string> kept;
  REQUIRE_OK(CommitCheckpoint(dir.string(), m, &kept));
  CHECK(!fs::exists(ck / "iter-10"));
  CHECK(!fs::exists(ck / "iter-3"));
  CHECK(fs::exists(ck / "iter-20" / "rank0.bin"));
  CHECK(!fs::exists(ck / "iter-5" / "rank0.bin"));
  CHECK(fs::exists(ck / "iter-5" / "notes.txt"));
  CHECK(fs::exists(ck / "iter-5" / "plot.tmp.12.3"));
  CHECK(fs::exists(ck / "iter-15" / "rank0.bin"));
  CHECK(fs::exists(ck / "iter-best" / "rank0.bin"));
  CHECK(fs::exists(ck / "iter-07" / "rank0.bin"));
  CHECK(fs::is_symlink(ck / "iter-30"));
  CHECK(fs::exists(outside / "rank0.bin"));
  CHECK(fs::exists(ck / "manifest.yaml"));
  // The kept paths are named (the run warns once).
  std::string all;
  for (const std::string& k : kept) all += k + ";";
  CHECK(all.find("iter-5/notes.txt") != std::string::npos);
  CHECK(all.find("iter-15/rank0.bin") != std::string::npos);
}

TEST_CASE("the agreement step: one rank's refusal reaches every rank at once, with its rank") {
  std::vector<Status> got(3);
  const double t0 = MonotonicSeconds();
  REQUIRE_OK(RunThreadRanks(
      3,
      [&](Communicator& world) -> Status {
        const Status mine = world.rank() == 1 ? Status::NotFound("ck/iter-3/rank1.bin: missing") : Status::OK();
        got[static_cast<size_t>(world.rank())] = AgreeOnStatus(world, mine);
        return Status::OK();
      },
      30));
  CHECK(MonotonicSeconds() - t0 < 5);
  for (const Status& s : got) {
    CHECK(s.code() == StatusCode::kNotFound);
    CHECK(s.message() == "rank 1: ck/iter-3/rank1.bin: missing");
  }
  REQUIRE_OK(RunThreadRanks(
      2, [&](Communicator& world) -> Status { return AgreeOnStatus(world, Status::OK()); }, 30));
}

}  // namespace
}  // namespace planner
