#include "spec/json.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace planner {

const JsonValue* JsonValue::Get(const std::string& key) const {
  if (kind != Kind::kObject) return nullptr;
  for (const auto& [k, v] : members)
    if (k == key) return &v;
  return nullptr;
}

namespace {

class Parser {
 public:
  Parser(const std::string& path, const std::string& text) : path_(path), t_(text) {}

  Status Document(JsonValue* out) {
    PLANNER_RETURN_IF_ERROR(Value(out, 0));
    Space();
    if (i_ != t_.size()) return Error("text after the JSON value");
    return Status::OK();
  }

 private:
  Status Error(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t j = 0; j < i_ && j < t_.size(); ++j) {
      if (t_[j] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return Status::InvalidArgument(fmt::format("{}:{}:{}: JSON syntax error: {}", path_, line, col, what));
  }
  void Space() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\n' || t_[i_] == '\r' || t_[i_] == '\t')) ++i_;
  }
  bool Literal(const char* word) {
    size_t n = 0;
    while (word[n] != '\0') ++n;
    if (t_.compare(i_, n, word) != 0) return false;
    i_ += n;
    return true;
  }
  Status Value(JsonValue* v, int depth) {
    if (depth > kMaxJsonDepth) return Error(fmt::format("nested deeper than {} levels", kMaxJsonDepth));
    Space();
    if (i_ >= t_.size()) return Error("unexpected end of file (truncated?)");
    const char c = t_[i_];
    if (c == '{') return Object(v, depth);
    if (c == '[') return Array(v, depth);
    if (c == '"') {
      v->kind = JsonValue::Kind::kString;
      return String(&v->str);
    }
    if (Literal("true") || Literal("false")) {
      v->kind = JsonValue::Kind::kBool;
      v->boolean = t_[i_ - 1] == 'e' && t_[i_ - 2] == 'u';
      return Status::OK();
    }
    if (Literal("null")) {
      v->kind = JsonValue::Kind::kNull;
      return Status::OK();
    }
    return Number(v);
  }
  // RFC 8259's number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, finite.
  Status Number(JsonValue* v) {
    const size_t start = i_;
    auto digits = [&] {
      const size_t from = i_;
      while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
      return i_ > from;
    };
    bool ok = true;
    if (i_ < t_.size() && t_[i_] == '-') ++i_;
    if (i_ < t_.size() && t_[i_] == '0') {
      ++i_;
    } else {
      ok = i_ < t_.size() && t_[i_] >= '1' && t_[i_] <= '9' && digits();
    }
    if (ok && i_ < t_.size() && t_[i_] == '.') {
      ++i_;
      ok = digits();
    }
    if (ok && i_ < t_.size() && (t_[i_] == 'e' || t_[i_] == 'E')) {
      ++i_;
      if (i_ < t_.size() && (t_[i_] == '+' || t_[i_] == '-')) ++i_;
      ok = digits();
    }
    if (!ok || i_ == start) {
      if (i_ == start) return Error(fmt::format("unexpected character '{}'", t_[i_]));
      return Error(fmt::format("'{}' is not a JSON number", t_.substr(start, std::min<size_t>(i_ - start + 1, 40))));
    }
    v->number = std::strtod(t_.substr(start, i_ - start).c_str(), nullptr);
    if (!std::isfinite(v->number)) {
      i_ = start;
      return Error(fmt::format("'{}' is out of the range of a double", t_.substr(start, 40)));
    }
    v->kind = JsonValue::Kind::kNumber;
    return Status::OK();
  }
  static void Utf8(unsigned cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  // Four hex digits of a \u escape.
  Status Hex4(unsigned* cp) {
    if (i_ + 4 > t_.size()) return Error("a \\u escape cut short");
    *cp = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = t_[i_++];
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0) return Error("a \\u escape with a non-hex digit");
      *cp = *cp * 16 + static_cast<unsigned>(d);
    }
    return Status::OK();
  }
  Status String(std::string* out) {
    ++i_;  // the opening quote
    while (i_ < t_.size() && t_[i_] != '"') {
      const char c = t_[i_++];
      if (c != '\\') {
        if (static_cast<unsigned char>(c) < 0x20) return Error("a control character inside a string");
        *out += c;
        continue;
      }
      if (i_ >= t_.size()) break;
      const char e = t_[i_++];
      switch (e) {
        case '"': *out += '"'; break;
        case '\\': *out += '\\'; break;
        case '/': *out += '/'; break;
        case 'b': *out += '\b'; break;
        case 'f': *out += '\f'; break;
        case 'n': *out += '\n'; break;
        case 'r': *out += '\r'; break;
        case 't': *out += '\t'; break;
        case 'u': {
          unsigned cp = 0;
          PLANNER_RETURN_IF_ERROR(Hex4(&cp));
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate: its low one must follow
            unsigned low = 0;
            if (t_.compare(i_, 2, "\\u") != 0) return Error("a high surrogate \\u escape without its low one");
            i_ += 2;
            PLANNER_RETURN_IF_ERROR(Hex4(&low));
            if (low < 0xDC00 || low > 0xDFFF) return Error("a high surrogate \\u escape without its low one");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Error("a low surrogate \\u escape without its high one");
          }
          Utf8(cp, out);
          break;
        }
        default: return Error(fmt::format("unknown escape '\\{}'", e));
      }
    }
    if (i_ >= t_.size()) return Error("a string without its closing quote (truncated?)");
    ++i_;
    return Status::OK();
  }
  Status Array(JsonValue* v, int depth) {
    v->kind = JsonValue::Kind::kArray;
    ++i_;
    Space();
    if (i_ < t_.size() && t_[i_] == ']') {
      ++i_;
      return Status::OK();
    }
    while (true) {
      v->items.emplace_back();
      PLANNER_RETURN_IF_ERROR(Value(&v->items.back(), depth + 1));
      Space();
      if (i_ >= t_.size()) return Error("unexpected end of file inside an array (truncated?)");
      if (t_[i_] == ']') {
        ++i_;
        return Status::OK();
      }
      if (t_[i_] != ',') return Error("expected ',' or ']' in an array");
      ++i_;
    }
  }
  Status Object(JsonValue* v, int depth) {
    v->kind = JsonValue::Kind::kObject;
    ++i_;
    Space();
    if (i_ < t_.size() && t_[i_] == '}') {
      ++i_;
      return Status::OK();
    }
    while (true) {
      Space();
      if (i_ >= t_.size() || t_[i_] != '"') return Error("expected a quoted key in an object");
      std::string key;
      PLANNER_RETURN_IF_ERROR(String(&key));
      Space();
      if (i_ >= t_.size() || t_[i_] != ':') return Error("expected ':' after a key");
      ++i_;
      v->members.emplace_back(std::move(key), JsonValue());
      PLANNER_RETURN_IF_ERROR(Value(&v->members.back().second, depth + 1));
      Space();
      if (i_ >= t_.size()) return Error("unexpected end of file inside an object (truncated?)");
      if (t_[i_] == '}') {
        ++i_;
        return Status::OK();
      }
      if (t_[i_] != ',') return Error("expected ',' or '}' in an object");
      ++i_;
    }
  }

  const std::string& path_;
  const std::string& t_;
  size_t i_ = 0;
};

}  // namespace

Status ParseJson(const std::string& path, const std::string& text, JsonValue* out) {
  JsonValue v;
  Parser p(path, text);
  PLANNER_RETURN_IF_ERROR(p.Document(&v));
  *out = std::move(v);
  return Status::OK();
}

}  // namespace planner
