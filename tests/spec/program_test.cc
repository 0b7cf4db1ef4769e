// spec/program.h: the text form of a rank's program (round trips, every malformed token).
#include <string>
#include <vector>

#include "spec/launch_plan.h"
#include "spec/program.h"
#include "tests/test_util.h"

namespace planner {
namespace {

Action Make(ActionKind k, int32_t stage, int32_t mb, int32_t peer = Action::kSameReplica) {
  Action a;
  a.kind = k;
  a.stage = stage;
  a.microbatch = mb;
  a.peer_replica = peer;
  return a;
}

TEST_CASE("every action kind prints as its token and parses back") {
  struct Row {
    Action a;
    const char* text;
  };
  const Row rows[] = {
      {Make(ActionKind::kForward, 3, 7), "F3.7"},
      {Make(ActionKind::kBackwardInput, 0, 12), "B0.12"},
      {Make(ActionKind::kBackwardWeight, 11, 0), "W11.0"},
      {Make(ActionKind::kRecvActivation, 3, 7), "RA3.7"},
      {Make(ActionKind::kSendActivation, 0, 3, 1), "SA0.3@1"},
      {Make(ActionKind::kRecvGrad, 2, 5, 0), "RG2.5@0"},
      {Make(ActionKind::kSendGrad, 1, 2147483647), "SG1.2147483647"},
      {Make(ActionKind::kGradReduce, 3, 0), "AR3"},
      {Make(ActionKind::kGradReduce, -1, 0), "AR"},
      {Make(ActionKind::kOptimizerStep, -1, 0), "OPT"},
  };
  for (const auto& r : rows) {
    CAPTURE(r.text);
    CHECK(ActionToString(r.a) == r.text);
    Action back;
    REQUIRE_OK(ParseAction(r.text, &back));
    CHECK(back == r.a);
  }
}

TEST_CASE("a list of actions round-trips through its text") {
  std::vector<Action> v = {Make(ActionKind::kRecvActivation, 1, 0, 2), Make(ActionKind::kForward, 1, 0),
                           Make(ActionKind::kSendActivation, 1, 0),    Make(ActionKind::kRecvGrad, 1, 0),
                           Make(ActionKind::kBackwardInput, 1, 0),     Make(ActionKind::kSendGrad, 1, 0, 1),
                           Make(ActionKind::kBackwardWeight, 1, 0),    Make(ActionKind::kGradReduce, -1, 0),
                           Make(ActionKind::kOptimizerStep, -1, 0)};
  const std::string text = ActionsToString(v);
  CHECK(text == "RA1.0@2 F1.0 SA1.0 RG1.0 B1.0 SG1.0@1 W1.0 AR OPT");
  std::vector<Action> back;
  REQUIRE_OK(ParseActions(text, &back));
  CHECK(back == v);
  // Any whitespace separates tokens; an empty text is an empty program.
  REQUIRE_OK(ParseActions("  F0.0\tB0.0\n OPT  ", &back));
  CHECK(back.size() == 3);
  REQUIRE_OK(ParseActions("", &back));
  CHECK(back.empty());
  CHECK(ActionsToString({}).empty());
}

TEST_CASE("every malformed token is an error naming the token and why") {
  struct Row {
    const char* token;
    const char* why;
  };
  const Row rows[] = {
      {"", "empty"},
      {"X1.2", "unknown kind"},
      {"f1.2", "unknown kind"},
      {"F", "missing stage"},
      {"F.2", "missing stage"},
      {"F-1.2", "missing stage"},
      {"F1", "missing '.' between stage and microbatch"},
      {"F1,2", "missing '.' between stage and microbatch"},
      {"F1.", "missing microbatch"},
      {"F1.x", "missing microbatch"},
      {"F1.2.3", "unexpected '.3'"},
      {"F1.2@0", "only sends and receives name a peer replica"},
      {"B1.2@0", "only sends and receives name a peer replica"},
      {"W1.2@0", "only sends and receives name a peer replica"},
      {"SA1.2@", "missing replica after '@'"},
      {"RA1.2@x", "missing replica after '@'"},
      {"SG1.2@1@2", "unexpected '@2'"},
      {"F2147483648.0", "stage is out of range"},
      {"F0.99999999999", "microbatch is out of range"},
      {"RG0.0@2147483648", "replica after '@' is out of range"},
      {"AR1.2", "unexpected '.2'"},
      {"ARx", "missing stage"},
      {"OPT1", "unexpected '1'"},
      {"OPTX", "unexpected 'X'"},
  };
  for (const auto& r : rows) {
    const std::string token = r.token;
    CAPTURE(token);
    Action a;
    Status s = ParseAction(r.token, &a);
    REQUIRE_FALSE(s.ok());
    CHECK(s.code() == StatusCode::kInvalidArgument);
    INFO(s.message());
    CHECK(s.message().find(std::string("action '") + r.token + "': " + r.why) != std::string::npos);
    CHECK(s.message().find("AR[<stage>] or OPT") != std::string::npos);
  }
}

TEST_CASE("a malformed token in a list names its position") {
  std::vector<Action> v = {Make(ActionKind::kForward, 0, 0)};
  Status s = ParseActions("F0.0 B0.0 Q0.0 OPT", &v);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("action 3: action 'Q0.0': unknown kind") == 0);
  CHECK(v.size() == 1);  // untouched on error
}

TEST_CASE("the actions of a range of microbatches keep each AR and OPT with its backward") {
  std::vector<Action> v;
  REQUIRE_OK(ParseActions("F0.0 F0.1 B0.0 AR0 OPT F0.2 B0.1 AR0 OPT B0.2 AR0 OPT", &v));
  CHECK(ActionsToString(ActionsOfMicrobatches(v, 1, 3)) == "F0.1 F0.2 B0.1 AR0 OPT B0.2 AR0 OPT");
  CHECK(ActionsToString(ActionsOfMicrobatches(v, 0, 1)) == "F0.0 B0.0 AR0 OPT");
  CHECK(ActionsOfMicrobatches(v, 3, 9).empty());
  CHECK(ActionsOfMicrobatches(v, 0, 3) == v);
}

// A two-stage launch plan (tp 2, dp 2) with its programs.
LaunchPlan TwoStages() {
  LaunchPlan L;
  L.schedule = Schedule::k1F1B;
  L.tp = 2;
  L.pp = 2;
  L.dp = 2;
  L.stages = {LaunchStage{0, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0}, LaunchStage{1, 1, 2, 0, 1, 0, 0, 0, 0, 0, 0}};
  for (int64_t r = 0; r < 8; ++r) {
    LaunchRank x;
    x.rank = r;
    x.stage = r / 4;
    x.replica = (r / 2) % 2;
    x.tp_rank = r % 2;
    L.ranks.push_back(x);
  }
  // Megatron's order (rank = (stage x dp + replica) x tp + tp rank): the reader checks them against the ranks.
  L.tp_groups = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  L.dp_groups = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
  L.pp_groups = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  L.programs.resize(2);
  L.programs[0].position = 0;
  REQUIRE_OK(ParseActions("F0.0 SA0.0 RG0.0 B0.0 AR OPT", &L.programs[0].actions));
  L.programs[1].position = 1;
  REQUIRE_OK(ParseActions("RA1.0 F1.0 B1.0 SG1.0 AR OPT", &L.programs[1].actions));
  return L;
}

TEST_CASE("launch.yaml carries the programs; every rank gets exactly one") {
  LaunchPlan L = TwoStages();
  const std::string yaml = LaunchPlanToYaml(L);
  CHECK(yaml.find("programs:\n  - {position: 0, replica: -1, actions: \"F0.0 SA0.0 RG0.0 B0.0 AR OPT\"}\n") !=
        std::string::npos);
  LaunchPlan back;
  REQUIRE_OK(ParseLaunchPlan("launch.yaml", yaml, &back));
  REQUIRE(back.programs.size() == 2);
  CHECK(back.programs[1].actions == L.programs[1].actions);
  for (const auto& r : back.ranks) CHECK(r.program == r.stage);
  CHECK(LaunchPlanToYaml(back) == yaml);
  // Peers: the same replica and tp rank at the neighbour stage.
  CHECK(PeerRank(back, back.ranks[3], back.programs[0].actions[1]) == 7);
  CHECK(PeerRank(back, back.ranks[6], back.programs[1].actions[0]) == 2);
  CHECK(PeerRank(back, back.ranks[6], back.programs[1].actions[1]) == -1);
  Action far = back.programs[1].actions[0];
  far.peer_replica = 0;
  CHECK(PeerRank(back, back.ranks[6], far) == 0);
  struct Bad {
    std::string from, to, message;
  };
  const Bad bads[] = {
      {"programs:\n", "progs:\n", "unknown key 'progs'"},
      {"  - {position: 0, replica: -1, actions: \"F0.0 SA0.0", "  - {position: 0, replica: -1, actions: \"F0.0 XA0.0",
       "field 'programs[0].actions': action 2: action 'XA0.0': unknown kind"},
      {"{position: 1, replica: -1,", "{position: 1, replica: 0,",
       "programs': no program for rank 6 (stage 1, replica 1)"},
      {"{position: 1, replica: -1,", "{position: 0, replica: 1,",
       "programs': several programs for rank 2 (stage 0, replica 1)"},
      {"{position: 1, replica: -1,", "{position: 1, replica: -2,", "programs[1].replica': must be at least -1"},
      {"{position: 1, replica: -1,", "{position: 1, replica: -1, steps: 1,", "unknown key 'steps'"},
  };
  for (const auto& b : bads) {
    CAPTURE(b.message);
    std::string text = yaml;
    REQUIRE(text.find(b.from) != std::string::npos);
    text.replace(text.find(b.from), b.from.size(), b.to);
    Status s = ParseLaunchPlan("launch.yaml", text, &back);
    INFO(s.message());
    CHECK_FALSE(s.ok());
    CHECK(s.message().find(b.message) != std::string::npos);
  }
  // A launch file without programs (from an older codegen) is refused with the fix.
  Status s = ParseLaunchPlan("launch.yaml", yaml.substr(0, yaml.find("programs:")), &back);
  CHECK(s.message().find(
            "field 'programs': missing required field; regenerate the launch directory with planner codegen") !=
        std::string::npos);
}

}  // namespace
}  // namespace planner
