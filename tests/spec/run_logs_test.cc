// The training logs planner calibrate reads (spec/run_logs.h), in the formats the engines print, taken from
// their source at the versions docs/exports.md names:
//  - Megatron-LM core_v0.16.1 (commit 55ac7082), megatron/training/training.py training_log lines 2033-2088
//    (the iteration line) and megatron/training/utils.py lines 279-291 (report_memory, MB = MiB), and the
//    argument dump of arguments.py (`  name ....... value`);
//  - torchtitan 0.2.2 and 0.3.0 (PyPI), torchtitan/components/metrics.py MetricsProcessor.log (0.2.2 lines
//    461-470, 0.3.0 lines 522-532: "mfu: N/A" under float8), coloured by default (tools/utils.py Color), with
//    torchrun's "[rank0]:" and the "[titan] time - root - INFO - " prefix;
//  - planner run's metrics.csv.
#include <string>

#include "spec/run_logs.h"
#include "tests/test_util.h"

namespace planner {
namespace {

std::string MegatronLine(int it, double ms, int batch = 64) {
  char buf[600];
  std::snprintf(buf, sizeof buf,
                " [2025-06-01 12:34:56.789012] iteration %8d/%8d | consumed samples: %12d | elapsed time per iteration "
                "(ms): %.1f | throughput per GPU (TFLOP/s/GPU): 412.3 | learning rate: 1.500000E-04 | global batch "
                "size: %5d | lm loss: 7.123456E+00 | loss scale: 1.0 | grad norm: 2.346 | number of skipped "
                "iterations:   0 | number of nan iterations:   0 |\n",
                it, 1000, it * batch, ms, batch);
  return buf;
}

// torchtitan 0.2.2's line with its colours (red, green, orange, turquoise, blue, cyan, magenta, reset).
std::string TitanLine(int step, const char* tps, const char* mfu = "54.92%") {
  return std::string("[rank0]:[titan] 2025-06-01 12:34:56,789 - root - INFO - \x1b[31mstep: ") + std::to_string(step) +
         "  \x1b[32mloss:  7.12345  \x1b[38;2;180;60;0mgrad_norm:  1.2345  \x1b[38;2;54;234;195mmemory: "
         "35.12GiB(25.20%)  \x1b[34mtps: " +
         tps + "  \x1b[36mtflops: 543.21  \x1b[35mmfu: " + mfu + "\x1b[39m\n";
}

TEST_CASE("Megatron-LM core_v0.16.1's log: records, batch, arguments, peak memory and the median after warm-up") {
  std::string text =
      "------------------------ arguments ------------------------\n"
      "[rank0]:  tensor_model_parallel_size ...................... 2\n"
      "  pipeline_model_parallel_size .................... 4\n"
      "  global_batch_size ............................... 64\n";
  text += MegatronLine(1, 9000.0);  // the first iteration (compilation, allocator warm-up)
  text +=
      "[Rank 0] (after 1 iterations) memory (MB) | allocated: 1234.57 | max allocated: 40960.00 | reserved: "
      "50000.00 | max reserved: 50000.00\n";
  for (int it = 10; it <= 100; it += 10) text += MegatronLine(it, it == 50 ? 1300.0 : 1234.5);
  RunLog log;
  REQUIRE_OK(ParseRunLog("train.log", text, &log));
  CHECK(log.format == "megatron-lm");
  REQUIRE(log.at.size() == 11);
  CHECK(log.at.back() == 100);
  CHECK(log.seconds.front() == doctest::Approx(9.0));
  CHECK(log.global_batch == 64);
  CHECK(log.settings.at("tensor_model_parallel_size") == 2);
  CHECK(log.settings.at("pipeline_model_parallel_size") == 4);
  CHECK(log.peak_memory_GiB == doctest::Approx(40.0));
  double s = 0;
  int64_t used = 0;
  REQUIRE_OK(MeasuredIterationSeconds(log, 64 * 4096.0, 8, &s, &used));
  CHECK(used == 9);  // iteration 1 and 10 (the first tenth) are warm-up
  CHECK(s == doctest::Approx(1.2345));
}

TEST_CASE("torchtitan 0.2.2 / 0.3.0 logs: colours stripped, tps with commas, seconds from the plan's tokens") {
  std::string text =
      "[rank0]:[titan] 2025-06-01 12:34:55,000 - root - INFO - CUDA memory usage for model: "
      "3.21GiB(2.30%)\n";
  text += TitanLine(1, "1,024");
  for (int step = 10; step <= 50; step += 10) text += TitanLine(step, "5,762", step == 50 ? "N/A" : "54.92%");
  // Validation (0.2.2 metrics.py log_validation): same step numbers, not training; skipped.
  text +=
      "[rank0]:[titan] 2025-06-01 12:35:00,000 - root - INFO - \x1b[33mvalidate step: 50  \x1b[32mloss:  7.0000  "
      "\x1b[38;2;54;234;195mmemory: 35.12GiB(25.20%)  \x1b[34mtps: 99,999\x1b[39m\n";
  RunLog log;
  REQUIRE_OK(ParseRunLog("titan.log", text, &log));
  CHECK(log.format == "torchtitan");
  REQUIRE(log.at.size() == 6);
  CHECK(log.tokens_per_s_per_gpu[1] == doctest::Approx(5762));
  CHECK(log.peak_memory_GiB == doctest::Approx(35.12));
  double s = 0;
  int64_t used = 0;
  // 8 GPUs, global batch 16 of 8192 tokens: 131072 tokens per iteration at 5762 tokens/s/GPU.
  REQUIRE_OK(MeasuredIterationSeconds(log, 16 * 8192.0, 8, &s, &used));
  CHECK(used == 5);  // step 1 is warm-up (the first tenth of steps 1..50 ends at 5)
  CHECK(s == doctest::Approx(16 * 8192.0 / (5762.0 * 8)));
}

TEST_CASE("planner run's metrics.csv") {
  RunLog log;
  REQUIRE_OK(ParseRunLog("metrics.csv", "iteration,loss,iteration_seconds\n1,6.4,0.9\n2,6.3,0.25\n3,6.2,0.24\n", &log));
  CHECK(log.format == "planner-run");
  double s = 0;
  int64_t used = 0;
  REQUIRE_OK(MeasuredIterationSeconds(log, 1, 1, &s, &used));
  CHECK(used == 2);
  CHECK(s == doctest::Approx(0.245));
}

std::string Refusal(const std::string& text) {
  RunLog log;
  const Status s = ParseRunLog("x.log", text, &log);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  return s.message();
}

TEST_CASE("bad logs: truncated, interleaved, without records, unknown; each names its line and the fix") {
  const std::string good = MegatronLine(10, 1000) + MegatronLine(20, 1000);
  std::string cut = good + MegatronLine(30, 1000);
  cut.resize(cut.size() - 120);  // the job was killed mid-write
  CHECK(Refusal(cut) == "x.log:3: the log ends inside an iteration line (truncated); give the whole log");
  CHECK(
      Refusal(good + MegatronLine(10, 1000)) ==
      "x.log:3: iteration 10 after iteration 20 at line 2: two runs interleaved or concatenated in one file; give one "
      "run per file");
  CHECK(Refusal(TitanLine(10, "5,000") + TitanLine(5, "5,000")).find("x.log:2: step 5 after step 10") == 0);
  CHECK(Refusal("hello\nworld\n").find("x.log: no training records: not a Megatron-LM log") == 0);
  CHECK(Refusal(MegatronLine(10, 1000, 64) + MegatronLine(20, 1000, 128)).find("global batch size 128 after 64") !=
        std::string::npos);
  RunLog log;
  REQUIRE_OK(ParseRunLog("x.log", MegatronLine(1, 1000), &log));
  double s = 0;
  int64_t used = 0;
  const Status w = MeasuredIterationSeconds(log, 1, 1, &s, &used);
  CHECK(w.message().find("x.log: 1 record(s), all in the warm-up") == 0);
}

}  // namespace
}  // namespace planner
