#include "spec/program.h"

#include <cctype>
#include <limits>

#include <fmt/format.h>

namespace planner {

namespace {

constexpr const char* kGrammar =
    "expected F|B|W<stage>.<microbatch>, RA|SA|RG|SG<stage>.<microbatch>[@<replica>], AR[<stage>] or OPT";

struct Prefix {
  const char* text;
  ActionKind kind;
};
// Longest first where one prefix starts another ("AR" before nothing shorter; "RA" etc. are distinct).
constexpr Prefix kPrefixes[] = {
    {"OPT", ActionKind::kOptimizerStep}, {"AR", ActionKind::kGradReduce},   {"RA", ActionKind::kRecvActivation},
    {"SA", ActionKind::kSendActivation}, {"RG", ActionKind::kRecvGrad},     {"SG", ActionKind::kSendGrad},
    {"F", ActionKind::kForward},         {"B", ActionKind::kBackwardInput}, {"W", ActionKind::kBackwardWeight},
};

const char* PrefixOf(ActionKind k) {
  for (const auto& p : kPrefixes) {
    if (p.kind == k) return p.text;
  }
  return "?";
}

bool IsTransfer(ActionKind k) {
  return k == ActionKind::kRecvActivation || k == ActionKind::kSendActivation || k == ActionKind::kRecvGrad ||
         k == ActionKind::kSendGrad;
}

Status Bad(std::string_view token, const std::string& why) {
  return Status::InvalidArgument(fmt::format("action '{}': {}; {}", token, why, kGrammar));
}

// Reads a non-negative decimal int32 at text[*pos]; false when there is none or it overflows.
bool ReadNumber(std::string_view text, size_t* pos, int32_t* out, bool* overflow) {
  size_t i = *pos;
  int64_t v = 0;
  *overflow = false;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    v = v * 10 + (text[i] - '0');
    if (v > std::numeric_limits<int32_t>::max()) {
      *overflow = true;
      return false;
    }
    ++i;
  }
  if (i == *pos) return false;
  *pos = i;
  *out = static_cast<int32_t>(v);
  return true;
}

}  // namespace

std::string ActionToString(const Action& a) {
  std::string s = PrefixOf(a.kind);
  switch (a.kind) {
    case ActionKind::kOptimizerStep: return s;
    case ActionKind::kGradReduce: return a.stage < 0 ? s : s + std::to_string(a.stage);
    default: break;
  }
  s += fmt::format("{}.{}", a.stage, a.microbatch);
  if (IsTransfer(a.kind) && a.peer_replica != Action::kSameReplica) s += fmt::format("@{}", a.peer_replica);
  return s;
}

Status ParseAction(std::string_view token, Action* out) {
  if (token.empty()) return Bad(token, "empty");
  const Prefix* pre = nullptr;
  for (const auto& p : kPrefixes) {
    if (token.substr(0, std::char_traits<char>::length(p.text)) == p.text) {
      pre = &p;
      break;
    }
  }
  if (pre == nullptr) return Bad(token, "unknown kind");
  Action a;
  a.kind = pre->kind;
  size_t pos = std::char_traits<char>::length(pre->text);
  bool overflow = false;
  auto number = [&](const char* what, int32_t* v) -> Status {
    if (ReadNumber(token, &pos, v, &overflow)) return Status::OK();
    return Bad(token, overflow ? fmt::format("{} is out of range", what) : fmt::format("missing {}", what));
  };
  if (a.kind == ActionKind::kOptimizerStep) {
    a.stage = -1;
  } else if (a.kind == ActionKind::kGradReduce) {
    a.stage = -1;
    if (pos < token.size()) PLANNER_RETURN_IF_ERROR(number("stage", &a.stage));
  } else {
    PLANNER_RETURN_IF_ERROR(number("stage", &a.stage));
    if (pos >= token.size() || token[pos] != '.') return Bad(token, "missing '.' between stage and microbatch");
    ++pos;
    PLANNER_RETURN_IF_ERROR(number("microbatch", &a.microbatch));
    if (pos < token.size() && token[pos] == '@') {
      if (!IsTransfer(a.kind)) return Bad(token, "only sends and receives name a peer replica");
      ++pos;
      PLANNER_RETURN_IF_ERROR(number("replica after '@'", &a.peer_replica));
    }
  }
  if (pos != token.size()) return Bad(token, fmt::format("unexpected '{}'", token.substr(pos)));
  *out = a;
  return Status::OK();
}

std::string ActionsToString(const std::vector<Action>& actions) {
  std::string s;
  for (size_t i = 0; i < actions.size(); ++i) {
    if (i) s += ' ';
    s += ActionToString(actions[i]);
  }
  return s;
}

Status ParseActions(std::string_view text, std::vector<Action>* out) {
  std::vector<Action> v;
  size_t i = 0;
  while (i < text.size()) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    Action a;
    Status s = ParseAction(text.substr(i, j - i), &a);
    if (!s.ok()) return Status::InvalidArgument(fmt::format("action {}: {}", v.size() + 1, s.message()));
    v.push_back(a);
    i = j;
  }
  *out = std::move(v);
  return Status::OK();
}

bool HasMicrobatch(const Action& a) {
  return a.kind != ActionKind::kGradReduce && a.kind != ActionKind::kOptimizerStep;
}

bool IsTransfer(const Action& a) {
  return a.kind == ActionKind::kRecvActivation || a.kind == ActionKind::kSendActivation ||
         a.kind == ActionKind::kRecvGrad || a.kind == ActionKind::kSendGrad;
}

int64_t PeerStage(const Action& a) {
  return a.kind == ActionKind::kSendActivation || a.kind == ActionKind::kRecvGrad ? int64_t{a.stage} + 1
                                                                                  : int64_t{a.stage} - 1;
}

std::vector<Action> ActionsOfMicrobatches(const std::vector<Action>& actions, int64_t first, int64_t end) {
  std::vector<Action> v;
  bool keep = false;  // whether the last microbatch action was kept
  for (const Action& a : actions) {
    if (HasMicrobatch(a)) keep = a.microbatch >= first && a.microbatch < end;
    if (keep) v.push_back(a);
  }
  return v;
}

std::vector<Action> WindowOfRun(const std::vector<Action>& actions, int64_t first, int64_t end) {
  std::vector<Action> v = ActionsOfMicrobatches(actions, first, end);
  for (Action& a : v) {
    if (HasMicrobatch(a)) a.microbatch -= static_cast<int32_t>(first);
  }
  return v;
}

}  // namespace planner
