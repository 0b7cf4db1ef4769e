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

}  // namespace planner
