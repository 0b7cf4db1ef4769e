#include "common/progress.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <mutex>

#include <fmt/format.h>

#include "common/file_writer.h"
#include "common/log.h"
#include "common/status.h"
#include "common/units.h"

namespace planner {

namespace {
// Lock-free atomics: read by the handler, the loop and the MPI watchdog thread.
std::atomic<int> g_interrupted{0};  // the first signal's number
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free,
              "the signal handler uses these atomics");
std::atomic<int64_t> g_signal_ns{0};  // CLOCK_MONOTONIC when it came (lock-free: signal-safe)
std::atomic<bool> g_line_claimed{false};
std::mutex g_late_mu;
std::string g_late_text;  // SetLateStopText's

int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
void OnSigint(int sig) {
  int none = 0;
  g_interrupted.compare_exchange_strong(none, sig);
}

// Async-signal-safe: write(2), unlink(2) (RemoveOpenTemporaries), _exit(2).
std::atomic<int> g_mode{0};  // StopMode
void OnStopSignal(int sig) {
  int none = 0;
  const bool first = g_interrupted.compare_exchange_strong(none, sig);
  if (first) {
    g_signal_ns.store(MonotonicNs());
  }
  const int mode = g_mode.load();
  if (first && (mode == static_cast<int>(StopMode::kSafePoints) || mode == static_cast<int>(StopMode::kDeferred)))
    return;
  if (mode != static_cast<int>(StopMode::kSilent)) {
    const char* text =
        sig == SIGINT
            ? (first ? "planner: error: interrupted (SIGINT) outside training; stopping at once, nothing to save\n"
                     : "planner: error: interrupted again (SIGINT); stopping at once\n")
            : (first ? "planner: error: terminated (SIGTERM) outside training; stopping at once, nothing to save\n"
                     : "planner: error: terminated again (SIGTERM); stopping at once\n");
    size_t n = 0;
    while (text[n] != '\0') ++n;
    ssize_t ignored = ::write(STDERR_FILENO, text, n);
    (void)ignored;
  }
  RemoveOpenTemporaries();
  ::_exit(128 + sig);
}
}  // namespace

bool Interrupted() { return g_interrupted.load() != 0; }
void InstallInterruptHandler() { std::signal(SIGINT, OnSigint); }
int InterruptSignal() { return g_interrupted.load(); }
void NoteInterrupt(int sig) {
  int none = 0;
  g_interrupted.compare_exchange_strong(none, sig);
}
void SetStopMode(StopMode mode) { g_mode.store(static_cast<int>(mode)); }
StopMode CurrentStopMode() { return static_cast<StopMode>(g_mode.load()); }
int InterruptExitCode() { return g_interrupted.load() == SIGTERM ? kExitTerminated : kExitInterrupted; }
const char* SignalName(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

void SetLateStopText(const std::string& text) {
  std::lock_guard<std::mutex> lk(g_late_mu);
  g_late_text = text;
}

bool ClaimStopLine() { return !g_line_claimed.exchange(true); }

void PrintLateStopLine(int64_t after_ns) {
  const int sig = g_interrupted.load();
  if (sig == 0 || g_mode.load() != static_cast<int>(StopMode::kSafePoints) || g_line_claimed.load()) return;
  const int64_t at = g_signal_ns.load();
  if (at == 0 || MonotonicNs() - at < after_ns) return;
  std::string text;
  {
    std::lock_guard<std::mutex> lk(g_late_mu);
    text = g_late_text;
  }
  if (text.empty() || !ClaimStopLine()) return;
  std::fprintf(stderr, "planner: error: %s (%s) %s\n", sig == SIGTERM ? "terminated" : "interrupted", SignalName(sig),
               text.c_str());
  std::fflush(stderr);
}

void InstallStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking calls (MPI's polling, reads) go on; the loop polls the flag
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

Progress::Progress(std::string what, int total)
    : what_(std::move(what)),
      total_(total),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() { Done(); }

void Progress::Update(int k, const std::string& item) {
  if (IsQuiet()) return;
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string left = k > 0 ? FormatSeconds(elapsed / k * (total_ - k)) : "?";
  if (tty_) {
    const int width = 24;
    int filled = total_ > 0 ? width * k / total_ : width;
    std::string bar(static_cast<size_t>(filled), '#');
    bar += std::string(static_cast<size_t>(width - filled), '.');
    std::fprintf(stderr, "\r%s [%s] %d/%d %-28.28s left %-10s", what_.c_str(), bar.c_str(), k + 1, total_, item.c_str(),
                 left.c_str());
  } else {
    std::fprintf(stderr, "planner: %s %d/%d: %s (time left %s)\n", what_.c_str(), k + 1, total_, item.c_str(),
                 left.c_str());
  }
  std::fflush(stderr);
}

void Progress::Done() {
  if (done_) return;
  done_ = true;
  if (tty_ && !IsQuiet()) std::fprintf(stderr, "\r%*s\r", 110, "");
}

}  // namespace planner
