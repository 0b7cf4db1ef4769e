// Reads PipeDream's profile graphs (graph.txt of msr-fiddle/pipedream, format
// in shared/reference/pipedream-profiles/README.md) into a Profile: every
// node becomes a layer in the file's node order, edges become `inputs`, and
// times and sizes are kept exactly (ms -> s, bytes per profiled minibatch).
// Pure function of its input; thread-safe.
#pragma once

#include <string>

#include "common/status.h"
#include "spec/profile.h"

namespace planner {

// `minibatch` is the batch the graph was profiled at (0: infer it from the
// Input node's activation size for 3x224x224 images, else 1).
Status ImportPipeDreamGraph(const std::string& path, const std::string& text, int64_t minibatch, Profile* out);
Status ImportPipeDreamFile(const std::string& path, int64_t minibatch, Profile* out);

}  // namespace planner
