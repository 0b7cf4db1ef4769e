// megatron.args of an MoE plan (codegen/codegen.cc; docs/formats.md, "The engine files of a launch
// directory"): the MoE, MLA and MTP flags read from the model's layers and the plan's ep / etp,
// DeepSpeed's refusal of an MoE plan, and the pipeline split as Megatron-LM's flags (its even split,
// or the plan's --pipeline-model-parallel-layout).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

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
    if (l.kind != LayerKind::kTransformerBlock && l.kind != LayerKind::kMoeBlock) continue;
    for (auto [key, v] : {std::pair{"q_lora_rank", 0},
                          {"kv_lora_rank", 256},
                          {"qk_rope_head_dim", 32},
                          {"qk_nope_head_dim", 64},
                          {"v_head_dim", 64}}) {
      l.attrs.ints[key] = v;
    }
    if (l.kind != LayerKind::kMoeBlock) continue;
    l.attrs.ints["shared_ffn"] = 1408;
    l.attrs.ints["route_groups"] = 4;
    l.attrs.ints["route_group_limit"] = 2;
    l.attrs.strings["router"] = "sigmoid";
    l.attrs.reals["aux_loss"] = 0.0001;
  }
  Layer mtp;
  mtp.name = "mtp0";
  mtp.kind = LayerKind::kMtp;
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
  // With the all-to-all overlapped, pp 2 under 1F1B is left out (Megatron-Core overlaps only at pp 1 or
  // interleaved), the reason named.
  o.cost.moe_overlap = true;
  Plan plan;
  const Status overlap_refused = SolveAuto(src, o, &plan);
  CHECK(overlap_refused.code() == StatusCode::kInfeasible);
  CHECK(
      std::string(overlap_refused.message()).find("overlaps the expert all-to-all only with pp 1 or the interleaved") !=
      std::string::npos);
  o.cost.moe_overlap = false;
  REQUIRE_OK(SolveAuto(src, o, &plan));
  // A plan that says it was costed overlapped only in its note (an older planner's, read back as a file: ParsePlan
  // takes the note as inputs.moe_overlap) is exported without the flag on this layout, with a note.
  plan.notes.push_back("all-to-all overlapped with the layer's compute (Megatron --overlap-moe-expert-parallel-comm)");
  REQUIRE_FALSE(plan.moe_overlap);
  {
    Plan read;
    REQUIRE_OK(ParsePlan("old.plan.yaml", PlanToYaml(plan), &read));
    CHECK(read.moe_overlap);
    plan = read;
  }
  REQUIRE(plan.ep == 4);
  LaunchPlan L;
  CodegenOptions co;
  REQUIRE_OK(BuildLaunchPlan(plan, "digest", co, &L));
  std::vector<std::pair<std::string, std::string>> files;
  std::vector<std::string> notes;
  REQUIRE_OK(GenerateLaunchFiles(plan, m, L, co, &files, &notes));
  const std::string mg = FileOf(files, "megatron.args");
  REQUIRE(!mg.empty());
  for (const char* flag : {"--num-experts 8\n",
                           "--moe-router-topk 2\n",
                           "--moe-ffn-hidden-size 1408\n",
                           "--moe-shared-expert-intermediate-size 1408\n",
                           "--moe-layer-freq ([0]*1+[1]*3)\n",
                           "--expert-model-parallel-size 4\n",
                           "--expert-tensor-parallel-size 1\n",
                           "--moe-token-dispatcher-type alltoall\n",
                           "--moe-grouped-gemm\n",
                           "--moe-router-score-function sigmoid\n",
                           "--moe-router-load-balancing-type seq_aux_loss\n",
                           "--moe-aux-loss-coeff 0.0001\n",
                           "--moe-router-enable-expert-bias\n",
                           "--moe-router-num-groups 4\n",
                           "--moe-router-group-topk 2\n",
                           "--multi-latent-attention\n",
                           "--kv-lora-rank 256\n",
                           "--qk-head-dim 64\n",
                           "--qk-pos-emb-head-dim 32\n",
                           "--v-head-dim 64\n",
                           "--mtp-num-layers 1\n",
                           "--sequence-parallel\n",
                           "--tensor-model-parallel-size 2\n"}) {
    CHECK_MESSAGE(mg.find(flag) != std::string::npos, flag);
  }
  CHECK(mg.find("--q-lora-rank") == std::string::npos);                 // q_lora_rank 0: no query compression
  CHECK(mg.find("--group-query-attention") == std::string::npos);       // MLA has no query groups
  CHECK(mg.find("--moe-expert-capacity-factor") == std::string::npos);  // dropless
  // Said to be costed overlapped, but pp 2 under 1F1B: the flag is left out, a note says the run is slower.
  CHECK(mg.find("--overlap-moe-expert-parallel-comm") == std::string::npos);
  CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("written without --overlap-moe-expert-parallel-comm") != std::string::npos;
  }));
  // The flex dispatcher (DeepEP) the plan was costed with: Megatron-Core 0.15+'s flags.
  Plan flex = plan;
  flex.moe_dispatcher = MoeDispatcher::kFlex;
  files.clear();
  REQUIRE_OK(GenerateLaunchFiles(flex, m, L, co, &files, &notes));
  const std::string fx = FileOf(files, "megatron.args");
  CHECK(fx.find("--moe-token-dispatcher-type flex\n--moe-flex-dispatcher-backend deepep\n") != std::string::npos);
  CHECK(fx.find("--moe-token-dispatcher-type alltoall") == std::string::npos);
  // At pp 1 the overlap is written.
  o.cost.moe_overlap = true;
  o.pp = {1};
  o.gpus = 8;
  Plan flat;
  REQUIRE_OK(SolveAuto(src, o, &flat));
  LaunchPlan L1;
  REQUIRE_OK(BuildLaunchPlan(flat, "digest", co, &L1));
  files.clear();
  REQUIRE_OK(GenerateLaunchFiles(flat, m, L1, co, &files, &notes));
  const std::string one = FileOf(files, "megatron.args");
  CHECK(one.find("--overlap-moe-expert-parallel-comm\n--delay-wgrad-compute\n") != std::string::npos);
  const std::string refused = FileOf(files, "deepspeed/refused.txt");
  CHECK(refused.find("mixture of experts (8 experts, top 2, ep 4)") != std::string::npos);
  CHECK(FileOf(files, "deepspeed/ds_config.json").empty());
}

