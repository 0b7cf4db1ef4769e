// The checker of a set of rank programs (spec/program.h): every message has
// one sender and one receiver, pairs of ranks exchange their messages in one
// order (NCCL matches them in posting order), every stage a rank holds runs
// each of its microbatches' forward and backward exactly once (and the
// backward-weight of every one or of none), and the set is deadlock-free
// under the runtime's semantics: sends are buffered, receives block, a
// gradient reduce is a collective of the stage's replicas. Codegen runs it
// before writing launch.yaml and ParseLaunchPlan whenever one is read, so a
// hand-edited program is refused with the action that breaks it instead of
// hanging or training on wrong gradients.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "spec/launch_plan.h"
#include "spec/program.h"

namespace planner {

// Deadlock checker on concrete processes. A process runs its steps in order:
// a local step always proceeds, a send is buffered (never blocks), a receive
// blocks until its message was sent, a collective completes once every member
// of its group stands at a collective with the same id.
struct CheckStep {
  enum class Kind : uint8_t { kLocal, kSend, kRecv, kCollective };
  Kind kind = Kind::kLocal;
  int32_t peer = -1;  // send: the receiver; receive: the sender (process index)
  int64_t tag = 0;    // send / receive: the message; collective: its group id
  std::string label;  // printed in errors ("SA0.3")
};
struct CheckProcess {
  std::string name;  // "rank 3 (stage 1, replica 0)"
  std::vector<CheckStep> steps;
};
// Every send is matched by exactly one receive (same sender, receiver and tag)
// and every receive by exactly one send; `groups` maps a collective's id to
// its member processes. Then plays the processes: when nothing can move
// before every process has finished, InvalidArgument "deadlock: ..." names
// each stuck process and the step it waits at.
Status CheckDeadlockFree(const std::vector<CheckProcess>& processes, const std::vector<std::vector<int32_t>>& groups);

// Expands `L`'s programs (L.programs) to processes and checks them: every
// rank has exactly one program, every action's stage runs on its rank, every
// peer exists, then CheckDeadlockFree. Uniform plans whose programs are all
// shared (replica -1) and name no '@' peer check one replica's chain (one
// process per position); program_check.cc says why that suffices.
Status CheckPrograms(const LaunchPlan& L);

}  // namespace planner
