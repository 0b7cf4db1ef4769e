// The input checks every reader shares (issue 16): text that is not UTF-8 or holds a NUL byte,
// duplicate keys at any depth, nesting depth, non-finite numbers, files that are not regular
// (a FIFO refused without blocking), and the size bounds of model files.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "spec/model_spec.h"
#include "spec/yaml_reader.h"
#include "tests/test_util.h"

namespace planner {
namespace {

TEST_CASE(
    "CheckTextInput: UTF-8 accepted, NUL, stray, truncated, overlong and surrogate bytes refused with their line") {
  CHECK_OK(CheckTextInput("f", "name: caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n"));
  CHECK_OK(CheckTextInput("f", ""));
  Status s = CheckTextInput("f", std::string("a: 1\nb: \0\n", 10));
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() == "f:2: a NUL byte: this is a binary file, not text; give the YAML file");
  s = CheckTextInput("f", std::string("a: 1\nb: 2\nc: \xff\n"));
  CHECK(s.message() == "f:3: byte 14 is not UTF-8 text; save the file as UTF-8");
  CHECK(CheckTextInput("f", "x\xc3").message() ==
        "f:1: byte 2 is not UTF-8 text; save the file as UTF-8");  // truncated
  CHECK(CheckTextInput("f", "\xc0\xaf").message() ==
        "f:1: byte 1 is not UTF-8 text; save the file as UTF-8");  // overlong '/'
  CHECK(CheckTextInput("f", "\xed\xa0\x80").message() ==
        "f:1: byte 1 is not UTF-8 text; save the file as UTF-8");  // a surrogate
  CHECK(CheckTextInput("f", "\xf4\x90\x80\x80").message() ==
        "f:1: byte 1 is not UTF-8 text; save the file as UTF-8");  // above U+10FFFF
}

TEST_CASE("ParseYamlText: a duplicate key at any depth names both lines; the same key in two mappings is fine") {
  YAML::Node root;
  Status s = ParseYamlText("d.yaml", "a: 1\nb: 2\na: 3\n", &root);
  CHECK(s.message() == "d.yaml:3: field 'a': duplicate key 'a' (first given at line 1); keep one of them");
  s = ParseYamlText("d.yaml", "x:\n  - {k: 1}\n  - {k: 2, k: 3}\n", &root);
  CHECK(s.message() == "d.yaml:3: field 'x[1].k': duplicate key 'k' (first given at line 3); keep one of them");
  CHECK_OK(ParseYamlText("d.yaml", "x: {k: 1}\ny: {k: 1}\nz: [{k: 1}, {k: 2}]\n", &root));
  // JSON (config.json) goes through the same reader.
  s = ParseYamlText("c.json", "{\"h\": 1,\n \"h\": 2}", &root);
  CHECK(s.message() == "c.json:2: field 'h': duplicate key 'h' (first given at line 1); keep one of them");
}

TEST_CASE("ParseYamlText: nesting past kMaxYamlDepth is refused, at the limit accepted") {
  YAML::Node root;
  auto nested = [](int depth) {
    return "a: " + std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']') + "\n";
  };
  CHECK_OK(ParseYamlText("n.yaml", nested(kMaxYamlDepth - 1), &root));
  Status s = ParseYamlText("n.yaml", nested(kMaxYamlDepth + 5), &root);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("nested more than 64 levels deep") != std::string::npos);
}

// YAML's .inf / .nan and overflowing literals are not numbers to ParseDouble; AsDouble also refuses
// any non-finite value a parser might let through.
TEST_CASE("AsDouble and AsInt: non-finite numbers and 19-digit integers are refused") {
  YAML::Node root;
  REQUIRE_OK(ParseYamlText("v.yaml", "a: .nan\nb: .inf\nc: -.inf\nd: 1e400\ne: 99999999999999999999\nf: 2.5\n", &root));
  YamlReader r("v.yaml");
  double d = 7;
  CHECK(r.GetDouble(root, "a", "a", &d, true, -1e300, false).message().rfind("v.yaml:1: field 'a': must be", 0) == 0);
  CHECK(r.GetDouble(root, "b", "b", &d, true, 0.0, false).message() ==
        "v.yaml:2: field 'b': must be a number, got '.inf'");
  CHECK(r.GetDouble(root, "c", "c", &d, true, -1e300, false).message() ==
        "v.yaml:3: field 'c': must be a number, got '-.inf'");
  CHECK_FALSE(r.GetDouble(root, "d", "d", &d, true, 0.0, false).ok());
  CHECK(d == 7);  // unchanged by a refused value
  REQUIRE_OK(r.GetDouble(root, "f", "f", &d, true, 0.0, false));
  CHECK(d == 2.5);
  int64_t i = 0;
  CHECK(r.GetInt(root, "e", "e", &i, true, 1).message() ==
        "v.yaml:5: field 'e': is out of range (more than 18 digits), got '99999999999999999999'");
}

TEST_CASE("ReadTextFile: a FIFO without a writer is refused at once, not waited on") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("planner-fifo-" + std::to_string(::getpid()))).string();
  std::filesystem::remove(path);
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  std::string text;
  const auto start = std::chrono::steady_clock::now();
  Status s = ReadTextFile(path, &text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::filesystem::remove(path);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() == path + ": is not a regular file (a FIFO, socket or device); give the path of a file");
  CHECK(seconds < 1.0);
  CHECK(ReadTextFile("/dev/null", &text).message() ==
        "/dev/null: is not a regular file (a FIFO, socket or device); give the path of a file");
}

TEST_CASE("ParseModelSpec: 100000 layers (the maximum) load in linear time; sizes above 2^24 are refused") {
  ModelSpec m;
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_OK(ParseModelSpec(
      "deep.yaml", "name: d\nglobal_batch: 8\ngpt: {layers: 100000, hidden: 64, heads: 4, seq: 32, vocab: 128}\n", &m));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(m.layers.size() == 100000 + 4);  // embedding, blocks, final norm, lm_head, loss
  CHECK(m.layers[100000].name == "block99999");
  CHECK(seconds < 10.0);  // was quadratic (every name compared with every earlier one): minutes
  Status s = ParseModelSpec(
      "big.yaml", "name: d\nglobal_batch: 8\ngpt: {layers: 2, hidden: 16777217, heads: 1, seq: 32, vocab: 128}\n", &m);
  CHECK(s.message() ==
        "big.yaml:3: field 'gpt.hidden': 16777217 is more than the largest size this planner reads (16777216); check "
        "the value");
  REQUIRE_OK(ParseModelSpec("edge.yaml", "name: d\nglobal_batch: 8\ninput: [16777216]\nlayers: [{type: relu}]\n", &m));
  CHECK(m.layers[0].out_shape == std::vector<int64_t>{16777216});
}

}  // namespace
}  // namespace planner
