#include "common/units.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <fmt/format.h>

namespace planner {

std::string FormatBytes(double bytes) {
  double a = std::fabs(bytes);
  if (a >= kGiB) return fmt::format("{:.2f} GiB", bytes / kGiB);
  if (a >= kMiB) return fmt::format("{:.2f} MiB", bytes / kMiB);
  if (a >= 1024.0) return fmt::format("{:.2f} KiB", bytes / 1024.0);
  return fmt::format("{:.0f} B", bytes);
}

std::string FormatSeconds(double seconds) {
  double a = std::fabs(seconds);
  if (a >= 1.0) return fmt::format("{:.3f} s", seconds);
  if (a >= 1e-3) return fmt::format("{:.3f} ms", seconds * 1e3);
  return fmt::format("{:.1f} us", seconds * 1e6);
}

std::optional<uint64_t> ParseByteSize(std::string_view text) {
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (value > (UINT64_MAX - 9) / 10) return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  if (i == 0) return std::nullopt;
  if (i == text.size()) return value;
  if (i + 1 != text.size()) return std::nullopt;
  int shift = 0;
  switch (text[i]) {
    case 'K':
    case 'k': shift = 10; break;
    case 'M':
    case 'm': shift = 20; break;
    case 'G':
    case 'g': shift = 30; break;
    default: return std::nullopt;
  }
  if (value > (UINT64_MAX >> shift)) return std::nullopt;
  return value << shift;
}

namespace {

// Whether `t` is a plain decimal number: [+-] digits [. digits] [e [+-] digits] (a leading or trailing
// point allowed with digits beside it); no hexadecimal, no spaces, no "inf" or "nan".
bool PlainDecimal(std::string_view t) {
  size_t i = 0;
  auto digits = [&] {
    const size_t from = i;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
    return i - from;
  };
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
  size_t n = digits();
  if (i < t.size() && t[i] == '.') {
    ++i;
    n += digits();
  }
  if (n == 0) return false;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == t.size();
}

}  // namespace

std::string Printable(std::string_view text) {
  std::string out;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') out += "\\\\";
    else if (c < 0x20 || c > 0x7e) out += fmt::format("\\x{:02x}", c);
    else out += ch;
  }
  return out;
}

std::optional<double> ParseDouble(std::string_view text) {
  if (text.empty() || !PlainDecimal(text)) return std::nullopt;
  const std::string s(text);  // strtod needs a terminated string
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace planner
