// spec/program.h: the text form of a rank's program (round trips, every malformed token).
#include <string>
#include <vector>

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
                           Make(ActionKind::kSendActivation, 1, 0),     Make(ActionKind::kRecvGrad, 1, 0),
                           Make(ActionKind::kBackwardInput, 1, 0),      Make(ActionKind::kSendGrad, 1, 0, 1),
                           Make(ActionKind::kBackwardWeight, 1, 0),     Make(ActionKind::kGradReduce, -1, 0),
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

}  // namespace
}  // namespace planner
