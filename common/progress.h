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
// boundary, after the last complete checkpoint). What the first signal does depends on the mode:
//  - kAtOnce (default): ends the process at once with one "planner: error:" line;
//  - kSafePoints (the training loop polls): only sets the flag Interrupted() reads;
//  - kDeferred (an MPI rank outside the loop): sets the flag; the MPI watchdog thread ends the
//    process within 20 ms with one line, after its peer check, so a rank ended by mpirun because
//    another failed names that rank first (runtime/comm/mpi_comm.cc);
//  - kSilent (this process already printed its error): ends the process at once, no line.
// A second signal ends the process at once (one line unless kSilent). Every ending removes the
// open AtomicFile temporaries and exits with 128 + the signal.
enum class StopMode { kAtOnce = 0, kSafePoints = 1, kDeferred = 2, kSilent = 3 };
void InstallStopHandlers();
void SetStopMode(StopMode mode);
StopMode CurrentStopMode();
// The first SIGINT / SIGTERM received (0: none), and the exit code for it: 130
// (kExitInterrupted) for SIGINT, 143 (kExitTerminated) for SIGTERM.
int InterruptSignal();
int InterruptExitCode();
// Records a signal another rank received (the ranks agree at an iteration boundary to stop),
// so this rank exits with the same code; no-op when one was already received here.
void NoteInterrupt(int sig);
// "SIGINT", "SIGTERM", or "a signal".
const char* SignalName(int sig);

}  // namespace planner
