#include "spec/yaml_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <unordered_map>
#include <cstring>

#include <fmt/format.h>

#include "common/edit_distance.h"
#include "common/units.h"

namespace planner {

namespace {
std::string Describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "an unknown node";
}

bool ParseIntStrict(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size()) return false;
  int64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] == '_') continue;
    if (s[i] < '0' || s[i] > '9') return false;
    if (v > (INT64_MAX - 9) / 10) return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = s[0] == '-' ? -v : v;
  return true;
}

bool ParseDoubleStrict(const std::string& s, double* out) {
  const std::optional<double> v = ParseDouble(s);
  if (!v) return false;
  *out = *v;
  return true;
}
}  // namespace

namespace {
// The first byte offset where `text` is not UTF-8 (overlong forms and surrogates included), or npos.
size_t FirstInvalidUtf8(const std::string& text) {
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = b[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > n) return i;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (size_t k = 1; k < len; ++k) {
      if ((b[i + k] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (b[i + k] & 0x3f);
    }
    const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += len;
  }
  return std::string::npos;
}

int LineOf(const std::string& text, size_t offset) {
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
}

// yaml-cpp keeps every key of a mapping, duplicates included, and `map[key]` returns the first:
// a second `name:` would be silently ignored. Refused here, for every file read through this module.
Status CheckDuplicateKeys(const std::string& path, const YAML::Node& node, const std::string& field, int depth) {
  if (depth > kMaxYamlDepth) {
    return Status::InvalidArgument(
        fmt::format("{}:{}: field '{}': nested more than {} levels deep; see docs/formats.md for the layout", path,
                    node.Mark().line + 1, field, kMaxYamlDepth));
  }
  if (node.IsSequence()) {
    size_t i = 0;
    for (const auto& item : node)
      PLANNER_RETURN_IF_ERROR(CheckDuplicateKeys(path, item, fmt::format("{}[{}]", field, i++), depth + 1));
    return Status::OK();
  }
  if (!node.IsMap()) return Status::OK();
  std::unordered_map<std::string, int> first_line;
  for (const auto& kv : node) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    const std::string full = field.empty() ? key : field + "." + key;
    if (kv.first.IsScalar()) {
      const int line = kv.first.Mark().line + 1;
      auto [it, fresh] = first_line.emplace(key, line);
      if (!fresh) {
        return Status::InvalidArgument(
            fmt::format("{}:{}: field '{}': duplicate key '{}' (first given at line {}); keep one of them", path, line,
                        full, key, it->second));
      }
    }
    PLANNER_RETURN_IF_ERROR(CheckDuplicateKeys(path, kv.second, full, depth + 1));
  }
  return Status::OK();
}
}  // namespace

Status CheckTextInput(const std::string& path, const std::string& text) {
  const size_t nul = text.find('\0');
  if (nul != std::string::npos) {
    return Status::InvalidArgument(
        fmt::format("{}:{}: a NUL byte: this is a binary file, not text; give the YAML file", path, LineOf(text, nul)));
  }
  const size_t bad = FirstInvalidUtf8(text);
  if (bad != std::string::npos) {
    return Status::InvalidArgument(
        fmt::format("{}:{}: byte {} is not UTF-8 text; save the file as UTF-8", path, LineOf(text, bad), bad + 1));
  }
  return Status::OK();
}