TEST_CASE(
    "megatron.args of an all-MoE softmax model: --moe-layer-freq 1, aux_loss, capacity; no MoE flags for a dense "
    "model") {
  ModelSpec m = testing::MoeModel(2, 4, 1, 1024, 0, 16);
  for (Layer& l : m.layers) {
    if (l.kind != LayerKind::kMoeBlock) continue;
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
    for (const char* flag :
         {"--moe-layer-freq 1\n", "--expert-model-parallel-size 2\n", "--moe-router-score-function softmax\n",
          "--moe-router-load-balancing-type aux_loss\n", "--moe-aux-loss-coeff 0.01\n",
          "--moe-expert-capacity-factor 1.25\n", "--moe-pad-expert-input-to-capacity\n"}) {
      CHECK_MESSAGE(mg.find(flag) != std::string::npos, flag);
    }
    CHECK(mg.find("--moe-router-enable-expert-bias") == std::string::npos);
    CHECK(mg.find("--overlap-moe-expert-parallel-comm") == std::string::npos);  // costed without overlap
  }
}

// A Llama-like bf16 gpt of `blocks` blocks and `mtp` MTP modules: layers embedding, block0..,
// mtp0.., final_rmsnorm, lm_head, loss.
ModelSpec SmallGpt(int64_t blocks, int64_t mtp) {
  GptConfig g;
  g.layers = blocks;
  g.hidden = 1024;
  g.heads = 16;
  g.kv_heads = 8;
  g.seq = 2048;
  g.vocab = 32000;
  g.ffn = 2816;
  g.ffn_act = "swiglu";
  g.norm = "rmsnorm";
  g.position = "rope";
  g.bias = false;
  g.tie_embeddings = false;
  g.dropout = 0;
  g.mtp = mtp;
  ModelSpec m;
  REQUIRE_OK(BuildGptModel(g, DType::kBf16, &m));
  m.name = "small";
  m.global_batch = 64;
  return m;
}

