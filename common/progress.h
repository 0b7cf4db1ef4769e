// Progress on stderr: a redrawn bar with the time left on a terminal, plain
// lines otherwise (logs, CI). Silent under SetQuiet. Not thread-safe.
#pragma once

#include <chrono>
#include <string>

namespace planner {

class Progress {
 public:
  Progress(std::string what, int total);
  ~Progress();
  // Step k of total is starting (0-based); `item` names it.
  void Update(int k, const std::string& item);
  void Done();

 private:
  std::string what_;
  int total_;
  bool tty_;
  bool done_ = false;
  std::chrono::steady_clock::time_point start_;
};

// Set by a SIGINT handler installed with InstallInterruptHandler(); polled by long loops.
bool Interrupted();
void InstallInterruptHandler();
// SIGINT and SIGTERM for a command that stops at a safe point (planner run: the next iteration
// boundary, after the last complete checkpoint): while SetStopAtSafePoints(true) the first signal
// only sets the flag that Interrupted() and InterruptSignal() read; a second one (or the first
// outside safe points) ends the process at once with one "planner: error:" line, the open
// AtomicFile temporaries removed, exit 128 + the signal.
void InstallStopHandlers();
// The first SIGINT / SIGTERM received (0: none), and the exit code for it: 130
// (kExitInterrupted) for SIGINT, 143 (kExitTerminated) for SIGTERM.
int InterruptSignal();
int InterruptExitCode();
// Records a signal another rank received (the ranks agree at an iteration boundary to stop),
// so this rank exits with the same code; no-op when one was already received here.
void NoteInterrupt(int sig);
// Whether the first signal waits for a safe point (true while the training loop polls) or ends
// the process at once like a second one (default: nothing would look at the flag).
void SetStopAtSafePoints(bool on);
// "SIGINT", "SIGTERM", or "a signal".
const char* SignalName(int sig);

}  // namespace planner
