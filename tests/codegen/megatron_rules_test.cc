// codegen's self-check of megatron.args (codegen/megatron.cc, docs/exports.md "Megatron-LM"): a plan
// Megatron-LM cannot express (not a GPT, PipeDream's asynchronous schedule, per-stage replication)
// and a plan whose flags break one of Megatron-LM's rules (validate_args, TransformerConfig, the
// pipeline layout's validate_layer_layout, the microbatch calculator) get megatron.args.refused with
// the reason and one note, no megatron.args and no megatron.sh. One TEST_CASE per rule; each plan
// breaks exactly that rule (the rules a plan cannot break through codegen are checked on the text).
#include <string>
#include <utility>
#include <vector>

#include "codegen/codegen.h"
#include "codegen/exports.h"
#include "tests/dp_solver/moe_model.h"
#include "tests/test_util.h"

namespace planner {
namespace {

using codegen_internal::MegatronCheck;
using codegen_internal::MegatronRuleViolation;

std::string FileOf(const std::vector<std::pair<std::string, std::string>>& files, const std::string& name) {
  for (const auto& [path, text] : files) {
    if (path == name) return text;
  }
  return "";
}

bool Has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// A Llama-like bf16 gpt: layers 0 embedding, 1..blocks, then final norm, lm_head, loss.
ModelSpec Gpt(int64_t blocks, int64_t heads = 16, int64_t kv_heads = 8, int64_t hidden = 1024) {
  GptConfig g;
  g.layers = blocks;
  g.hidden = hidden;
  g.heads = heads;
  g.kv_heads = kv_heads;
  g.seq = 2048;
  g.vocab = 32000;
  g.ffn = 2816;
  g.ffn_act = "swiglu";
  g.norm = "rmsnorm";
  g.position = "rope";
  g.bias = false;
  g.tie_embeddings = false;
  g.dropout = 0;
  ModelSpec m;
  REQUIRE_OK(BuildGptModel(g, DType::kBf16, &m));
  m.name = "small";
  m.global_batch = 64;
  return m;
}

// The settings of a hand-made plan: dims, schedule, the stages' last layers (model order).
struct Shape {
  int64_t tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, interleave = 1, world = 0;  // world 0: tp pp dp cp
  int64_t global_batch = 64, microbatch = 1;
  Schedule schedule = Schedule::k1F1B;
  ZeroStage zero = ZeroStage::kNone;
  bool sequence_parallel = false;
  std::vector<int64_t> last_layers = {};
  std::vector<int64_t> replicas = {};  // per stage; empty: dp each
  int64_t first_layer = 0;
  DpComm dp_comm = DpComm::kRingAllReduce;
  CpCommType cp_comm = CpCommType::kP2P;
};

struct Export {
  std::string args, refused, script;
  std::vector<std::string> notes;
};

Export Run(const ModelSpec& m, const Shape& s) {
  Plan plan;
  plan.schedule = s.schedule;
  plan.tp = s.tp;
  plan.pp = s.pp;
  plan.dp = s.dp;
  plan.cp = s.cp;
  plan.ep = s.ep;
  plan.interleave = s.interleave;
  plan.sequence_parallel = s.sequence_parallel;
  plan.microbatch_size = s.microbatch;
  plan.global_batch = s.global_batch;
  plan.config = "test";
  plan.zero_stage = s.zero;
  plan.cp_comm_type = s.cp_comm;
  LaunchPlan L;
  L.schedule = s.schedule;
  L.tp = s.tp;
  L.pp = s.pp;
  L.dp = s.dp;
  L.cp = s.cp;
  L.ep = s.ep;
  L.interleave = s.interleave;
  L.sequence_parallel = s.sequence_parallel;
  L.microbatch_size = s.microbatch;
  L.global_batch = s.global_batch;
  L.gpus_per_node = 8;
  L.dp_comm = plan.dp_comm = s.dp_comm;
  if (DpCommUsesServers(s.dp_comm)) L.servers = {s.tp * s.pp * s.dp * s.cp};
  const int64_t world = s.world > 0 ? s.world : s.tp * s.pp * s.dp * s.cp;
  for (int64_t r = 0; r < world; ++r) {
    LaunchRank x;
    x.rank = r;
    L.ranks.push_back(x);
  }
  int64_t first = s.first_layer;
  for (size_t q = 0; q < s.last_layers.size(); ++q) {
    LaunchStage st;
    st.first_layer = first;
    st.last_layer = s.last_layers[q];
    st.chunk = static_cast<int64_t>(q) / s.pp;
    st.replicas = s.replicas.empty() ? s.dp : s.replicas[q];
    L.stages.push_back(st);
    PlanStage ps;
    ps.first_layer = st.first_layer;
    ps.last_layer = st.last_layer;
    ps.replicas = st.replicas;
    plan.stages.push_back(ps);
    first = s.last_layers[q] + 1;
  }
  std::vector<std::pair<std::string, std::string>> files;
  Export e;
  REQUIRE_OK(GenerateLaunchFiles(plan, m, L, CodegenOptions{}, &files, &e.notes));
  e.args = FileOf(files, "megatron.args");
  e.refused = FileOf(files, "megatron.args.refused");
  e.script = FileOf(files, "megatron.sh");
  return e;
}

// Refused with `reason`: the reason in megatron.args.refused and in exactly one megatron note; no
// megatron.args, no megatron.sh.
void CheckRefused(const Export& e, const std::string& reason) {
  CHECK_MESSAGE(Has(e.refused, reason), e.refused);
  CHECK(e.args.empty());
  CHECK(e.script.empty());
  int megatron_notes = 0, with_reason = 0;
  for (const auto& n : e.notes) {
    if (n.rfind("megatron.args", 0) != 0) continue;
    ++megatron_notes;
    with_reason += Has(n, "megatron.args: not written: ") && Has(n, reason) ? 1 : 0;
  }
  CHECK(megatron_notes == 1);
  CHECK(with_reason == 1);
}

// A valid 8-block pp 2 plan's flags, and its check (world 2, dp 1, 1 chunk per rank, 4 + 4 blocks).
std::string ValidArgs() { return Run(Gpt(8), Shape{.pp = 2, .last_layers = {4, 11}}).args; }
MegatronCheck ValidCheck() { return MegatronCheck{.world = 2, .dp = 1, .interleave = 1, .blocks = {4, 4}}; }
std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

TEST_CASE("a valid plan passes every rule: megatron.args and megatron.sh written, no refusal") {
  const Export e = Run(Gpt(8), Shape{.pp = 2, .last_layers = {4, 11}});
  CHECK(e.refused.empty());
  CHECK(Has(e.args, "--pipeline-model-parallel-size 2\n"));
  CHECK(Has(e.script, "pretrain_gpt.py"));
  CHECK(MegatronRuleViolation(ValidArgs(), ValidCheck()).empty());
}

TEST_CASE(
    "approximations are written with exactly one note each: GPipe and ZB-H1 run 1F1B, ps runs Megatron's all-reduce; "
    "none with one stage") {
  auto megatron_notes = [](const Export& e) {
    std::vector<std::string> out;
    for (const auto& n : e.notes) {
      if (n.rfind("megatron.args", 0) == 0) out.push_back(n);
    }
    return out;
  };
  const Export gpipe = Run(Gpt(8), Shape{.pp = 2, .schedule = Schedule::kGpipe, .last_layers = {4, 11}});
  REQUIRE(megatron_notes(gpipe).size() == 1);
  CHECK(Has(megatron_notes(gpipe)[0], "Megatron-LM has no GPipe schedule; the exported settings run 1F1B"));
  const Export zb = Run(Gpt(8), Shape{.pp = 2, .schedule = Schedule::kZbH1, .last_layers = {4, 11}});
  REQUIRE(megatron_notes(zb).size() == 1);
  CHECK(Has(megatron_notes(zb)[0], "ZB-H1 has no Megatron-LM flag; the exported settings run 1F1B"));
  CHECK(megatron_notes(Run(Gpt(8), Shape{.schedule = Schedule::kGpipe, .last_layers = {11}})).empty());
  const Export ps = Run(Gpt(8), Shape{.dp = 2, .last_layers = {11}, .dp_comm = DpComm::kParameterServer});
  REQUIRE(megatron_notes(ps).size() == 1);
  CHECK(Has(megatron_notes(ps)[0],
            "dp_comm ps has no Megatron-LM equivalent: Megatron-LM all-reduces the gradients over NCCL in its "
            "data-parallel groups, "
            "without the plan's 1 summation server(s)"));
  CHECK(!ps.args.empty());
}

TEST_CASE("rule: --cp-comm-type is one Transformer Engine dispatches on (allgather is not: TE raises)") {
  for (const char* t : {"p2p", "all_gather", "a2a", "a2a+p2p"})
    CHECK(MegatronRuleViolation(ValidArgs() + "--cp-comm-type " + t + "\n", ValidCheck()).empty());
  CHECK(MegatronRuleViolation(ValidArgs() + "--cp-comm-type allgather\n", ValidCheck()) ==
        "--cp-comm-type allgather: Transformer Engine runs p2p, all_gather, a2a or a2a+p2p and raises \"Unsupported "
        "communication type\" on anything else at the first attention forward (context_parallel.py)");
}

TEST_CASE(
    "rule: FP8 parameters with the precision-aware optimizer only under a recipe other than delayed (TE FusedAdam "
    "would store remainders for them)") {
  const std::string pa = "--use-distributed-optimizer\n--fp8-param-gather\n--use-precision-aware-optimizer\n";
  const std::string refusal =
      "--fp8-param-gather with --use-precision-aware-optimizer under delayed scaling: Transformer Engine's FusedAdam "
      "stores int16 remainders for the FP8 parameters (nominally bf16) and its FP8 Adam kernel needs an fp32 master; "
      "solve with --optimizer-state fp32, or another --fp8-recipe";
  CHECK(MegatronRuleViolation(ValidArgs() + pa, ValidCheck()) == refusal);
  CHECK(MegatronRuleViolation(ValidArgs() + pa + "--fp8-recipe delayed\n", ValidCheck()) == refusal);
  CHECK(MegatronRuleViolation(ValidArgs() + pa + "--fp8-recipe tensorwise\n", ValidCheck()).empty());
  CHECK(MegatronRuleViolation(ValidArgs() + "--use-distributed-optimizer\n--fp8-param-gather\n", ValidCheck()).empty());
}

TEST_CASE("rule: a model other than a GPT (VGG-16's layer list) is refused") {
  ModelSpec vgg;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/vgg16.yaml"), &vgg));
  const Export e = Run(vgg, Shape{.last_layers = {static_cast<int64_t>(vgg.layers.size()) - 1}});
  CheckRefused(e, "model vgg16 is not a GPT (gpt: template) model");
}

TEST_CASE("rule: PipeDream's asynchronous schedule is refused, not exported as uniform settings") {
  const Export e = Run(Gpt(8), Shape{.pp = 2, .schedule = Schedule::kPipeDream, .last_layers = {4, 11}});
  CheckRefused(e, "PipeDream's asynchronous schedule (weight stashing, no flush) has no Megatron-LM equivalent");
}

TEST_CASE("rule: per-stage replication (2-1, one schedule for all) is refused") {
  const Export e = Run(Gpt(8), Shape{.pp = 2, .world = 3, .last_layers = {4, 11}, .replicas = {2, 1}});
  CheckRefused(e, "per-stage replication (2-1 replicas per stage");
}

TEST_CASE("rule: ZeRO-2/3 with pipelining is refused (Megatron-FSDP has no pipeline)") {
  CheckRefused(Run(Gpt(8), Shape{.pp = 2, .zero = ZeroStage::kParameters, .last_layers = {4, 11}}),
               "ZeRO-3 with pipelining (pp 2)");
  const Export fsdp = Run(Gpt(8), Shape{.dp = 2, .zero = ZeroStage::kParameters, .last_layers = {11}});
  CHECK(Has(fsdp.args, "--use-megatron-fsdp\n--data-parallel-sharding-strategy optim_grads_params\n"));
  CHECK(!Has(fsdp.args, "--use-distributed-optimizer"));
}

TEST_CASE("rule: world size divisible by tp x pp x cp (validate_args)") {
  const Export e = Run(Gpt(8), Shape{.tp = 4, .world = 6, .last_layers = {11}});
  CheckRefused(e, "world size 6 is not divisible by tp x pp x cp = 4 (validate_args)");
}

TEST_CASE("rule: Megatron-LM's dp = world / (tp x pp x cp) equals the plan's dp") {
  const Export e = Run(Gpt(8), Shape{.pp = 2, .world = 4, .last_layers = {4, 11}});
  CheckRefused(e, "Megatron-LM derives dp = world / (tp x pp x cp) = 2, the plan has dp 1");
}

TEST_CASE("rule: attention heads divisible by tp (TransformerConfig)") {
  const Export e = Run(Gpt(8, 16, 16), Shape{.tp = 3, .last_layers = {11}});
  CheckRefused(e, "16 attention heads are not divisible by tp 3 (TransformerConfig)");
}

TEST_CASE("rule: query groups a multiple or a divisor of tp (TransformerConfig)") {
  const Export e = Run(Gpt(8, 24, 12, 1536), Shape{.tp = 8, .last_layers = {11}});
  CheckRefused(e, "12 query groups with tp 8: Megatron-LM needs the query groups to be a multiple or a divisor of tp");
}

TEST_CASE("rule: hidden size divisible by the heads without --kv-channels (validate_args)") {
  const std::string args = Replace(ValidArgs(), "--hidden-size 1024\n", "--hidden-size 1000\n");
  CHECK(MegatronRuleViolation(args, ValidCheck()) ==
        "hidden size 1000 is not divisible by 16 heads and no --kv-channels (validate_args)");
  CHECK(MegatronRuleViolation(args + "--kv-channels 64\n", ValidCheck()).empty());
}

TEST_CASE("rule: sequence length a multiple of 2 x cp with cp > 1 (validate_args)") {
  const Export e = Run(Gpt(8), Shape{.cp = 3, .last_layers = {11}});
  CheckRefused(e, "sequence length 2048 is not a multiple of 2 x cp = 6 (validate_args)");
  CHECK(Run(Gpt(8), Shape{.cp = 2, .last_layers = {11}}).refused.empty());
}

TEST_CASE("sliding-window attention: --window-size W,0 and the full-layer period; p2p context parallelism refused") {
  ModelSpec m = Gpt(8);
  m.gpt.sliding_window = 511;
  m.gpt.full_attention_every = 4;
  REQUIRE_OK(BuildGptModel(m.gpt, DType::kBf16, &m));
  const Export e = Run(m, Shape{.last_layers = {11}});
  CHECK(e.refused.empty());
  CHECK(Has(e.args, "--window-size 511,0\n"));
  CHECK(Has(e.args, "--window-attn-skip-freq 4\n"));
  // Every layer windowed: no period written.
  m.gpt.full_attention_every = 0;
  REQUIRE_OK(BuildGptModel(m.gpt, DType::kBf16, &m));
  const Export all = Run(m, Shape{.last_layers = {11}});
  CHECK(Has(all.args, "--window-size 511,0\n"));
  CHECK_FALSE(Has(all.args, "--window-attn-skip-freq"));
  CHECK_FALSE(Has(Run(Gpt(8), Shape{.last_layers = {11}}).args, "--window-size"));
  // A window covering the sequence (2047 keys before each of 2048 queries) is causal attention: no window flag, so
  // Transformer Engine runs p2p context parallelism with it.
  ModelSpec covering = Gpt(8);
  covering.gpt.sliding_window = 2047;
  REQUIRE_OK(BuildGptModel(covering.gpt, DType::kBf16, &covering));
  const Export cov = Run(covering, Shape{.cp = 2, .last_layers = {11}});
  CHECK(cov.refused.empty());
  CHECK_FALSE(Has(cov.args, "--window-size"));
  // Transformer Engine runs windows under context parallelism with the all-gather exchange only.
  CheckRefused(Run(m, Shape{.cp = 2, .last_layers = {11}}),
               "sliding-window attention with context parallelism over p2p (cp 2): Transformer Engine asserts");
  const Export ag = Run(m, Shape{.cp = 2, .last_layers = {11}, .cp_comm = CpCommType::kAllGather});
  CHECK(ag.refused.empty());
  CHECK(Has(ag.args, "--cp-comm-type all_gather\n"));  // Transformer Engine's spelling
  // The other exports: torchtitan's llama3 and the torch pipelining reference model attend over the whole sequence.
  bool titan = false, pipelining = false;
  for (const auto& n : e.notes) {
    titan = titan || Has(n, "torchtitan.toml: not written: model small attends through a sliding window of 511 keys");
    pipelining = pipelining || Has(n, "torch_pipelining.py: not written: sliding-window attention (511 keys");
  }
  CHECK(titan);
  CHECK(pipelining);
}

TEST_CASE("rule: sequence parallelism needs tp > 1 (validate_args turns it off)") {
  const Export e = Run(Gpt(8), Shape{.sequence_parallel = true, .last_layers = {11}});
  CheckRefused(e, "sequence parallelism with tp 1: Megatron-LM turns --sequence-parallel off");
  CHECK(Run(Gpt(8), Shape{.tp = 2, .sequence_parallel = true, .last_layers = {11}}).refused.empty());
}

TEST_CASE("rule: experts divisible by ep (validate_args)") {
  const ModelSpec moe = testing::MoeModel(4, 6, 2, 1024, 0);
  const Export e = Run(moe, Shape{.dp = 4, .ep = 4, .last_layers = {static_cast<int64_t>(moe.layers.size()) - 1}});
  CheckRefused(e, "6 experts are not divisible by ep 4 (validate_args)");
}

TEST_CASE("rule: global batch divisible by micro batch x dp (num_microbatches_calculator)") {
  const Export e = Run(Gpt(8), Shape{.dp = 2, .global_batch = 63, .last_layers = {11}});
  CheckRefused(e, "global batch 63 is not divisible by micro batch 1 x dp 2 (num_microbatches_calculator)");
}

TEST_CASE("rule: the pipeline layout's chunk count a multiple of pp (validate_args)") {
  const Export e = Run(Gpt(8), Shape{.pp = 2, .last_layers = {2, 5, 11}});
  CheckRefused(e, "the pipeline layout has 3 chunks, not a multiple of pp 2 (validate_args)");
}

TEST_CASE("rule: the pipeline layout starts with E and ends with L, each once (validate_layer_layout)") {
  const Export e = Run(Gpt(8), Shape{.pp = 2, .last_layers = {3, 11}, .first_layer = 1});  // stages miss the embedding
  CheckRefused(e, "the pipeline layout must start with the embedding (E) and end with the loss (L), each once");
}

TEST_CASE("rule: the pipeline layout places every decoder block once (validate_layer_layout)") {
  const std::string args =
      Replace(ValidArgs(), "--micro-batch-size", "--pipeline-model-parallel-layout Ett|ttttL\n--micro-batch-size");
  CHECK(MegatronRuleViolation(args, ValidCheck()) ==
        "the pipeline layout places 6 decoder blocks, the model has 8 (validate_layer_layout)");
}

TEST_CASE("rule: the pipeline layout's MTP modules equal --mtp-num-layers (validate_layer_layout)") {
  const std::string args =
      Replace(ValidArgs(), "--micro-batch-size", "--pipeline-model-parallel-layout Etttt|ttttmL\n--micro-batch-size");
  CHECK(MegatronRuleViolation(args, ValidCheck()) == "the pipeline layout places 1 MTP modules, --mtp-num-layers is 0");
  CHECK(MegatronRuleViolation(args + "--mtp-num-layers 1\n", ValidCheck()).empty());
}

TEST_CASE("rule: without a layout the layers divisible by pp (validate_args)") {
  const std::string args = Replace(ValidArgs(), "--num-layers 8\n", "--num-layers 9\n");
  CHECK(MegatronRuleViolation(args, ValidCheck()) ==
        "9 layers are not divisible by pp 2 without a pipeline layout (validate_args)");
}

TEST_CASE("rule: layers per pipeline rank divisible by --num-layers-per-virtual-pipeline-stage (validate_args)") {
  const std::string args = ValidArgs() + "--num-layers-per-virtual-pipeline-stage 3\n";
  CHECK(MegatronRuleViolation(args, ValidCheck()) ==
        "4 layers per pipeline rank are not divisible by --num-layers-per-virtual-pipeline-stage 3 (validate_args)");
}

TEST_CASE("rule: virtual stages need pp > 1 (validate_args)") {
  const std::string args =
      Replace(Replace(ValidArgs(), "--pipeline-model-parallel-size 2\n", "--pipeline-model-parallel-size 1\n"),
              "--micro-batch-size", "--pipeline-model-parallel-layout Etttt|ttttL\n--micro-batch-size");
  const MegatronCheck c{.world = 1, .dp = 1, .interleave = 2, .blocks = {4, 4}};
  CHECK(MegatronRuleViolation(args, c) ==
        "2 virtual stages per rank with pp 1: Megatron-LM's interleaved schedule needs pp > 1 (validate_args)");
}

TEST_CASE(
    "rule: Megatron-LM's virtual pipeline equals the plan's interleave exactly (no rounding: a v=2 plan never runs "
    "v=3)") {
  // 12 blocks, pp 2: --num-layers-per-virtual-pipeline-stage 2 is vp (12 / 2) / 2 = 3, the plan has 2.
  const ModelSpec m = Gpt(12);
  const std::string base = Run(m, Shape{.pp = 2, .last_layers = {6, 15}}).args;
  const MegatronCheck c{.world = 2, .dp = 1, .interleave = 2, .blocks = {3, 3, 3, 3}};
  CHECK(MegatronRuleViolation(base + "--num-layers-per-virtual-pipeline-stage 2\n", c) ==
        "Megatron-LM would run 3 virtual stages per pipeline rank, the plan 2");
  CHECK(MegatronRuleViolation(base + "--num-layers-per-virtual-pipeline-stage 3\n", c).empty());
  // Through codegen: a pp 1 plan with 2 chunks per rank has no Megatron-LM flag for them.
  CheckRefused(Run(Gpt(8), Shape{.interleave = 2, .last_layers = {4, 11}}),
               "Megatron-LM would run 1 virtual stages per pipeline rank, the plan 2");
  // An uneven interleaved plan (3 + 1 + 2 + 2 blocks) is its layout, never the rounded-down flag.
  const Export e =
      Run(Gpt(8), Shape{.pp = 2, .interleave = 2, .schedule = Schedule::kInterleaved, .last_layers = {3, 4, 6, 11}});
  CHECK(Has(e.args, "--pipeline-model-parallel-layout Ettt|t|tt|ttL\n"));
  CHECK(!Has(e.args, "--num-layers-per-virtual-pipeline-stage"));
}

TEST_CASE(
    "rule: interleaved, microbatches in groups Megatron-LM's schedule takes "
    "(forward_backward_pipelining_with_interleaving)") {
  // 8 blocks, pp 2 x v 2 of 2 blocks. One microbatch for pp 2: no group fits, refused.
  const Shape one{
      .pp = 2, .interleave = 2, .global_batch = 1, .schedule = Schedule::kInterleaved, .last_layers = {2, 4, 6, 11}};
  CheckRefused(Run(Gpt(8), one),
               "1 microbatches in groups of 2 with pp 2 and 2 virtual stages: Megatron-LM's interleaved schedule needs "
               "pp <= group");
  // 3 microbatches: Megatron's default groups of pp = 2 leave 1 (< pp): groups of 3, with a note.
  Shape three = one;
  three.global_batch = 3;
  const Export e = Run(Gpt(8), three);
  CHECK(Has(e.args, "--microbatch-group-size-per-virtual-pipeline-stage 3\n"));
  bool noted = false;
  for (const auto& n : e.notes) noted = noted || Has(n, "3 microbatches are not a multiple of pp 2");
  CHECK(noted);
  CHECK(MegatronRuleViolation(Replace(e.args, "--microbatch-group-size-per-virtual-pipeline-stage 3\n", ""),
                              MegatronCheck{.world = 2, .dp = 1, .interleave = 2, .blocks = {2, 2, 2, 2}}) ==
        "3 microbatches in groups of 2 with pp 2 and 2 virtual stages: Megatron-LM's interleaved schedule needs pp <= "
        "group <= microbatches "
        "and the last group empty or at least pp (schedules.py)");
  // 4 microbatches: the default groups, no flag.
  three.global_batch = 4;
  CHECK(!Has(Run(Gpt(8), three).args, "--microbatch-group-size"));
}

TEST_CASE("rule: Megatron-LM's split equals the plan's blocks per stage") {
  const MegatronCheck c{.world = 2, .dp = 1, .interleave = 1, .blocks = {3, 5}};
  CHECK(MegatronRuleViolation(ValidArgs(), c) ==
        "Megatron-LM's split (4 4 blocks per virtual stage) differs from the plan's (3 5)");
}

TEST_CASE("rule: never a 0 in --decoder-first/last-pipeline-num-layers") {
  CHECK(MegatronRuleViolation(ValidArgs() + "--decoder-last-pipeline-num-layers 0\n", ValidCheck()) ==
        "--decoder-last-pipeline-num-layers 0: Megatron-LM needs a positive layer count there");
  CHECK(MegatronRuleViolation(ValidArgs() + "--decoder-first-pipeline-num-layers 0\n", ValidCheck()) ==
        "--decoder-first-pipeline-num-layers 0: Megatron-LM needs a positive layer count there");
  // codegen never writes them: a head-only last stage is the layout.
  const Export e = Run(Gpt(8), Shape{.pp = 2, .last_layers = {8, 11}});
  CHECK(Has(e.args, "--pipeline-model-parallel-layout Etttttttt|L\n"));
  CHECK(!Has(e.args, "--decoder-"));
}

}  // namespace
}  // namespace planner
