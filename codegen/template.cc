// FillTemplate: codegen/templates/*.py (embedded at build time) with the plan's values (docs/exports.md, "Templates").
#include "codegen/exports.h"

#include <cstdio>
#include <cstdlib>
#include <set>

namespace planner::codegen_internal {
namespace {

constexpr std::string_view kBegin = "# ---- planner template begins ----\n";
constexpr std::string_view kEnd = "# ---- planner template ends ----\n";
constexpr std::string_view kPrefix = "PLAN_";

bool NameChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

[[noreturn]] void Broken(const std::string& what) {
  std::fprintf(stderr, "planner: internal error: codegen template: %s\n", what.c_str());
  std::abort();
}

// The template's lines between its markers (all of it where a marker is missing).
std::string_view Written(std::string_view text) {
  const size_t begin = text.find(kBegin);
  if (begin != std::string_view::npos) text.remove_prefix(begin + kBegin.size());
  const size_t end = text.find(kEnd);
  if (end != std::string_view::npos) text = text.substr(0, end);
  return text;
}

const std::string& ValueOf(std::string_view name, const TemplateValues& values, std::set<std::string>* used) {
  for (const auto& [n, v] : values) {
    if (n == name) {
      used->insert(n);
      return v;
    }
  }
  Broken("no value for " + std::string(kPrefix) + std::string(name));
}

// One line (with its newline, if any) filled in, appended to *out.
void FillLine(std::string_view line, const TemplateValues& values, std::set<std::string>* used, std::string* out) {
  const size_t indent = line.find_first_not_of(' ');
  std::string_view rest = indent == std::string_view::npos ? std::string_view() : line.substr(indent);
  if (rest.substr(0, kPrefix.size()) == kPrefix) {
    size_t n = kPrefix.size();
    while (n < rest.size() && NameChar(rest[n])) ++n;
    if (rest.substr(n) == "\n" || n == rest.size()) {  // a placeholder alone on its line: whole lines
      *out += ValueOf(rest.substr(kPrefix.size(), n - kPrefix.size()), values, used);
      return;
    }
  }
  size_t at = 0;
  for (size_t p = line.find(kPrefix); p != std::string_view::npos; p = line.find(kPrefix, at)) {
    size_t n = p + kPrefix.size();
    while (n < line.size() && NameChar(line[n])) ++n;
    if (n == p + kPrefix.size()) Broken("PLAN_ without a name in: " + std::string(line));
    *out += line.substr(at, p - at);
    *out += ValueOf(line.substr(p + kPrefix.size(), n - p - kPrefix.size()), values, used);
    at = n;
  }
  *out += line.substr(at);
}

}  // namespace

std::string FillTemplate(std::string_view text, const TemplateValues& values) {
  std::string out;
  std::set<std::string> used;
  std::string_view rest = Written(text);
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    const size_t len = nl == std::string_view::npos ? rest.size() : nl + 1;
    FillLine(rest.substr(0, len), values, &used, &out);
    rest.remove_prefix(len);
  }
  for (const auto& [n, v] : values) {
    if (used.count(n) == 0) Broken("PLAN_" + n + " given but not in the template");
  }
  return out;
}

}  // namespace planner::codegen_internal
