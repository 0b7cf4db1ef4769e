#include "spec/yaml_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

Status ParseYamlText(const std::string& path, const std::string& text, YAML::Node* root) {
  try {
    *root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(fmt::format("{}:{}:{}: YAML syntax error: {}; fix the syntax at that position",
                                               path, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (!root->IsDefined() || root->IsNull()) {
    return Status::InvalidArgument(fmt::format("{}: the file is empty; see docs/formats.md for its layout", path));
  }
  return Status::OK();
}

Status ReadTextFile(const std::string& path, std::string* text) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Status::NotFound(fmt::format("{}: cannot open file ({}); check the path", path, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(fmt::format("{}: is a directory; give the path of a file", path));
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
  }
  ::close(fd);
  *text = std::move(data);
  return Status::OK();
}

Status YamlExceptionStatus(const std::string& path, const YAML::Exception& e) {
  if (e.mark.is_null()) return Status::InvalidArgument(fmt::format("{}: {}; see docs/formats.md for its layout", path, e.msg));
  return Status::InvalidArgument(fmt::format("{}:{}:{}: {}; see docs/formats.md for its layout", path, e.mark.line + 1, e.mark.column + 1, e.msg));
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

Status YamlReader::CheckKeys(const YAML::Node& map, const std::string& field, const std::vector<std::string>& allowed) const {
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
      return Status::InvalidArgument(fmt::format("{}: field '{}': unknown key '{}'{}", Where(kv.first), full, key, hint));
    }
  }
  return Status::OK();
}

Status YamlReader::GetString(const YAML::Node& map, const std::string& key, const std::string& field, std::string* out, bool required) const {
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
  if (!n.IsScalar() || !ParseIntStrict(n.Scalar(), &v)) return FieldError(n, field, "must be an integer, got " + Describe(n));
  if (v < min_value) {
    return FieldError(n, field, fmt::format("must be at least {}, got {}", min_value, v));
  }
  *out = v;
  return Status::OK();
}

Status YamlReader::AsDouble(const YAML::Node& n, const std::string& field, double* out, double min_value, bool min_exclusive) const {
  double v = 0;
  if (!n.IsScalar() || !ParseDoubleStrict(n.Scalar(), &v)) return FieldError(n, field, "must be a number, got " + Describe(n));
  if (min_exclusive ? !(v > min_value) : !(v >= min_value)) {
    return FieldError(n, field, fmt::format("must be {} {}, got {}", min_exclusive ? "greater than" : "at least", min_value, n.Scalar()));
  }
  *out = v;
  return Status::OK();
}

Status YamlReader::GetInt(const YAML::Node& map, const std::string& key, const std::string& field, int64_t* out, bool required, int64_t min_value) const {
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) {
    if (required) return FieldError(map, field, "missing required field; add '" + key + ": <integer>'");
    return Status::OK();
  }
  return AsInt(n, field, out, min_value);
}

Status YamlReader::GetDouble(const YAML::Node& map, const std::string& key, const std::string& field, double* out, bool required, double min_value, bool min_exclusive) const {
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) {
    if (required) return FieldError(map, field, "missing required field; add '" + key + ": <number>'");
    return Status::OK();
  }
  return AsDouble(n, field, out, min_value, min_exclusive);
}

Status YamlReader::GetBool(const YAML::Node& map, const std::string& key, const std::string& field, bool* out, bool required) const {
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) {
    if (required) return FieldError(map, field, "missing required field; add '" + key + ": true|false'");
    return Status::OK();
  }
  const std::string s = n.IsScalar() ? n.Scalar() : "";
  if (s == "true" || s == "True" || s == "yes") { *out = true; return Status::OK(); }
  if (s == "false" || s == "False" || s == "no") { *out = false; return Status::OK(); }
  return FieldError(n, field, "must be true or false, got " + Describe(n));
}

Status YamlReader::GetIntList(const YAML::Node& map, const std::string& key, const std::string& field, std::vector<int64_t>* out, bool required, int64_t min_value) const {
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

Status YamlReader::GetEnum(const YAML::Node& map, const std::string& key, const std::string& field, const std::vector<std::string>& choices, std::string* out, bool required) const {
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

}  // namespace planner
