// The training logs planner calibrate reads (docs/calibration.md, "Logs"): Megatron-LM's training_log
// lines and memory report, torchtitan's per-step metrics line, and planner run's metrics.csv. Each is
// read strictly: a line that starts a record and cannot be read, iterations that go back (two runs in
// one file), a file with no record, are InvalidArgument naming the file, line and how to produce a
// good log. Pure parsing: the plan the run belongs to is checked by the caller.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace planner {

struct RunLog {
  std::string path;
  std::string format;  // "megatron-lm", "torchtitan", "planner-run"
  // Per logged record: the iteration (Megatron, planner run) or step (torchtitan) it ends at, and
  // Megatron's / planner run's seconds per iteration (averaged over the log interval), or torchtitan's
  // tokens per second per GPU.
  std::vector<int64_t> at;
  std::vector<double> seconds, tokens_per_s_per_gpu;
  std::vector<int64_t> line;   // the record's line (1-based), for messages
  int64_t global_batch = 0;    // Megatron's "global batch size" field (0: not logged)
  double peak_memory_GiB = 0;  // the largest peak the log reports (Megatron: max allocated; torchtitan:
                               // max reserved); 0: none
  // Layout and model settings the log states (Megatron's argument dump: tensor_model_parallel_size,
  // ...; torchtitan's device mesh), checked against the plan by the caller.
  std::map<std::string, int64_t> settings;
};

// Reads `text` (the contents of `path`) in whichever of the three formats it is in.
Status ParseRunLog(const std::string& path, const std::string& text, RunLog* out);

// The measured seconds per iteration: the median over the records after warm-up (the first record,
// and every record of the first tenth of the iterations logged). torchtitan's records are converted
// with the plan's tokens per iteration and GPUs. *used: the records the median is over.
// InvalidArgument naming the file when no record is left after warm-up.
Status MeasuredIterationSeconds(const RunLog& log, double tokens_per_iteration, int64_t gpus, double* seconds,
                                int64_t* used);

}  // namespace planner
