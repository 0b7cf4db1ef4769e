// Units: parsing and printing of bytes, seconds and bandwidths. Every number
// the tool prints goes through these helpers so that its unit is always shown.
// Binary prefixes (KiB, MiB, GiB) for memory sizes, decimal GB/s for bandwidth
// (as nccl-tests prints it). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace planner {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kMiB = 1024.0 * 1024.0;
inline constexpr double kGB = 1e9;

// "1.50 GiB", "512 B", "3.2 MiB".
std::string FormatBytes(double bytes);
// "12.3 ms", "1.204 s", "850 us".
std::string FormatSeconds(double seconds);
// Parses "8", "128K", "8M", "1G" (binary suffixes, as nccl-tests -b/-e).
// Returns nullopt on malformed input.
std::optional<uint64_t> ParseByteSize(std::string_view text);
// Parses a whole decimal number ("3", "-0.25", "1e-3"): nullopt on anything
// else (empty, trailing text, out of range, inf, nan, hexadecimal "0x10", spaces). Never throws, unlike
// std::stod; readers of numbers in files use it and name the file and line.
std::optional<double> ParseDouble(std::string_view text);
// `text` fit for one message line: control characters and bytes above 0x7e written as \xNN, backslash as
// "\\" (a name with a newline would split the `planner: error:` line).
std::string Printable(std::string_view text);

}  // namespace planner
