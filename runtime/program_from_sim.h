// TEMPORARY ADAPTER, until launch.yaml carries each rank's program (codegen
// writes them, from the solver's simulator): builds a rank's program from
// the simulator here, the one place runtime/ still calls dp_solver/. The
// integration replaces ProgramForRank with the program launch.yaml holds for
// the rank's (pipeline position, replica); nothing else in runtime/ changes.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "spec/launch_plan.h"
#include "spec/program.h"

namespace planner {

// The program of `rank`: the simulator's compute order of the rank's device for the plan's stage
// times (SimulateSchedule, or SimulateReplicated with per-stage replication), each receive right
// before the compute that needs it (RA before F of a stage > 0, RG before B of a stage < last),
// each send right after the compute that produces it (SA after F of a stage < last, SG after B of
// a stage > 0); synchronous schedules end with the gradient reduce (AR, when the rank's
// data-parallel group has more than one rank) and the optimizer step (OPT). PipeDream's program
// has no flush and covers `iterations` iterations' microbatches (the synchronous ones cover one):
// after each B the stage's reduce (AR q, when it has replicas) and OPT.
Status ProgramForRank(const LaunchPlan& launch, int64_t rank, int64_t iterations, std::vector<Action>* out);

}  // namespace planner
