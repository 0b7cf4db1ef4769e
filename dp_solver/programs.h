// A schedule as data: turns a launch plan into each rank's program (the
// ordered actions of spec/program.h); spec/program_check.h proves a program
// set deadlock-free.
//
// BuildPrograms plays the plan's schedule in the simulator on the plan's
// predicted stage times (the ones launch.yaml carries, so ZB-H1's time-
// dependent order is decided once, here) and writes, for each device, its
// compute operations in simulated start order, each receive right before the
// compute that needs it and each send right after the compute that produces
// it (DualPipeV's held events, SimEvent::held: an overlapped F&B pair's or a
// full backward's sends come after the pair's or the backward's last event, as
// torch's OVERLAP_F_B and FULL_BACKWARD send), then the gradient reduce and the
// optimizer step:
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
#include "dp_solver/schedule_sim.h"
#include "spec/launch_plan.h"
#include "spec/program.h"
#include "spec/program_check.h"  // CheckPrograms, CheckDeadlockFree (the checker lives in spec/: launch.yaml is checked where it is read)

namespace planner {

// The programs of every distinct (position, replica) of `L` (its stages,
// schedule, microbatching and predicted times; run.iterations for the
// asynchronous schedule), ordered by position, then replica.
Status BuildPrograms(const LaunchPlan& L, std::vector<RankProgram>* out);

// The schedule the programs come from, simulated with the launch plan's predicted stage times (events
// recorded): devices are pipeline positions, or with per-stage replication each stage's replicas in turn,
// stage q's first at (*stage_first_device)[q] (left empty for the uniform family: a stage's device is its
// position).
Status PredictedTimeline(const LaunchPlan& L, SimResult* out, std::vector<int64_t>* stage_first_device);

}  // namespace planner
