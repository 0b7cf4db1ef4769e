// The actions a rank executes in one pass, from the programs launch.yaml
// carries (spec/launch_plan.h; codegen wrote them from the solver's simulator
// and proved them deadlock-free). The runtime derives no order of its own.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "runtime/launch_layout.h"
#include "spec/launch_plan.h"
#include "spec/program.h"

namespace planner {

// The program of `rank` for iterations [start, end) of the run. A synchronous
// schedule's program is one iteration, the same every iteration. PipeDream's
// asynchronous program covers the launch's run.iterations (microbatches
// numbered over the run); a run of [start, end) executes its actions of
// microbatches [start x m, end x m), renumbered from 0 (WindowOfRun:
// removing every action of some microbatches keeps a valid schedule valid,
// dp_solver/programs.h). An error names launch.yaml: a rank without a
// program, or a run longer than the asynchronous program covers.
Status RankProgramOf(const LaunchPlan& launch, const LaunchLayout& layout, int64_t rank, int64_t start, int64_t end,
                     std::vector<Action>* out);

// A one-rank GPipe program over m microbatches of stage 0 (F0.0..F0.m-1,
// B0.0..B0.m-1, OPT): the simulator's order on one device, for the
// single-process reference run (SingleProcessPlan).
std::vector<Action> SingleDeviceProgram(int64_t microbatches);

}  // namespace planner
