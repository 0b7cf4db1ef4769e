// Megatron's --pipeline-model-parallel-layout as an input (spec/pipeline_layout.h): the string expanded as
// Megatron's parse_str_to_list does, resolved on model files into stage boundaries, and every refusal.
#include "spec/pipeline_layout.h"

#include "tests/spec/bundled_models.h"
#include "tests/test_util.h"

namespace planner {
namespace {

ModelSpec Load(const std::string& file) { return testing::LoadBundledModel(file); }

std::vector<std::string> Expand(const std::string& s) {
  std::vector<std::string> c;
  REQUIRE_OK(ExpandPipelineLayout(s, &c));
  return c;
}

TEST_CASE("expansion as Megatron's parse_str_to_list: commas dropped, (...)*n then x*n, split at '|'") {
  // The docstring's example: "Ettt|(tt|)*29,m|L" -> [E t t t] + [t t] x 29 + [m] + [L].
  std::vector<std::string> want = {"Ettt"};
  for (int i = 0; i < 29; ++i) want.push_back("tt");
  want.push_back("m");
  want.push_back("L");
  CHECK(Expand("Ettt|(tt|)*29,m|L") == want);
  CHECK(Expand("Et*3|(tt|)*29,m|L") == want);  // x*n
  // Its other patterns: (ab)*3 -> ababab; (|ab)*2,cd -> |ab|abcd.
  CHECK(Expand("(tt)*3") == std::vector<std::string>{"tttttt"});
  CHECK(Expand("(|tt)*2,tE") == std::vector<std::string>{"", "tt", "tttE"});
  CHECK(Expand("E|L") == std::vector<std::string>{"E", "L"});
  std::vector<std::string> c;
  Status st = ExpandPipelineLayout("Et|tx", &c);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("character 'x' is not a layer") != std::string::npos);
  st = ExpandPipelineLayout("E(t)*99999999|L", &c);
  CHECK(st.message().find("expands to more than 1000000 characters") != std::string::npos);
}

TEST_CASE("resolved on a model: chunk q from the row after chunk q-1's last symbol, norm and lm_head with L") {
  const ModelSpec m = Load("llama3-8b.yaml");  // embedding, block0..block31, norm, lm_head, loss
  REQUIRE(m.gpt.layers == 32);
  PipelineLayout L;
  REQUIRE_OK(ResolvePipelineLayout("Et*3|t*8|t*8|t*8|t*5L", m, 5, &L));
  CHECK(L.pp == 5);
  CHECK(L.vp == 1);
  const int64_t rows = static_cast<int64_t>(m.layers.size());
  CHECK(L.cuts == std::vector<int64_t>{0, 4, 12, 20, 28, rows});
  CHECK(m.layers[static_cast<size_t>(rows - 1)].kind == LayerKind::kLoss);
  // pp 2 x vp 2, uneven: chunk order q = virtual stage x pp + rank.
  REQUIRE_OK(ResolvePipelineLayout("Et*7|t*9|t*9|t*7L", m, 2, &L));
  CHECK(L.vp == 2);
  CHECK(L.cuts == std::vector<int64_t>{0, 8, 17, 26, rows});
}

TEST_CASE("a layout that does not cover the model, or cannot run, is refused with what differs") {
  const ModelSpec m = Load("llama3-8b.yaml");
  PipelineLayout L;
  auto msg = [&](const std::string& s, int64_t pp) {
    Status st = ResolvePipelineLayout(s, m, pp, &L);
    CHECK(st.code() == StatusCode::kInvalidArgument);
    return st.message();
  };
  CHECK(msg("Et*15|t*16L", 2).find("has 32 decoder layers ('t') and the layout places 31") != std::string::npos);
  CHECK(msg("t*16|t*16L", 2).find("has 1 embedding ('E') and the layout places 0") != std::string::npos);
  CHECK(msg("Et*16|t*16L|L", 3).find("has 1 loss ('L') and the layout places 2") != std::string::npos);
  CHECK(msg("Et*16|Lt*16", 2).find("out of order") != std::string::npos);
  CHECK(msg("Et*16|t*16L", 3).find("2 chunks are not a multiple of --pp 3") != std::string::npos);
  CHECK(msg("Et*16||t*16L", 3).find("chunk 1 (pipeline rank 1, virtual stage 0) is empty") != std::string::npos);
  CHECK(msg("Et*16|t*16mL", 2).find("has 0 MTP modules ('m') and the layout places 1") != std::string::npos);
}

TEST_CASE("DeepSeek-V3 with its MTP module: Megatron-Bridge's pp 8 x vp 4 over 61 layers") {
  const ModelSpec m = Load("deepseek-v3.yaml");
  PipelineLayout L;
  REQUIRE_OK(ResolvePipelineLayout("Et|(tt|)*30mL", m, 8, &L));
  CHECK(L.vp == 4);
  REQUIRE(L.cuts.size() == 33);
  CHECK(L.cuts[1] == 2);    // embedding + block0
  CHECK(L.cuts[31] == 62);  // the last chunk: the MTP module, the final norm, the output layer and the loss
  CHECK(m.layers[62].kind == LayerKind::kMtp);
}

}  // namespace
}  // namespace planner
