// A small strict JSON reader for the files planner calibrate reads (PyTorch profiler traces, which reach
// hundreds of MB: yaml-cpp is too slow for them). RFC 8259 values; errors name "path:line:col"; nesting
// deeper than kMaxJsonDepth is refused. Not for writing.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace planner {

constexpr int kMaxJsonDepth = 64;

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string str;
  std::vector<JsonValue> items;                            // kArray
  std::vector<std::pair<std::string, JsonValue>> members;  // kObject, in file order
  // The member `key` of an object (the first when repeated); nullptr when absent or not an object.
  const JsonValue* Get(const std::string& key) const;
  bool IsNumber() const { return kind == Kind::kNumber; }
  bool IsString() const { return kind == Kind::kString; }
  bool IsArray() const { return kind == Kind::kArray; }
  bool IsObject() const { return kind == Kind::kObject; }
};

// Parses `text` (the contents of `path`). InvalidArgument "path:line:col: JSON syntax error: ..." when it is
// not one JSON value.
Status ParseJson(const std::string& path, const std::string& text, JsonValue* out);

}  // namespace planner
