// The checkpoint store: runs/<id>/ckpt/rank<k>.bin, one file per rank, holds
// three int64 (the iteration reached, the parameters' float count, the
// optimizer state's float count), then every parameter of the rank's stage in
// its order, then the optimizer state (Optimizer::State()), as float32 in the
// machine's byte order. Written atomically (a reader sees the previous
// checkpoint or the whole new one). docs/runtime.md ("Checkpoints").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/optimizer.h"

namespace planner {

// Writes rank `rank`'s checkpoint of `run_dir` after `iteration` iterations.
Status WriteCheckpoint(const std::string& run_dir, int64_t rank, int64_t iteration, const std::vector<Param*>& params,
                       const Optimizer& optimizer);

// Loads rank `rank`'s checkpoint of `run_dir` into `params` and `optimizer`; *iteration: the
// iteration it reached. NotFound without one; InvalidArgument when it belongs to another launch
// (another parameter count) or is truncated.
Status ReadCheckpoint(const std::string& run_dir, int64_t rank, const std::vector<Param*>& params, Optimizer* optimizer, int64_t* iteration);

}  // namespace planner