Status ParseYamlText(const std::string& path, const std::string& text, YAML::Node* root) {
  PLANNER_RETURN_IF_ERROR(CheckTextInput(path, text));
  try {
    *root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(fmt::format("{}:{}:{}: YAML syntax error: {}; fix the syntax at that position", path,
                                               e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (!root->IsDefined() || root->IsNull()) {
    return Status::InvalidArgument(fmt::format("{}: the file is empty; see docs/formats.md for its layout", path));
  }
  return CheckDuplicateKeys(path, *root, "", 0);
}

Status ReadTextFile(const std::string& path, std::string* text, int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO with no writer would block; the type is checked before any read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return Status::NotFound(fmt::format("{}: cannot open file ({}); check the path", path, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    if (dir) return Status::InvalidArgument(fmt::format("{}: is a directory; give the path of a file", path));
    return Status::InvalidArgument(
        fmt::format("{}: is not a regular file (a FIFO, socket or device); give the path of a file", path));
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    return Status::InvalidArgument(fmt::format(
        "{}: {} bytes is more than the {} MiB {} may hold; check the path", path, static_cast<int64_t>(st.st_size),
        max_bytes >> 20, max_bytes < kMaxInputFileBytes ? "a configuration file" : "an input file"));
  }
  std::string data;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return Status::Unavailable(fmt::format("{}: read failed: {}", path, std::strerror(e)));
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    if (static_cast<int64_t>(data.size()) > max_bytes) {  // the file grew while read
      ::close(fd);
      return Status::InvalidArgument(fmt::format("{}: more than the {} MiB it may hold", path, max_bytes >> 20));
    }
  }
  ::close(fd);
  *text = std::move(data);
  return Status::OK();
}

Status YamlExceptionStatus(const std::string& path, const YAML::Exception& e) {
  if (e.mark.is_null())
    return Status::InvalidArgument(fmt::format("{}: {}; see docs/formats.md for its layout", path, e.msg));
  return Status::InvalidArgument(
      fmt::format("{}:{}:{}: {}; see docs/formats.md for its layout", path, e.mark.line + 1, e.mark.column + 1, e.msg));
}

Status LoadYamlFile(const std::string& path, YAML::Node* root, std::string* contents) {
  std::string text;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(path, &text));
  if (contents != nullptr) *contents = text;
  return ParseYamlText(path, text, root);
}

std::string YamlReader::Where(const YAML::Node& node) const {
  if (node.IsDefined() && node.Mark().line >= 0) return fmt::format("{}:{}", path_, node.Mark().line + 1);
  return path_;
}

Status YamlReader::FieldError(const YAML::Node& node, const std::string& field, const std::string& message) const {
  return Status::InvalidArgument(fmt::format("{}: field '{}': {}", Where(node), field, message));
}

Status YamlReader::RequireMap(const YAML::Node& node, const std::string& field) const {
  if (!node.IsMap()) return FieldError(node, field, "must be a mapping of keys to values, got " + Describe(node));
  return Status::OK();
}

Status YamlReader::RequireSequence(const YAML::Node& node, const std::string& field) const {
  if (!node.IsSequence()) return FieldError(node, field, "must be a list, got " + Describe(node));
  return Status::OK();
}

Status YamlReader::CheckKeys(const YAML::Node& map, const std::string& field,
                             const std::vector<std::string>& allowed) const {
  PLANNER_RETURN_IF_ERROR(RequireMap(map, field.empty() ? "(top level)" : field));
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) return FieldError(kv.first, field, "keys must be plain names");
    const std::string& key = kv.first.Scalar();
    bool known = false;
    for (const auto& a : allowed) known = known || a == key;
    if (!known) {
      std::string full = field.empty() ? key : field + "." + key;
      std::string hint = DidYouMean(key, allowed);
      if (hint.empty()) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        hint = "; allowed keys: " + list;
      }
      return Status::InvalidArgument(
          fmt::format("{}: field '{}': unknown key '{}'{}", Where(kv.first), full, key, hint));
    }
  }
  return Status::OK();
}

Status YamlReader::GetString(const YAML::Node& map, const std::string& key, const std::string& field, std::string* out,
                             bool required) const {
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) {
    if (required) return FieldError(map, field, "missing required field; add '" + key + ": <value>'");
    return Status::OK();
  }
  if (!n.IsScalar()) return FieldError(n, field, "must be a string, got " + Describe(n));
  *out = n.Scalar();
  return Status::OK();
}

Status YamlReader::AsInt(const YAML::Node& n, const std::string& field, int64_t* out, int64_t min_value) const {
  int64_t v = 0;
  if (!n.IsScalar() || !ParseIntStrict(n.Scalar(), &v)) {
    const bool digits =
        n.IsScalar() && !n.Scalar().empty() && n.Scalar().find_first_not_of("+-0123456789_") == std::string::npos;
    return FieldError(
        n, field, (digits ? "is out of range (more than 18 digits), got " : "must be an integer, got ") + Describe(n));
  }
  if (v < min_value) {
    return FieldError(n, field, fmt::format("must be at least {}, got {}", min_value, v));
  }
  *out = v;
  return Status::OK();
}

