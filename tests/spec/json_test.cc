// The JSON reader planner calibrate reads profiler traces with (spec/json.h): values, escapes, and errors
// with their line and column.
#include <string>

#include "spec/json.h"
#include "tests/test_util.h"

namespace planner {
namespace {

TEST_CASE("JSON values, escapes and member lookup") {
  JsonValue v;
  REQUIRE_OK(ParseJson("t.json",
                       R"({"a": [1, -2.5e3, true, false, null], "s": "x\"\\\n\u00e9", "o": {"k": {}}, "a": 0})", &v));
  REQUIRE(v.IsObject());
  const JsonValue* a = v.Get("a");  // the first of a repeated key
  REQUIRE(a != nullptr);
  REQUIRE(a->IsArray());
  CHECK(a->items.size() == 5);
  CHECK(a->items[1].number == -2500);
  CHECK(a->items[2].boolean);
  CHECK_FALSE(a->items[3].boolean);
  CHECK(a->items[4].kind == JsonValue::Kind::kNull);
  CHECK(v.Get("s")->str == "x\"\\\n\xc3\xa9");
  CHECK(v.Get("o")->Get("k")->IsObject());
  CHECK(v.Get("missing") == nullptr);
}

std::string Error(const std::string& text) {
  JsonValue v;
  const Status s = ParseJson("t.json", text, &v);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  return s.message();
}

TEST_CASE("JSON errors name the line and column") {
  CHECK(Error("{\"a\": [1, 2,\n") == "t.json:2:1: JSON syntax error: unexpected end of file (truncated?)");
  CHECK(Error("{\"a\" 1}") == "t.json:1:6: JSON syntax error: expected ':' after a key");
  CHECK(Error("[1] x") == "t.json:1:5: JSON syntax error: text after the JSON value");
  CHECK(Error("\"abc") == "t.json:1:5: JSON syntax error: a string without its closing quote (truncated?)");
  CHECK(Error(std::string(70, '[') + std::string(70, ']')).find("nested deeper than 64 levels") != std::string::npos);
  // RFC 8259's grammar: no leading zero, no bare fraction or plus sign, finite, four hex digits, paired surrogates.
  CHECK(Error("[01]").find("JSON syntax error") != std::string::npos);
  CHECK(Error("[.5]").find("unexpected character '.'") != std::string::npos);
  CHECK(Error("[+1]").find("unexpected character '+'") != std::string::npos);
  CHECK(Error("[1e999]") == "t.json:1:2: JSON syntax error: '1e999]' is out of the range of a double");
  CHECK(Error(R"(["\u000g"])") == "t.json:1:9: JSON syntax error: a \\u escape with a non-hex digit");
  CHECK(Error(R"(["\ud83d"])").find("a high surrogate") != std::string::npos);
  JsonValue v;
  REQUIRE_OK(ParseJson("t.json", R"(["\ud83d\ude00", -0.5e-3, 0])", &v));
  CHECK(v.items[0].str == "\xf0\x9f\x98\x80");  // U+1F600 in UTF-8
  CHECK(v.items[1].number == -0.0005);
}

}  // namespace
}  // namespace planner
