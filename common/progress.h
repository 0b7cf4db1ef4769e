// Progress on stderr: a redrawn bar with the time left on a terminal, plain
// lines otherwise (logs, CI). Silent under SetQuiet. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
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

// The stop line when the iteration boundary comes late. mpirun (Open MPI) SIGKILLs signalled ranks
// 1 s after it forwards a signal (odls_base_sigkill_timeout), so a long iteration would end the job
// without a line. The training loop (rank 0) sets, after each boundary, what the line says if the
// running iteration does not end in time: the text after "planner: error: interrupted (SIGINT) ";
// "" clears it. PrintLateStopLine (the MPI watchdog thread, every 20 ms) prints it once a stop signal
// has waited `after_ns` in StopMode::kSafePoints. ClaimStopLine: true for the first caller only, the
// late line or the boundary's own, so the job prints one line either way.
void SetLateStopText(const std::string& text);
// How long a stop signal waits for the boundary before the late line: 0.6 of mpirun's 1 s.
constexpr int64_t kLateStopNs = 600'000'000;
void PrintLateStopLine(int64_t after_ns);
bool ClaimStopLine();

}  // namespace planner
