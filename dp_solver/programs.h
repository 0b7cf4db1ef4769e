// A schedule as data: turns a launch plan into each rank's program (the
// ordered actions of spec/program.h) and proves a program set deadlock-free.
//
// BuildPrograms plays the plan's schedule in the simulator on the plan's
// predicted stage times (the ones launch.yaml carries, so ZB-H1's time-
// dependent order is decided once, here) and writes, for each device, its
// compute operations in simulated start order, each receive right before the
// compute that needs it and each send right after the compute that produces
// it, then the gradient reduce and the optimizer step:
//   - uniform plans (every stage has dp replicas, a synchronous schedule): one
//     program per pipeline position (replica -1: every data- and tensor-
//     parallel rank of the position runs it; peers are the ranks of the same
//     replica and tensor-parallel rank); AR (all of the rank's gradients)
//     when dp > 1, then OPT.
//   - per-stage replication ("2-1-1": any stage's replicas != dp, or the
//     pipedream schedule): one program per (stage, replica); microbatch j runs
//     on replica j mod r of each stage, and every send and receive names its
//     peer's replica (SA0.3@1). Synchronous (1F1B with a flush): AR when the
//     stage has more than one replica, then OPT.
//   - PipeDream's asynchronous schedule: no flush, so one program covers the
//     whole run (run.iterations x m microbatches, numbered over the run);
//     after each backward its input gradient goes to the previous stage (SG),
//     then the stage's gradients are reduced over its replicas (AR<stage>,
//     when it has more than one) and the optimizer steps (OPT). (The send
//     first: with the reduce before it, a replicated stage after a single one
//     deadlocks, since a replica waiting in the reduce holds back the gradient
//     the previous stage needs before it sends the other replicas' next
//     activations.)
//     When a stage's r replicas do not divide the run's microbatches, the
//     replicas without a microbatch in the last round end with "AR<stage>
//     OPT" (zero gradients), so every replica makes the same reduces.
//
// Gradients: OPT consumes them; they accumulate from zero again after it.
//
// A shorter or resumed run executes the sub-sequence of each program whose
// microbatches fall in [start x m, iterations x m) (an AR and OPT belong to
// the backward they follow). That is still deadlock-free. Take the order in
// which the full program set completes and keep only the remaining actions:
// a remaining receive's send carries the same microbatch, so it remains and
// still comes first; each rank keeps its own order; the k-th AR of a stage's
// replicas follows the backwards of round k (microbatches [k r, (k + 1) r)),
// and as the runtime requires r to divide m, whole iterations hold whole
// rounds, so every replica loses the same ARs and the remaining ones still
// pair up in order. So the restricted order is a valid global order: removing
// every action of whole microbatches from a valid schedule keeps it valid (no
// remaining action depends on a removed one). CheckPrograms proves the full
// set; tests/dp_solver/programs_test.cc checks the sub-sequences.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "spec/launch_plan.h"
#include "spec/program.h"

namespace planner {

// The programs of every distinct (position, replica) of `L` (its stages,
// schedule, microbatching and predicted times; run.iterations for the
// asynchronous schedule), ordered by position, then replica.
Status BuildPrograms(const LaunchPlan& L, std::vector<RankProgram>* out);

// Deadlock checker on concrete processes. A process runs its steps in order:
// a local step always proceeds, a send is buffered (never blocks), a receive
// blocks until its message was sent, a collective completes once every member
// of its group stands at a collective with the same id.
struct CheckStep {
  enum class Kind : uint8_t { kLocal, kSend, kRecv, kCollective };
  Kind kind = Kind::kLocal;
  int32_t peer = -1;      // send: the receiver; receive: the sender (process index)
  int64_t tag = 0;        // send / receive: the message; collective: its group id
  std::string label;      // printed in errors ("SA0.3")
};
struct CheckProcess {
  std::string name;       // "rank 3 (stage 1, replica 0)"
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
// process per position); programs.cc says why that suffices.
Status CheckPrograms(const LaunchPlan& L);

}  // namespace planner
