#include "common/progress.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>

#include <fmt/format.h>

#include "common/log.h"
#include "common/units.h"

namespace planner {

namespace {
volatile std::sig_atomic_t g_interrupted = 0;
void OnSigint(int) { g_interrupted = 1; }
}  // namespace

bool Interrupted() { return g_interrupted != 0; }
void InstallInterruptHandler() { std::signal(SIGINT, OnSigint); }

Progress::Progress(std::string what, int total)
    : what_(std::move(what)), total_(total), tty_(isatty(STDERR_FILENO) != 0), start_(std::chrono::steady_clock::now()) {}

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
    std::fprintf(stderr, "\r%s [%s] %d/%d %-28.28s left %-10s", what_.c_str(), bar.c_str(), k + 1, total_, item.c_str(), left.c_str());
  } else {
    std::fprintf(stderr, "planner: %s %d/%d: %s (time left %s)\n", what_.c_str(), k + 1, total_, item.c_str(), left.c_str());
  }
  std::fflush(stderr);
}

void Progress::Done() {
  if (done_) return;
  done_ = true;
  if (tty_ && !IsQuiet()) std::fprintf(stderr, "\r%*s\r", 110, "");
}

}  // namespace planner
