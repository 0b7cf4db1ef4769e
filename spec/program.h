// A rank's program: the ordered list of actions one pipeline rank executes
// in one iteration (or, for PipeDream's asynchronous schedule, in the whole
// run), as torch.distributed.pipelining's _Action lists and Megatron-Core's
// schedules make explicit. The solver's simulator decides the order once (at
// solve / codegen time: ZB-H1's order depends on the stage times); launch.yaml
// carries one program per distinct (pipeline position, replica) and the
// runtime interprets it without re-deriving anything. Plain value types.
//
// Text form (launch.yaml, `planner inspect`), one token per action:
//   F3.7     forward of virtual stage 3, microbatch 7
//   B3.7     backward-input of (3, 7); also the weight gradient when the
//            schedule does not split W (every schedule but zb-h1)
//   W3.7     backward-weight of (3, 7) (zb-h1)
//   RA3.7    receive the activation entering stage 3 (from stage 2)
//   SA3.7    send stage 3's output activation (to stage 4)
//   RG3.7    receive the gradient of stage 3's output (from stage 4)
//   SG3.7    send the gradient of stage 3's input (to stage 2)
//   AR3      data-parallel gradient reduce of stage 3's gradients (all of
//            this rank's gradients when the stage is -1: "AR")
//   OPT      optimizer step
// A send or receive may name the peer's replica: SA0.3@1 goes to replica 1
// of stage 1; without '@' the peer is the replica with this rank's index
// (data- and tensor-parallel peers share one program).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace planner {

enum class ActionKind : uint8_t {
  kForward,
  kBackwardInput,
  kBackwardWeight,
  kRecvActivation,
  kSendActivation,
  kRecvGrad,
  kSendGrad,
  kGradReduce,
  kOptimizerStep,
};

struct Action {
  static constexpr int32_t kSameReplica = -1;
  ActionKind kind = ActionKind::kForward;
  int32_t stage = 0;                    // virtual stage (chunk x p + position); -1 for AR over all, OPT
  int32_t microbatch = 0;               // within the iteration (the run, for the asynchronous schedule)
  int32_t peer_replica = kSameReplica;  // sends and receives only

  bool operator==(const Action&) const = default;
};

// One program and the ranks' keys it serves.
struct RankProgram {
  int64_t position = 0;  // pipeline position (the rank's stage in launch.yaml)
  int64_t replica = -1;  // -1: every replica of the position runs it
  std::vector<Action> actions;
};

std::string ActionToString(const Action& a);
// Parses one token; an error names the token and the grammar above.
[[nodiscard]] Status ParseAction(std::string_view token, Action* out);
// Space-separated tokens.
std::string ActionsToString(const std::vector<Action>& actions);
[[nodiscard]] Status ParseActions(std::string_view text, std::vector<Action>* out);

// Whether the action belongs to a microbatch (every kind but AR and OPT).
bool HasMicrobatch(const Action& a);
// Whether the action is a send or a receive. Its peer is then at virtual
// stage PeerStage(a): stage + 1 for SA and RG (activations go forward,
// gradients come back from there), stage - 1 for RA and SG; the caller checks
// that it lies in 0..Q-1.
bool IsTransfer(const Action& a);
int64_t PeerStage(const Action& a);

// The actions of microbatches [first, end) in program order, each AR and OPT
// kept with the backward it follows (the asynchronous schedule's per-backward
// update; a program's leading AR / OPT, before any microbatch, is dropped).
// A shorter or resumed PipeDream run executes this sub-sequence of the run's
// program (dp_solver/programs.h says why it stays deadlock-free).
std::vector<Action> ActionsOfMicrobatches(const std::vector<Action>& actions, int64_t first, int64_t end);
// ActionsOfMicrobatches with the microbatches renumbered from 0: what a run of
// the window executes (runtime/rank_program.cc).
std::vector<Action> WindowOfRun(const std::vector<Action>& actions, int64_t first, int64_t end);

}  // namespace planner
