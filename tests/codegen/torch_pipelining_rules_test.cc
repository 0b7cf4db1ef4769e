// torch_pipelining.py's self-checks (codegen/torch_pipelining.cc; docs/exports.md): one test per rule of
// torch.distributed.pipelining 2.15 (schedules.py's constructors) and of the export, each with a plan that
// breaks exactly that rule, and the refusals of what the export cannot run.
#include <string>
#include <utility>
#include <vector>

#include "codegen/exports.h"
#include "tests/test_util.h"

namespace planner {
namespace {

using codegen_internal::TorchPipeliningRuleViolation;
using codegen_internal::TorchScheduleClass;

// tiny-gpt's template: embedding, block0..3, final_layernorm, lm_head, loss (8 layers).
ModelSpec Tiny(int64_t heads = 4, int64_t kv_heads = 0, int64_t ffn = 0) {
  GptConfig g;
  g.layers = 4;
  g.hidden = 128;
  g.heads = heads;
  g.kv_heads = kv_heads;
  g.ffn = ffn;
  g.seq = 64;
  g.vocab = 512;
  ModelSpec m;
  REQUIRE_OK(BuildGptModel(g, DType::kFp32, &m));
  return m;
}

// pp x dp x tp ranks, `stages` even contiguous stages of the 8 layers, m microbatches of 2 samples.
LaunchPlan Launch(Schedule s, int64_t pp, int64_t dp, int64_t tp, int64_t stages, int64_t m) {
  LaunchPlan L;
  L.schedule = s;
  L.pp = pp;
  L.dp = dp;
  L.tp = tp;
  L.interleave = stages / pp;
  L.num_microbatches = m;
  L.microbatch_size = 2;
  L.global_batch = 2 * m * dp;
  L.ranks.resize(static_cast<size_t>(pp * dp * tp));
  for (int64_t q = 0; q < stages; ++q) {
    LaunchStage st;
    st.first_layer = q * 8 / stages;
    st.last_layer = (q + 1) * 8 / stages - 1;
    st.replicas = dp;
    st.chunk = q / pp;
    L.stages.push_back(st);
  }
  return L;
}

std::string Violation(const ModelSpec& m, const LaunchPlan& L) {
  return TorchPipeliningRuleViolation(m, L, TorchScheduleClass(L));
}

std::pair<codegen_internal::Files, std::vector<std::string>> Export(const ModelSpec& m, const LaunchPlan& L) {
  codegen_internal::Files files;
  std::vector<std::string> notes;
  codegen_internal::AddTorchPipelining(Plan{}, m, L, &files, &notes);
  return {files, notes};
}

TEST_CASE("torch_pipelining rules: valid plans of every schedule pass") {
  const ModelSpec m = Tiny();
  CHECK(Violation(m, Launch(Schedule::kGpipe, 2, 1, 1, 2, 4)) == "");
  CHECK(Violation(m, Launch(Schedule::k1F1B, 2, 2, 2, 2, 4)) == "");
  CHECK(Violation(m, Launch(Schedule::kInterleaved, 2, 1, 1, 4, 4)) == "");
  CHECK(Violation(m, Launch(Schedule::kZbH1, 2, 1, 1, 2, 4)) == "");
  CHECK(Violation(m, Launch(Schedule::kDualPipeV, 2, 1, 1, 4, 4)) == "");
}

TEST_CASE("torch_pipelining rule: world size = pp x dp x tp") {
  LaunchPlan L = Launch(Schedule::k1F1B, 2, 1, 1, 2, 4);
  L.ranks.resize(3);
  CHECK(Violation(Tiny(), L) == "world size: pp 2 x dp 1 x tp 1 = 2 is not the plan's 3 ranks");
}

TEST_CASE("torch_pipelining rule: stages per rank of the schedule class (DualPipeV takes 2)") {
  const LaunchPlan L = Launch(Schedule::kDualPipeV, 2, 1, 1, 2, 4);
  CHECK(Violation(Tiny(), L) ==
        "stages per rank: ScheduleDualPipeV takes 2 stage(s) per rank, so pp 2 needs 4 stages, not 2");
}

TEST_CASE("torch_pipelining rule: stages cover the layers in order") {
  LaunchPlan L = Launch(Schedule::k1F1B, 2, 1, 1, 2, 4);
  L.stages[1].first_layer = 5;  // layer 4 in no stage
  CHECK(Violation(Tiny(), L) ==
        "stage boundaries: a stage starts at layer 5, not 4 (stages must cover the layers in order)");
}

TEST_CASE(
    "torch_pipelining rule: Schedule1F1B needs n_microbatches >= stages; a 1f1b plan below it is written as "
    "ScheduleGPipe") {
  const LaunchPlan L = Launch(Schedule::k1F1B, 2, 1, 1, 2, 1);
  CHECK(TorchPipeliningRuleViolation(Tiny(), L, "Schedule1F1B") ==
        "microbatches: Schedule1F1B needs n_microbatches >= stages (1 < 2)");
  CHECK(TorchScheduleClass(L) == "ScheduleGPipe");
  CHECK(Violation(Tiny(), L) == "");
  auto [files, notes] = Export(Tiny(), L);
  REQUIRE(files.size() == 1);
  CHECK(files[0].first == "torch_pipelining.py");
  CHECK(files[0].second.find("SCHEDULE = \"ScheduleGPipe\"") != std::string::npos);
  CHECK(notes[0].find("written as ScheduleGPipe") != std::string::npos);
}

TEST_CASE("torch_pipelining rule: ScheduleDualPipeV needs n_microbatches >= stages (2 pp)") {
  const LaunchPlan L = Launch(Schedule::kDualPipeV, 2, 1, 1, 4, 3);
  CHECK(Violation(Tiny(), L) == "microbatches: ScheduleDualPipeV needs n_microbatches >= stages (3 < 4)");
}

TEST_CASE("torch_pipelining rule: interleaved schedules need n_microbatches a multiple of max(1, m / pp)") {
  const LaunchPlan L = Launch(Schedule::kInterleaved, 4, 1, 1, 8, 9);
  CHECK(
      Violation(Tiny(), L) ==
      "microbatches: ScheduleInterleaved1F1B needs n_microbatches a multiple of its rounds max(1, m / pp) = 2 (m = 9)");
  const LaunchPlan Z = Launch(Schedule::kZbH1, 4, 1, 1, 4, 9);
  CHECK(Violation(Tiny(), Z) ==
        "microbatches: ScheduleInterleavedZeroBubble needs n_microbatches a multiple of its rounds max(1, m / pp) = 2 "
        "(m = 9)");
  CHECK(Violation(Tiny(), Launch(Schedule::kZbH1, 4, 1, 1, 4, 3)) ==
        "");  // fewer than pp: one round (torch's docstring example)
}

TEST_CASE("torch_pipelining rule: microbatch x microbatches x dp = global batch") {
  LaunchPlan L = Launch(Schedule::k1F1B, 2, 2, 1, 2, 4);
  L.global_batch = 32;
  CHECK(Violation(Tiny(), L) == "batch identity: microbatch 2 x 4 microbatches x dp 2 = 16 is not the global batch 32");
}

TEST_CASE("torch_pipelining rule: heads divisible by tp") {
  CHECK(Violation(Tiny(), Launch(Schedule::k1F1B, 2, 1, 3, 2, 4)) ==
        "tensor parallelism: 4 heads not divisible by tp 3 (ColwiseParallel splits the heads)");
}

TEST_CASE("torch_pipelining rule: KV heads divisible by tp") {
  CHECK(Violation(Tiny(4, 2), Launch(Schedule::k1F1B, 2, 1, 4, 2, 4)) ==
        "tensor parallelism: 2 KV heads not divisible by tp 4");
}

TEST_CASE("torch_pipelining rule: ffn divisible by tp") {
  CHECK(Violation(Tiny(4, 0, 511), Launch(Schedule::k1F1B, 2, 1, 2, 2, 4)) ==
        "tensor parallelism: ffn 511 not divisible by tp 2");
}

TEST_CASE("torch_pipelining refuses what torch.distributed.pipelining cannot run as planned, in a file and a note") {
  const ModelSpec m = Tiny();
  LaunchPlan pd = Launch(Schedule::kPipeDream, 2, 1, 1, 2, 4);
  LaunchPlan cp = Launch(Schedule::k1F1B, 2, 1, 1, 2, 4);
  cp.cp = 2;
  LaunchPlan rep = Launch(Schedule::k1F1B, 2, 1, 1, 2, 4);
  rep.stages[0].replicas = 2;  // 2-1: per-stage replication
  rep.ranks.resize(3);
  LaunchPlan bad = Launch(Schedule::kDualPipeV, 2, 1, 1, 4, 3);
  for (const auto& [L, why] :
       std::vector<std::pair<LaunchPlan, std::string>>{{pd, "PipeDream's asynchronous schedule"},
                                                       {cp, "context parallelism (cp 2)"},
                                                       {rep, "per-stage replication"},
                                                       {bad, "ScheduleDualPipeV needs n_microbatches >= stages"}}) {
    auto [files, notes] = Export(m, L);
    REQUIRE(files.size() == 1);
    CHECK(files[0].first == "torch_pipelining.py.refused");
    CHECK(files[0].second.find(why) != std::string::npos);
    REQUIRE(notes.size() == 1);
    CHECK(notes[0].rfind("torch_pipelining.py: not written: ", 0) == 0);
    CHECK(notes[0].find(why) != std::string::npos);
  }
  ModelSpec cnn = m;
  cnn.is_gpt = false;
  auto [files, notes] = Export(cnn, Launch(Schedule::k1F1B, 2, 1, 1, 2, 4));
  CHECK(files[0].first == "torch_pipelining.py.refused");
}

TEST_CASE("torch_pipelining.py: the mesh, the stage list and the stages' layer names") {
  auto [files, notes] = Export(Tiny(), Launch(Schedule::kDualPipeV, 2, 2, 2, 4, 4));
  REQUIRE(files.size() == 1);
  const std::string& py = files[0].second;
  for (const char* want :
       {"WORLD, PP, DP, TP = 8, 2, 2, 2\n", "SCHEDULE = \"ScheduleDualPipeV\"\n", "STAGES_PER_RANK = 2\n",
        "STAGE_STYLE = \"v\"",
        "    [\"embedding\", \"block0\"],\n    [\"block1\", \"block2\"],\n    [\"block3\", \"final_layernorm\"],\n    "
        "[\"lm_head\", \"loss\"],\n",
        "init_device_mesh(\"cuda\" if cuda else \"cpu\", (PP, DP, TP), mesh_dim_names=(\"pp\", \"dp\", \"tp\"))",
        "cls(stages[0] if single else stages, n_microbatches=N_MICROBATCHES, loss_fn=loss_fn)"}) {
    CHECK_MESSAGE(py.find(want) != std::string::npos, want);
  }
}

}  // namespace
}  // namespace planner
