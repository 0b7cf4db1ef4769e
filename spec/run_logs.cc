#include "spec/run_logs.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "common/units.h"

namespace planner {

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// A decimal number (digits, '.', exponent; thousands separators ',' removed when `commas`), the whole of `s`.
bool Number(std::string_view s, double* out, bool commas = false) {
  std::string t;
  for (char c : Trim(s))
    if (!(commas && c == ',')) t += c;
  if (t.empty() || t.size() > 40) return false;
  for (char c : t)
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) return false;
  char* end = nullptr;
  *out = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size() && std::isfinite(*out);
}

bool Integer(std::string_view s, int64_t* out) {
  double v = 0;
  if (!Number(s, &v) || v != std::floor(v) || std::fabs(v) > 9e15) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

// The line without ANSI escape sequences (torchtitan colours its metrics line on a terminal).
std::string StripAnsi(std::string_view s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '[') {
      i += 2;
      while (i < s.size() && !(s[i] >= '@' && s[i] <= '~')) ++i;
      continue;
    }
    o += s[i];
  }
  return o;
}

std::vector<std::string_view> Lines(const std::string& text) {
  std::vector<std::string_view> out;
  std::string_view t(text);
  while (!t.empty()) {
    const size_t nl = t.find('\n');
    out.push_back(t.substr(0, nl));
    if (nl == std::string_view::npos) break;
    t.remove_prefix(nl + 1);
  }
  return out;
}

Status LineError(const std::string& path, size_t line, const std::string& what) {
  return Status::InvalidArgument(fmt::format("{}:{}: {}", path, line, what));
}

// The value after "key: " up to the next '|' in a Megatron line; false when the key is absent.
bool Field(std::string_view line, std::string_view key, std::string_view* value) {
  const size_t k = line.find(key);
  if (k == std::string_view::npos) return false;
  std::string_view rest = line.substr(k + key.size());
  const size_t bar = rest.find('|');
  *value = Trim(rest.substr(0, bar));
  return true;
}

constexpr std::string_view kMegatronElapsed = "elapsed time per iteration (ms):";

// Megatron-LM's argument dump: "  tensor_model_parallel_size ...................... 2".
void MegatronSetting(std::string_view line, RunLog* log) {
  // torchrun --tee prefixes every line with "[rankN]:"
  if (line.size() > 1 && line[0] == '[') {
    const size_t close = line.find("]:");
    if (close != std::string_view::npos && close < 16 && line.substr(1, 4) == "rank") line.remove_prefix(close + 2);
  }
  static const char* kKeys[] = {"tensor_model_parallel_size",
                                "pipeline_model_parallel_size",
                                "context_parallel_size",
                                "data_parallel_size",
                                "expert_model_parallel_size",
                                "virtual_pipeline_model_parallel_size",
                                "global_batch_size",
                                "micro_batch_size",
                                "seq_length",
                                "num_layers",
                                "hidden_size",
                                "world_size"};
  const std::string_view t = Trim(line);
  for (const char* key : kKeys) {
    const std::string_view k(key);
    if (t.size() <= k.size() + 2 || t.substr(0, k.size()) != k || t[k.size()] != ' ') continue;
    const size_t dots = t.find_first_not_of(" .", k.size());
    int64_t v = 0;
    if (dots != std::string_view::npos && t.find(" .", k.size()) == k.size() && Integer(t.substr(dots), &v))
      log->settings[key] = v;
  }
}

