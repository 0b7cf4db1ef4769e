// megatron.args of an MoE plan (codegen/codegen.cc; docs/formats.md, "The engine files of a launch
// directory"): the MoE, MLA and MTP flags read from the model's layers and the plan's ep / etp, and
// DeepSpeed's refusal of an MoE plan.
#include <string>

#include "codegen/codegen.h"
#include "dp_solver/search.h"
#include "tests/dp_solver/moe_model.h"
#include "tests/test_util.h"

namespace planner {
namespace {

std::string FileOf(const std::vector<std::pair<std::string, std::string>>& files, const std::string& name) {
  for (const auto& [path, text] : files) {
    if (path == name) return text;
  }
  return "";
}

TEST_CASE("megatron.args of an MoE plan: experts, router, layer pattern, EP / ETP, MLA and MTP; DeepSpeed refuses it") {
  ModelSpec m = testing::MoeModel(4, 8, 2, 1408, 1, 32);
  for (Layer& l : m.layers) {
    if (l.type != "transformer_block" && l.type != "moe_block") continue;
    for (auto [key, v] : {std::pair{"q_lora_rank", 0}, {"kv_lora_rank", 256}, {"qk_rope_head_dim", 32}, {"qk_nope_head_dim", 64}, {"v_head_dim", 64}}) {
      l.attrs.ints[key] = v;
    }
    if (l.type != "moe_block") continue;
    l.attrs.ints["shared_ffn"] = 1408;
    l.attrs.ints["route_groups"] = 4;
    l.attrs.ints["route_group_limit"] = 2;
    l.attrs.strings["router"] = "sigmoid";
    l.attrs.reals["aux_loss"] = 0.0001;
  }
  Layer mtp;
  mtp.name = "mtp0";
  mtp.type = "mtp";
  mtp.in_shape = mtp.out_shape = m.layers[1].out_shape;
  m.layers.insert(m.layers.end() - 3, mtp);  // before the final norm, the lm_head and the loss
  ClusterSpec c;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-h100.yaml"), &c));
  CostSource src;
  src.model = &m;
  src.cluster = &c;
  SearchOptions o;
  o.gpus = 16;
  o.tp = {2};
  o.ep = {4};
  o.etp = {1};
  o.pp = {2};
  o.microbatch = {1};
  o.schedules = {Schedule::k1F1B};
  o.recompute = {Recompute::kNone};
  o.cp = {1};
  o.cost.moe_overlap = true;
  Plan plan;
  REQUIRE_OK(SolveAuto(src, o, &plan));
  REQUIRE(plan.ep == 4);
  LaunchPlan L;
  CodegenOptions co;
  REQUIRE_OK(BuildLaunchPlan(plan, "digest", co, &L));
  std::vector<std::pair<std::string, std::string>> files;
  std::vector<std::string> notes;
  REQUIRE_OK(GenerateLaunchFiles(plan, m, L, co, &files, &notes));
  const std::string mg = FileOf(files, "megatron.args");
  REQUIRE(!mg.empty());
  for (const char* flag : {"--num-experts 8\n", "--moe-router-topk 2\n", "--moe-ffn-hidden-size 1408\n", "--moe-shared-expert-intermediate-size 1408\n",
                           "--moe-layer-freq ([0]*1+[1]*3)\n", "--expert-model-parallel-size 4\n", "--expert-tensor-parallel-size 1\n",
                           "--moe-token-dispatcher-type alltoall\n", "--moe-grouped-gemm\n", "--moe-router-score-function sigmoid\n",
                           "--moe-router-load-balancing-type seq_aux_loss\n", "--moe-aux-loss-coeff 0.0001\n", "--moe-router-enable-expert-bias\n",
                           "--moe-router-num-groups 4\n", "--moe-router-group-topk 2\n", "--overlap-moe-expert-parallel-comm\n",
                           "--delay-wgrad-compute\n", "--multi-latent-attention\n", "--kv-lora-rank 256\n", "--qk-head-dim 64\n",
                           "--qk-pos-emb-head-dim 32\n", "--v-head-dim 64\n", "--mtp-num-layers 1\n", "--sequence-parallel\n",
                           "--tensor-model-parallel-size 2\n"}) {
    CHECK_MESSAGE(mg.find(flag) != std::string::npos, flag);
  }
  CHECK(mg.find("--q-lora-rank") == std::string::npos);          // q_lora_rank 0: no query compression
  CHECK(mg.find("--group-query-attention") == std::string::npos);  // MLA has no query groups
  CHECK(mg.find("--moe-expert-capacity-factor") == std::string::npos);  // dropless
  const std::string refused = FileOf(files, "deepspeed/refused.txt");
  CHECK(refused.find("mixture of experts (8 experts, top 2, ep 4)") != std::string::npos);
  CHECK(FileOf(files, "deepspeed/ds_config.json").empty());
}

TEST_CASE("megatron.args of an all-MoE softmax model: --moe-layer-freq 1, aux_loss, capacity; no MoE flags for a dense model") {
  ModelSpec m = testing::MoeModel(2, 4, 1, 1024, 0, 16);
  for (Layer& l : m.layers) {
    if (l.type != "moe_block") continue;
    l.attrs.reals["aux_loss"] = 0.01;
    l.attrs.reals["capacity_factor"] = 1.25;
  }
  ClusterSpec c;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-h100.yaml"), &c));
  for (bool moe : {true, false}) {
    ModelSpec model = moe ? m : testing::MoeModel(2, 4, 1, 1024, 2, 16);
    CostSource src;
    src.model = &model;
    src.cluster = &c;
    SearchOptions o;
    o.gpus = 4;
    o.tp = {1};
    o.pp = {1};
    o.ep = {moe ? 2 : 1};
    o.microbatch = {1};
    o.recompute = {Recompute::kNone};
    o.cp = {1};
    Plan plan;
    REQUIRE_OK(SolveAuto(src, o, &plan));
    LaunchPlan L;
    CodegenOptions co;
    REQUIRE_OK(BuildLaunchPlan(plan, "digest", co, &L));
    std::vector<std::pair<std::string, std::string>> files;
    std::vector<std::string> notes;
    REQUIRE_OK(GenerateLaunchFiles(plan, model, L, co, &files, &notes));
    const std::string mg = FileOf(files, "megatron.args");
    if (!moe) {
      CHECK(mg.find("--num-experts") == std::string::npos);
      CHECK(mg.find("--expert-model-parallel-size") == std::string::npos);
      CHECK(FileOf(files, "deepspeed/refused.txt").empty());
      continue;
    }
    for (const char* flag : {"--moe-layer-freq 1\n", "--expert-model-parallel-size 2\n", "--moe-router-score-function softmax\n",
                             "--moe-router-load-balancing-type aux_loss\n", "--moe-aux-loss-coeff 0.01\n", "--moe-expert-capacity-factor 1.25\n",
                             "--moe-pad-expert-input-to-capacity\n"}) {
      CHECK_MESSAGE(mg.find(flag) != std::string::npos, flag);
    }
    CHECK(mg.find("--moe-router-enable-expert-bias") == std::string::npos);
    CHECK(mg.find("--overlap-moe-expert-parallel-comm") == std::string::npos);  // costed without overlap
  }
}

}  // namespace
}  // namespace planner
