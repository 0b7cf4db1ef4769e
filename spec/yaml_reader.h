// YamlReader: typed access to a YAML document with errors that name the file,
// line, field and the fix ("configs/x.yaml:12: field 'gpu.memory_GiB': must be
// a positive number, got '-3'"). yaml-cpp exceptions are caught in this
// module: parsing (ParseYamlText), and every reader's whole walk over its
// document (CatchYamlErrors), so none leaves spec/. Not thread-safe; one
// reader per file being parsed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/status.h"

namespace planner {

// Limits on every input file read through this module (docs/formats.md, "Limits").
constexpr int64_t kMaxInputFileBytes = int64_t{256} << 20;
// Configuration files a person writes (model, cluster, engine, kernel table, plan, Hugging Face config.json):
// far below kMaxInputFileBytes, so that a pasted-in blob is refused at once instead of parsed for seconds.
constexpr int64_t kMaxConfigFileBytes = int64_t{16} << 20;
constexpr int kMaxYamlDepth = 64;

// InvalidArgument "path:line: ..." when `text` holds a NUL byte (a binary file) or is not UTF-8.
Status CheckTextInput(const std::string& path, const std::string& text);

// Reads the whole file at `path` into *text. Refuses, without blocking, anything that is not a
// regular file (a directory, a FIFO, a device) and files over kMaxInputFileBytes. NotFound "path: cannot open
// file (reason); check the path" when it cannot be opened, InvalidArgument
// when it is a directory, Unavailable when a read fails.
// `max_bytes`: the cap (kMaxConfigFileBytes for configuration files).
Status ReadTextFile(const std::string& path, std::string* text, int64_t max_bytes = kMaxInputFileBytes);
// Reads and parses `path`. NotFound when the file cannot be opened,
// InvalidArgument "path:line:col: YAML syntax error: ..." on bad syntax, "path:line: field 'f':
// duplicate key" for a key given twice in one mapping, and nesting deeper than kMaxYamlDepth.
Status LoadYamlFile(const std::string& path, YAML::Node* root, std::string* contents = nullptr);
// Same for text already in memory; `path` only names it in messages.
Status ParseYamlText(const std::string& path, const std::string& text, YAML::Node* root);

// InvalidArgument "path:line:col: what" for a yaml-cpp exception (a node used
// as a kind it is not: a subscript of a scalar, a conversion that fails).
Status YamlExceptionStatus(const std::string& path, const YAML::Exception& e);

// Runs `walk` (a reader's pass over a parsed document) and returns its Status,
// or YamlExceptionStatus for a yaml-cpp exception it let through. The
// readers check every node's kind before they use it; this keeps a check they
// miss an input error instead of an exception.
template <typename Walk>
Status CatchYamlErrors(const std::string& path, Walk&& walk) {
  try {
    return walk();
  } catch (const YAML::Exception& e) {
    return YamlExceptionStatus(path, e);
  }
}

// `text` as a double-quoted YAML scalar: " and \ escaped, control characters as \xNN (the writers of imported
// model files and calibration files).
std::string YamlQuoted(const std::string& text);

class YamlReader {
 public:
  explicit YamlReader(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  // "path:line" of a node (1-based line), or "path" when it has no mark.
  std::string Where(const YAML::Node& node) const;
  // An InvalidArgument "path:line: field 'field': message".
  Status FieldError(const YAML::Node& node, const std::string& field, const std::string& message) const;

  // Fails on keys of `map` not in `allowed`, with a did-you-mean; also fails
  // when `map` is not a mapping.
  Status CheckKeys(const YAML::Node& map, const std::string& field, const std::vector<std::string>& allowed) const;
  Status RequireMap(const YAML::Node& node, const std::string& field) const;
  Status RequireSequence(const YAML::Node& node, const std::string& field) const;

  // Typed getters. `field` is the full dotted name used in messages.
  // Required variants fail with "missing required field"; optional ones leave
  // *out unchanged when the key is absent.
  Status GetString(const YAML::Node& map, const std::string& key, const std::string& field, std::string* out,
                   bool required) const;
  Status GetInt(const YAML::Node& map, const std::string& key, const std::string& field, int64_t* out, bool required,
                int64_t min_value) const;
  Status GetDouble(const YAML::Node& map, const std::string& key, const std::string& field, double* out, bool required,
                   double min_value, bool min_exclusive) const;
  Status GetBool(const YAML::Node& map, const std::string& key, const std::string& field, bool* out,
                 bool required) const;
  Status GetIntList(const YAML::Node& map, const std::string& key, const std::string& field, std::vector<int64_t>* out,
                    bool required, int64_t min_value) const;
  // `format_version` of a file this planner reads (version 1; absent counts as 1 unless `required`): any
  // other value is "version N is not supported; " + `fix`.
  Status CheckFormatVersion(const YAML::Node& root, bool required,
                            const std::string& fix = "this planner reads version 1") const;
  // One of `choices`; fails with a did-you-mean otherwise.
  Status GetEnum(const YAML::Node& map, const std::string& key, const std::string& field,
                 const std::vector<std::string>& choices, std::string* out, bool required) const;

  // Scalar conversions on a node already looked up.
  Status AsInt(const YAML::Node& node, const std::string& field, int64_t* out, int64_t min_value) const;
  Status AsDouble(const YAML::Node& node, const std::string& field, double* out, double min_value,
                  bool min_exclusive) const;

 private:
  std::string path_;
};

}  // namespace planner