// megatron.args (or megatron.args.refused, prefixed "refused: ") of a hand-made plan whose stages
// (model order) end at the given last layers.
std::string ExportSplit(const ModelSpec& m, Schedule schedule, int64_t pp, bool account,
                        const std::vector<int64_t>& last_layers) {
  Plan plan;
  plan.schedule = schedule;
  plan.pp = pp;
  plan.tp = plan.dp = plan.cp = 1;
  plan.interleave = static_cast<int64_t>(last_layers.size()) / pp;
  plan.account_embedding_loss = account;
  plan.microbatch_size = 1;
  plan.global_batch = 64;
  LaunchPlan L;
  L.schedule = schedule;
  L.pp = pp;
  L.tp = L.dp = L.cp = 1;
  L.interleave = plan.interleave;
  L.microbatch_size = 1;
  L.global_batch = 64;
  for (int64_t r = 0; r < pp; ++r) {
    LaunchRank x;
    x.rank = r;
    L.ranks.push_back(x);
  }  // the world Megatron-LM's rules are checked at
  int64_t first = 0;
  for (size_t q = 0; q < last_layers.size(); ++q) {
    LaunchStage s;
    s.first_layer = first;
    s.last_layer = last_layers[q];
    s.chunk = static_cast<int64_t>(q) / pp;
    L.stages.push_back(s);
    first = last_layers[q] + 1;
  }
  REQUIRE(first == static_cast<int64_t>(m.layers.size()));
  std::vector<std::pair<std::string, std::string>> files;
  std::vector<std::string> notes;
  REQUIRE_OK(GenerateLaunchFiles(plan, m, L, CodegenOptions{}, &files, &notes));
  const std::string refused = FileOf(files, "megatron.args.refused");
  return refused.empty() ? FileOf(files, "megatron.args") : "refused: " + refused;
}

bool Has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST_CASE(
    "the pipeline split as Megatron-LM flags: its even split as such, any other split as the plan's layout in model "
    "order") {
  // 8 blocks: layers 0 embedding, 1..8 block0..7, 9 final norm, 10 lm_head, 11 loss.
  const ModelSpec m = SmallGpt(8, 0);
  REQUIRE(m.layers.size() == 12);
  SUBCASE("1F1B, 4 + 4 blocks: Megatron's own split, no flag") {
    const std::string mg = ExportSplit(m, Schedule::k1F1B, 2, false, {4, 11});
    CHECK(!Has(mg, "--pipeline-model-parallel-layout"));
    CHECK(!Has(mg, "--num-layers-per-virtual-pipeline-stage"));
    CHECK(!Has(mg, "--decoder-first-pipeline-num-layers"));
  }
  SUBCASE("interleaved pp 2 x v 2, 2 blocks a chunk: --num-layers-per-virtual-pipeline-stage 2") {
    const std::string mg = ExportSplit(m, Schedule::kInterleaved, 2, false, {2, 4, 6, 11});
    CHECK(Has(mg, "--num-layers-per-virtual-pipeline-stage 2\n"));
    CHECK(!Has(mg, "--pipeline-model-parallel-layout"));
  }
  SUBCASE("uneven 1F1B, 3 + 5 blocks: the layout") {
    const std::string mg = ExportSplit(m, Schedule::k1F1B, 2, false, {3, 11});
    CHECK(Has(mg, "--pipeline-model-parallel-layout Ettt|tttttL\n"));
    CHECK(!Has(mg, "--decoder-first-pipeline-num-layers"));
  }
  SUBCASE("uneven interleaved pp 2 x v 2, middle chunks uneven: the layout lists the 4 chunks in model order") {
    const std::string mg = ExportSplit(m, Schedule::kInterleaved, 2, false, {2, 3, 6, 11});
    CHECK(Has(mg, "--pipeline-model-parallel-layout Ett|t|ttt|ttL\n"));
    CHECK(!Has(mg, "--num-layers-per-virtual-pipeline-stage"));
  }
  SUBCASE(
      "embedding and loss counted as a unit each (6 blocks + 2 = 4 chunks of 2): the layout, not Megatron's account "
      "flags") {
    const ModelSpec six = SmallGpt(6, 0);  // 0 embedding, 1..6 blocks, 7 norm, 8 head, 9 loss
    const std::string mg = ExportSplit(six, Schedule::kInterleaved, 2, true, {1, 3, 5, 9});
    CHECK(Has(mg, "--pipeline-model-parallel-layout Et|tt|tt|tL\n"));
    CHECK(!Has(mg, "--account-for-embedding-in-pipeline-split"));
    CHECK(!Has(mg, "--account-for-loss-in-pipeline-split"));
    CHECK(!Has(mg, "--num-layers-per-virtual-pipeline-stage"));
  }
}

