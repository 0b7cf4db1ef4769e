// The YAML reader's edges: file reading errors and yaml-cpp exceptions that a
// reader lets through, each an input error naming the file (and line).
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "spec/cluster_spec.h"
#include "spec/model_spec.h"
#include "spec/profile.h"
#include "spec/yaml_reader.h"
#include "tests/test_util.h"

namespace planner {
namespace {

TEST_CASE("ReadTextFile: a directory, a missing file, a whole file") {
  const std::string dir = std::filesystem::temp_directory_path().string();
  std::string text;
  Status s = ReadTextFile(dir, &text);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() == dir + ": is a directory; give the path of a file");

  s = ReadTextFile(dir + "/planner-no-such-file.yaml", &text);
  CHECK(s.code() == StatusCode::kNotFound);
  CHECK(s.message().find("planner-no-such-file.yaml: cannot open file (") == dir.size() + 1);

  // Larger than one read: every byte arrives.
  std::string big;
  for (int i = 0; i < 40000; ++i) big += static_cast<char>('a' + i % 26);
  const std::string path = dir + "/planner-read-test-" + std::to_string(::getpid()) + ".txt";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, big.data(), big.size()) == static_cast<ssize_t>(big.size()));
  REQUIRE(::write(fd, big.data(), big.size()) == static_cast<ssize_t>(big.size()));
  ::close(fd);
  REQUIRE_OK(ReadTextFile(path, &text));
  CHECK(text == big + big);
  std::filesystem::remove(path);
}

TEST_CASE("CatchYamlErrors: a yaml-cpp exception is an input error at its position") {
  YAML::Node root;
  REQUIRE_OK(ParseYamlText("x.yaml", "a: 1\nb: [2, 3]\n", &root));
  // A subscript of a scalar and a failed conversion, as a reader that skipped a kind check would do.
  Status s = CatchYamlErrors("x.yaml", [&] {
    (void)root["a"]["c"].IsDefined();
    return Status::OK();
  });
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().rfind("x.yaml:1:", 0) == 0);
  s = CatchYamlErrors("x.yaml", [&] {
    (void)root["b"].as<int>();
    return Status::OK();
  });
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().rfind("x.yaml:2:", 0) == 0);
  CHECK(s.message().find("see docs/formats.md") != std::string::npos);
  // A Status returned by the walk passes through unchanged.
  s = CatchYamlErrors("x.yaml", [] { return Status::NotFound("nope"); });
  CHECK(s.code() == StatusCode::kNotFound);
  CHECK(s.message() == "nope");
}

TEST_CASE("readers: documents of the wrong kind are input errors, not exceptions") {
  // Scalars and lists where mappings belong, at every level a reader descends into.
  const char* docs[] = {
      "5",
      "[1, 2]",
      "name: x\ngpu: 5\n",
      "name: x\ngpu: {name: g, peak_tflops: 3}\n",
      "layers: [5]\n",
      "name: x\nglobal_batch: 1\nlayers: [[1]]\n",
      "name: x\nglobal_batch: 1\ninput: [3]\nlayers: [{repeat: 2, layers: 5}]\n",
      "format_version: 1\nmodel: m\nreference_microbatch: 1\ncomm: [5]\n",
      "format_version: 1\nmodel: m\nreference_microbatch: 1\nlayers: [{name: a, output_bytes: 1, timings: [5]}]\n"};
  for (const char* d : docs) {
    INFO(d);
    ClusterSpec c;
    ModelSpec m;
    Profile p;
    Status s = ParseClusterSpec("d.yaml", d, &c);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    s = ParseModelSpec("d.yaml", d, &m);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    s = ParseProfile("d.yaml", d, &p);
    CHECK(s.code() == StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace planner