Status ParseMegatronRecord(const std::string& path, size_t ln, std::string_view line, bool last_unterminated,
                           RunLog* log) {
  const size_t it = line.find("iteration ");
  std::string_view elapsed;
  if (!Field(line, kMegatronElapsed, &elapsed) || it == std::string_view::npos) {
    return LineError(path, ln,
                     last_unterminated ? "the log ends inside an iteration line (truncated); give the whole log"
                                       : "an iteration line without 'elapsed time per iteration (ms):'; give the log "
                                         "Megatron-LM's training_log prints");
  }
  std::string_view counts = Trim(line.substr(it + 10));
  counts = counts.substr(0, counts.find('|'));
  int64_t at = 0;
  double ms = 0;
  if (!Integer(counts.substr(0, counts.find('/')), &at) || at < 1)
    return LineError(path, ln, fmt::format("iteration '{}' is not 'N/ TOTAL'", Printable(counts)));
  if (!Number(elapsed, &ms) || ms <= 0 || (last_unterminated && line.back() != '|'))
    return LineError(path, ln,
                     last_unterminated ? "the log ends inside an iteration line (truncated); give the whole log"
                                       : fmt::format("elapsed time per iteration (ms) '{}' is not a positive number",
                                                     Printable(elapsed)));
  if (!log->at.empty() && at <= log->at.back()) {
    return LineError(path, ln,
                     fmt::format("iteration {} after iteration {} at line {}: two runs interleaved or concatenated in "
                                 "one file; give one run per file",
                                 at, log->at.back(), log->line.back()));
  }
  std::string_view gb;
  int64_t batch = 0;
  if (Field(line, "global batch size:", &gb) && Integer(gb, &batch)) {
    if (log->global_batch > 0 && batch != log->global_batch)
      return LineError(path, ln,
                       fmt::format("global batch size {} after {}: the batch ramps up (--rampup-batch-size); "
                                   "calibrate from iterations after the ramp",
                                   batch, log->global_batch));
    log->global_batch = batch;
  }
  log->at.push_back(at);
  log->seconds.push_back(ms / 1000);
  log->line.push_back(static_cast<int64_t>(ln));
  return Status::OK();
}

Status ParseMegatron(const std::string& path, const std::string& text, RunLog* log) {
  const std::vector<std::string_view> lines = Lines(text);
  const bool unterminated = !text.empty() && text.back() != '\n';
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = Trim(lines[i]);
    const size_t ln = i + 1;
    if (line.find("memory (MB) |") != std::string_view::npos) {
      std::string_view v;
      double mb = 0;
      if (Field(line, "max allocated:", &v) && Number(v, &mb))
        log->peak_memory_GiB = std::max(log->peak_memory_GiB, mb / 1024);
      continue;
    }
    if (line.find(kMegatronElapsed) != std::string_view::npos ||
        (line.find(" iteration ") != std::string_view::npos &&
         line.find("consumed samples:") != std::string_view::npos)) {
      PLANNER_RETURN_IF_ERROR(ParseMegatronRecord(path, ln, line, unterminated && i + 1 == lines.size(), log));
      continue;
    }
    MegatronSetting(lines[i], log);
  }
  return Status::OK();
}

// torchtitan's "step: N  loss: ...  memory: X GiB(Y%)  tps: N  tflops: ...  mfu: ...%" (colours stripped).
Status ParseTorchtitanRecord(const std::string& path, size_t ln, const std::string& line, bool last_unterminated,
                             RunLog* log) {
  auto value = [&](std::string_view key, std::string_view* out) {
    const size_t k = line.find(key);
    if (k == std::string::npos) return false;
    std::string_view rest = std::string_view(line).substr(k + key.size());
    rest = Trim(rest);
    *out = rest.substr(0, rest.find(' '));
    return true;
  };
  std::string_view step_v, tps_v, mem_v;
  int64_t step = 0;
  double tps = 0;
  if (!value("step:", &step_v) || !Integer(step_v, &step) || step < 1)
    return LineError(path, ln, "a metrics line without a step number; give the log torchtitan's trainer prints");
  if (!value("tps:", &tps_v) || !Number(tps_v, &tps, true) || tps <= 0)
    return LineError(path, ln,
                     last_unterminated ? "the log ends inside a metrics line (truncated); give the whole log"
                                       : "a metrics line without 'tps: N' (tokens per second per GPU); give the log "
                                         "torchtitan's trainer prints");
  if (!log->at.empty() && step <= log->at.back()) {
    return LineError(path, ln,
                     fmt::format("step {} after step {} at line {}: two runs interleaved or concatenated in one file; "
                                 "give one run per file",
                                 step, log->at.back(), log->line.back()));
  }
  if (value("memory:", &mem_v)) {
    double gib = 0;
    const size_t unit = mem_v.find("GiB");
    if (unit != std::string_view::npos && Number(mem_v.substr(0, unit), &gib))
      log->peak_memory_GiB = std::max(log->peak_memory_GiB, gib);
  }
  log->at.push_back(step);
  log->tokens_per_s_per_gpu.push_back(tps);
  log->line.push_back(static_cast<int64_t>(ln));
  return Status::OK();
}

