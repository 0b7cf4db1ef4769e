// One forced layout for the solver's tests: gpus, tp x pp (the rest data parallel), cp 1, microbatch 1, 1F1B, no
// recompute, one ZeRO stage; the search ranks it alone.
#pragma once

#include <cstdint>

#include "dp_solver/search.h"

namespace planner::testing {

inline SearchOptions ForcedLayout(int64_t gpus, int64_t tp, int64_t pp, int64_t zero) {
  SearchOptions o;
  o.gpus = gpus;
  o.top_k = 1;
  o.tp = {tp};
  o.pp = {pp};
  o.cp = {1};
  o.microbatch = {1};
  o.schedules = {Schedule::k1F1B};
  o.recompute = {Recompute::kNone};
  o.zero = {zero};
  return o;
}

}  // namespace planner::testing