Status YamlReader::AsDouble(const YAML::Node& n, const std::string& field, double* out, double min_value,
                            bool min_exclusive) const {
  double v = 0;
  if (!n.IsScalar() || !ParseDoubleStrict(n.Scalar(), &v))
    return FieldError(n, field, "must be a number, got " + Describe(n));
  if (!std::isfinite(v)) return FieldError(n, field, "must be a finite number, got " + Describe(n));
  if (min_exclusive ? !(v > min_value) : !(v >= min_value)) {
    return FieldError(
        n, field,
        fmt::format("must be {} {}, got {}", min_exclusive ? "greater than" : "at least", min_value, n.Scalar()));
  }
  *out = v;
  return Status::OK();
}

Status YamlReader::GetInt(const YAML::Node& map, const std::string& key, const std::string& field, int64_t* out,
                          bool required, int64_t min_value) const {
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) {
    if (required) return FieldError(map, field, "missing required field; add '" + key + ": <integer>'");
    return Status::OK();
  }
  return AsInt(n, field, out, min_value);
}

Status YamlReader::GetDouble(const YAML::Node& map, const std::string& key, const std::string& field, double* out,
                             bool required, double min_value, bool min_exclusive) const {
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) {
    if (required) return FieldError(map, field, "missing required field; add '" + key + ": <number>'");
    return Status::OK();
  }
  return AsDouble(n, field, out, min_value, min_exclusive);
}

Status YamlReader::GetBool(const YAML::Node& map, const std::string& key, const std::string& field, bool* out,
                           bool required) const {
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) {
    if (required) return FieldError(map, field, "missing required field; add '" + key + ": true|false'");
    return Status::OK();
  }
  const std::string s = n.IsScalar() ? n.Scalar() : "";
  if (s == "true" || s == "True" || s == "yes") {
    *out = true;
    return Status::OK();
  }
  if (s == "false" || s == "False" || s == "no") {
    *out = false;
    return Status::OK();
  }
  return FieldError(n, field, "must be true or false, got " + Describe(n));
}

Status YamlReader::GetIntList(const YAML::Node& map, const std::string& key, const std::string& field,
                              std::vector<int64_t>* out, bool required, int64_t min_value) const {
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) {
    if (required) return FieldError(map, field, "missing required field; add '" + key + ": [<integers>]'");
    return Status::OK();
  }
  PLANNER_RETURN_IF_ERROR(RequireSequence(n, field));
  std::vector<int64_t> values;
  for (size_t i = 0; i < n.size(); ++i) {
    int64_t v = 0;
    PLANNER_RETURN_IF_ERROR(AsInt(n[i], fmt::format("{}[{}]", field, i), &v, min_value));
    values.push_back(v);
  }
  *out = std::move(values);
  return Status::OK();
}

Status YamlReader::CheckFormatVersion(const YAML::Node& root, bool required, const std::string& fix) const {
  int64_t version = 1;
  PLANNER_RETURN_IF_ERROR(GetInt(root, "format_version", "format_version", &version, required, 1));
  if (version == 1) return Status::OK();
  return FieldError(root["format_version"], "format_version",
                    fmt::format("version {} is not supported; {}", version, fix));
}

Status YamlReader::GetEnum(const YAML::Node& map, const std::string& key, const std::string& field,
                           const std::vector<std::string>& choices, std::string* out, bool required) const {
  std::string value;
  bool present = map[key].IsDefined() && !map[key].IsNull();
  PLANNER_RETURN_IF_ERROR(GetString(map, key, field, &value, required));
  if (!present) return Status::OK();
  for (const auto& c : choices) {
    if (c == value) {
      *out = value;
      return Status::OK();
    }
  }
  std::string hint = DidYouMean(value, choices);
  if (hint.empty()) {
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    hint = "; choose one of: " + list;
  }
  return FieldError(map[key], field, "unknown value '" + value + "'" + hint);
}

std::string YamlQuoted(const std::string& text) {
  std::string q = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') q += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      q += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
      continue;
    }
    q += c;
  }
  return q + "\"";
}

}  // namespace planner