TEST_CASE("an MTP module in the split: the layout places it (m), in the last virtual stage of its rank or refused") {
  // 6 blocks + 1 MTP: 0 embedding, 1..6 blocks, 7 mtp0, 8 final norm, 9 lm_head, 10 loss.
  const ModelSpec m = SmallGpt(6, 1);
  REQUIRE(m.layers[7].kind == LayerKind::kMtp);
  std::vector<LaunchStage> stages(2);
  stages[0].first_layer = 0;
  stages[0].last_layer = 4;
  stages[1].first_layer = 5;
  stages[1].last_layer = 10;
  CHECK(MegatronPipelineLayout(m, stages) == "Etttt|ttmL");
  SUBCASE("1F1B even blocks (3 + 3) but an MTP module: the layout, --mtp-num-layers 1") {
    const std::string mg = ExportSplit(m, Schedule::k1F1B, 2, false, {3, 10});
    CHECK(Has(mg, "--pipeline-model-parallel-layout Ettt|tttmL\n"));
    CHECK(Has(mg, "--mtp-num-layers 1\n"));
  }
  SUBCASE(
      "dualpipev, 2 x 2 chunks with the MTP module beside the loss: the chunks in model order (Megatron's looped "
      "placement)") {
    const std::string mg = ExportSplit(m, Schedule::kDualPipeV, 2, true, {2, 4, 6, 10});
    CHECK(Has(mg, "--pipeline-model-parallel-layout Ett|tt|tt|mL\n"));
    CHECK(!Has(mg, "--account-for"));
  }
  SUBCASE(
      "interleaved with the MTP module in rank 1's first virtual stage: Megatron-LM refuses, so "
      "megatron.args.refused") {
    const std::string mg = ExportSplit(m, Schedule::kInterleaved, 2, false, {3, 7, 8, 10});
    CHECK(Has(mg, "refused: the plan puts its MTP module in chunk 1 (virtual stage 0 of pipeline rank 1)"));
  }
}

TEST_CASE(
    "DeepSeek-V3 at pp 16, dualpipev: the layout holds the plan's 32 chunks (embedding + 1 block, 30 x 2 blocks, MTP + "
    "loss) in model order") {
  ModelSpec m;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/deepseek-v3.yaml"), &m));
  ClusterSpec c;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/h800.yaml"), &c));
  CostSource src;
  src.model = &m;
  src.cluster = &c;
  SearchOptions o = testing::DeepSeekV3PublishedLayout();
  Plan plan;
  REQUIRE_OK(SolveAuto(src, o, &plan));
  LaunchPlan L;
  CodegenOptions co;
  REQUIRE_OK(BuildLaunchPlan(plan, "digest", co, &L));
  std::vector<std::pair<std::string, std::string>> files;
  std::vector<std::string> notes;
  REQUIRE_OK(GenerateLaunchFiles(plan, m, L, co, &files, &notes));
  const std::string mg = FileOf(files, "megatron.args");
  std::string layout = "Et";
  for (int i = 0; i < 30; ++i) layout += "|tt";
  layout += "|mL";
  CHECK(Has(mg, "--pipeline-model-parallel-layout " + layout + "\n"));
  for (const char* flag :
       {"--num-layers 61\n", "--mtp-num-layers 1\n", "--moe-layer-freq ([0]*3+[1]*58)\n", "--qk-layernorm\n",
        "--qk-head-dim 128\n", "--qk-pos-emb-head-dim 64\n", "--pipeline-model-parallel-size 16\n"}) {
    CHECK_MESSAGE(Has(mg, flag), flag);
  }
  for (const char* flag :
       {"--account-for", "--num-layers-per-virtual-pipeline-stage", "--kv-channels", "--group-query-attention"})
    CHECK_MESSAGE(!Has(mg, flag), flag);
  bool looped_note = false;
  for (const auto& n : notes) looped_note = looped_note || Has(n, "chunk q on pipeline rank q mod pp, not the V");
  CHECK(looped_note);
  bool scaling_note = false;
  for (const auto& n : notes) scaling_note = scaling_note || Has(n, "add --moe-router-topk-scaling-factor 2.5");
  CHECK(scaling_note);
  CHECK(!Has(mg, "--moe-router-topk-scaling-factor"));  // the model file does not carry it
}

TEST_CASE(
    "a head width other than hidden / heads is --kv-channels (Qwen3-30B-A3B: 128 at h 2048 and 32 heads); none when it "
    "is hidden / heads") {
  ModelSpec qwen;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/qwen3-30b-a3b.yaml"), &qwen));
  CHECK(Has(ExportSplit(qwen, Schedule::k1F1B, 1, false, {static_cast<int64_t>(qwen.layers.size()) - 1}),
            "--kv-channels 128\n"));
  CHECK(!Has(ExportSplit(SmallGpt(8, 0), Schedule::k1F1B, 1, false, {11}), "--kv-channels"));
}

}  // namespace
}  // namespace planner
