// torchtitan.toml's self-checks (codegen/torchtitan.cc; docs/exports.md "torchtitan"): one test per rule of
// torchtitan 0.2.2 (ParallelDims._validate, pipeline_parallel.py, the trainer's batch, TP / CP
// divisibility), each with settings breaking exactly that rule; the model flavor refusal.
#include <string>
#include <vector>

#include "codegen/exports.h"
#include "tests/test_util.h"

namespace planner {
namespace {

using codegen_internal::TorchtitanCheck;
using codegen_internal::TorchtitanRuleViolation;

// 32 ranks: dp_shard 2 x tp 8 x pp 2, 1F1B with 2 parts, local 16 = 8 microbatches of 2, global 32.
TorchtitanCheck Good() {
  TorchtitanCheck c;
  c.world = 32;
  c.dp_shard = 2;
  c.tp = 8;
  c.pp = 2;
  c.local_batch = 16;
  c.microbatch = 2;
  c.global_batch = 32;
  c.heads = 32;
  c.kv_heads = 8;
  c.seq = 8192;
  c.parts = {{"tok_embeddings", "layers.0"}, {"layers.1", "norm", "output"}};
  return c;
}

bool Says(const std::string& v, const std::string& what) { return v.find(what) != std::string::npos; }

TEST_CASE("torchtitan rules: the reference settings break none") { CHECK(TorchtitanRuleViolation(Good()) == ""); }

TEST_CASE("torchtitan rule: the degrees multiply to the world size") {
  TorchtitanCheck c = Good();
  c.dp_replicate = 2;
  CHECK(TorchtitanRuleViolation(c) ==
        "dp_replicate 2 x dp_shard 2 x cp 1 x tp 8 x pp 2 != world size 32 (ParallelDims._validate)");
}

TEST_CASE("torchtitan rule: local batch a multiple of the pipeline microbatch") {
  TorchtitanCheck c = Good();
  c.microbatch = 3;
  CHECK(
      Says(TorchtitanRuleViolation(c), "local_batch_size 16 is not a multiple of pipeline_parallel_microbatch_size 3"));
}

TEST_CASE("torchtitan rule: global batch = local x data parallel") {
  TorchtitanCheck c = Good();
  c.global_batch = 64;
  CHECK(Says(TorchtitanRuleViolation(c), "global_batch_size 64 != local_batch_size 16 x data-parallel 2"));
}

TEST_CASE("torchtitan rule: model parts divisible by pp") {
  TorchtitanCheck c = Good();
  c.single_stage = false;
  c.parts = {{"tok_embeddings"}, {"layers.0"}, {"layers.1", "norm", "output"}};
  CHECK(TorchtitanRuleViolation(c) == "3 model parts for pp 2: num_stages must be evenly divisible by pp_degree");
}

TEST_CASE("torchtitan rule: a single-stage schedule takes one part per rank") {
  TorchtitanCheck c = Good();
  c.parts = {{"tok_embeddings"}, {"layers.0"}, {"layers.1"}, {"norm", "output"}};
  CHECK(TorchtitanRuleViolation(c) == "4 model parts for pp 2: a single-stage schedule takes exactly 1 stage per rank");
}

TEST_CASE("torchtitan rule: V schedules take two parts per rank") {
  TorchtitanCheck c = Good();
  c.single_stage = false;
  c.v_style = true;
  CHECK(TorchtitanRuleViolation(c) == "2 model parts for pp 2: V schedules assume 2 stages per rank");
}

TEST_CASE("torchtitan rule: every model part names a module") {
  TorchtitanCheck c = Good();
  c.parts = {{"tok_embeddings", "layers.0", "layers.1", "norm", "output"}, {}};
  CHECK(TorchtitanRuleViolation(c) == "model part 1 names no module (a stage holding only the loss)");
}

TEST_CASE("torchtitan rule: TP shards whole heads and KV heads") {
  TorchtitanCheck c = Good();
  c.tp = 16;
  c.world = 64;
  CHECK(TorchtitanRuleViolation(c) ==
        "32 heads / 8 KV heads are not divisible by tp 16 (torchtitan's TP shards whole heads)");
}

TEST_CASE("torchtitan rule: seq a multiple of 2 cp") {
  TorchtitanCheck c = Good();
  c.cp = 3;
  c.world = 96;
  c.seq = 8192;
  CHECK(Says(TorchtitanRuleViolation(c), "seq_len 8192 is not a multiple of 2 x cp = 6"));
}

TEST_CASE("torchtitan export: a model that is no registered flavor is refused in a file and one note") {
  GptConfig g;
  g.layers = 4;
  g.hidden = 128;
  g.heads = 4;
  g.seq = 64;
  g.vocab = 512;
  ModelSpec m;
  REQUIRE_OK(BuildGptModel(g, DType::kBf16, &m));
  LaunchPlan L;
  L.ranks.resize(1);
  LaunchStage s;
  s.last_layer = static_cast<int64_t>(m.layers.size()) - 1;
  L.stages.push_back(s);
  L.global_batch = 2;
  L.microbatch_size = 2;
  codegen_internal::Files files;
  std::vector<std::string> notes;
  codegen_internal::AddTorchtitan(Plan{}, m, L, CodegenOptions{}, &files, &notes);
  REQUIRE(files.size() == 1);
  CHECK(files[0].first == "torchtitan.toml.refused");
  CHECK(Says(files[0].second, "is none of torchtitan's llama3 flavors 8B, 70B, 405B"));
  REQUIRE(notes.size() == 1);
  CHECK(Says(notes[0], "torchtitan.toml: not written: model"));
}

}  // namespace
}  // namespace planner
