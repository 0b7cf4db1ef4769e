// Messages to stderr with the program prefix (ninja style):
//   planner: error: <what>      planner: warning: <what>      planner: <note>
// Results never go through here; they go to stdout or to -o FILE.
// Thread-safe: each call writes one line with one fwrite.
#pragma once

#include <string_view>

namespace planner {

void LogError(std::string_view message);
void LogWarning(std::string_view message);
void LogNote(std::string_view message);
// Silences LogNote (for --quiet); errors and warnings are always printed.
void SetQuiet(bool quiet);
bool IsQuiet();

}  // namespace planner