Status ParseTorchtitan(const std::string& path, const std::string& text, RunLog* log) {
  const std::vector<std::string_view> lines = Lines(text);
  const bool unterminated = !text.empty() && text.back() != '\n';
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string line = StripAnsi(lines[i]);
    if (line.find("step:") == std::string::npos || line.find("loss:") == std::string::npos) continue;
    if (line.find("validate step:") != std::string::npos) continue;  // torchtitan's validation: not training
    PLANNER_RETURN_IF_ERROR(ParseTorchtitanRecord(path, i + 1, line, unterminated && i + 1 == lines.size(), log));
  }
  return Status::OK();
}

// planner run's metrics.csv: "iteration,loss,iteration_seconds".
Status ParsePlannerRun(const std::string& path, const std::string& text, RunLog* log) {
  const std::vector<std::string_view> lines = Lines(text);
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = Trim(lines[i]);
    if (line.empty()) continue;
    const size_t a = line.find(','), b = line.rfind(',');
    int64_t at = 0;
    double s = 0;
    if (a == std::string_view::npos || a == b || !Integer(line.substr(0, a), &at) || !Number(line.substr(b + 1), &s) ||
        s <= 0)
      return LineError(path, i + 1,
                       fmt::format("'{}' is not 'iteration,loss,iteration_seconds'; the file is truncated or not "
                                   "planner run's metrics.csv",
                                   Printable(line.substr(0, 60))));
    if (!log->at.empty() && at <= log->at.back())
      return LineError(path, i + 1,
                       fmt::format("iteration {} after iteration {}: not one run's metrics", at, log->at.back()));
    log->at.push_back(at);
    log->seconds.push_back(s);
    log->line.push_back(static_cast<int64_t>(i + 1));
  }
  return Status::OK();
}

}  // namespace

Status ParseRunLog(const std::string& path, const std::string& text, RunLog* out) {
  RunLog log;
  log.path = path;
  Status s;
  if (text.rfind("iteration,loss,iteration_seconds", 0) == 0) {
    log.format = "planner-run";
    s = ParsePlannerRun(path, text, &log);
  } else if (text.find(kMegatronElapsed) != std::string::npos || text.find("consumed samples:") != std::string::npos) {
    log.format = "megatron-lm";
    s = ParseMegatron(path, text, &log);
  } else if (text.find("wps:") != std::string::npos && text.find("step:") != std::string::npos) {
    return Status::InvalidArgument(fmt::format(
        "{}: a torchtitan log of a release before 0.2 ('wps:' words per second); calibrate reads the 'tps:' lines of "
        "torchtitan 0.2.2 and 0.3.0: run the job with one of those (docs/exports.md)",
        path));
  } else if (text.find("tps:") != std::string::npos && text.find("step:") != std::string::npos) {
    log.format = "torchtitan";
    s = ParseTorchtitan(path, text, &log);
  } else {
    return Status::InvalidArgument(fmt::format(
        "{}: no training records: not a Megatron-LM log ('elapsed time per iteration (ms):' lines; --log-interval 1), "
        "a torchtitan log ('step: ... tps: ...' lines; [metrics] log_freq 1) or planner run's metrics.csv",
        path));
  }
  PLANNER_RETURN_IF_ERROR(s);
  if (log.at.empty())
    return Status::InvalidArgument(
        fmt::format("{}: a {} log without one complete record; give the whole log", path, log.format));
  *out = std::move(log);
  return Status::OK();
}

Status MeasuredIterationSeconds(const RunLog& log, double tokens_per_iteration, int64_t gpus, double* seconds,
                                int64_t* used) {
  const int64_t first = log.at.front(), last = log.at.back();
  const int64_t warm = std::max<int64_t>(first, first + (last - first) / 10);
  std::vector<double> v;
  for (size_t i = 0; i < log.at.size(); ++i) {
    if (log.at[i] <= warm) continue;
    if (log.format == "torchtitan") {
      v.push_back(tokens_per_iteration / (log.tokens_per_s_per_gpu[i] * static_cast<double>(gpus)));
    } else {
      v.push_back(log.seconds[i]);
    }
  }
  if (v.empty() || tokens_per_iteration <= 0 || gpus < 1)
    return Status::InvalidArgument(fmt::format(
        "{}: {} record(s), all in the warm-up (the first record and the first tenth of the iterations); log at least 3 "
        "records (Megatron-LM --log-interval, torchtitan [metrics] log_freq) over 20 or more iterations",
        log.path, log.at.size()));
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  *seconds = n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  *used = static_cast<int64_t>(n);
  return Status::OK();
}

}  // namespace planner
