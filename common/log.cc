#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <string>

namespace planner {

namespace {
std::atomic<bool> g_quiet{false};

void Emit(std::string_view kind, std::string_view message) {
  std::string line = "planner: ";
  line += kind;
  line += message;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}
}  // namespace

void LogError(std::string_view message) { Emit("error: ", message); }
void LogWarning(std::string_view message) { Emit("warning: ", message); }
void LogNote(std::string_view message) {
  if (!g_quiet.load()) Emit("", message);
}
void SetQuiet(bool quiet) { g_quiet.store(quiet); }

}  // namespace planner
namespace planner {
bool IsQuiet() { return g_quiet.load(); }
}  // namespace planner
