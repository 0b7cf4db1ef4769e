// Upper bounds of the counts plan.yaml and launch.yaml carry (docs/formats.md, "Limits"),
// checked where the files are read: the arithmetic on them (products of group sizes, batch
// splits, rank and microbatch loops in codegen and the runtime) then cannot overflow, and a
// hand-edited file cannot make codegen or run allocate without bound.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "spec/yaml_reader.h"

namespace planner {

inline constexpr int64_t kMaxRanks = int64_t{1} << 20;  // GPUs, ranks, any group size (a cluster file's limit)
inline constexpr int64_t kMaxVirtualStages = 100000;    // stages, interleave: at most one per layer (a model's limit)
inline constexpr int64_t kMaxMicrobatches = int64_t{1} << 20;  // microbatches of one iteration
inline constexpr int64_t kMaxBatch = int64_t{1} << 40;         // samples of an iteration or a microbatch
inline constexpr int64_t kMaxIterations = 10000000;            // planner run --iterations' range
inline constexpr double kMaxTimeoutSeconds = 7 * 86400.0;      // a collective's timeout: a week
inline constexpr double kMaxStageSeconds = 1e9;  // a stage's predicted time per microbatch or iteration (31 years)
inline constexpr int64_t kMaxProgramSlots = int64_t{1}
                                            << 20;  // (stage, microbatch) pairs the programs of a launch list

// GetInt with an upper bound: "must be at most HI, got V".
Status GetIntInRange(const YamlReader& r, const YAML::Node& map, const std::string& key, const std::string& field,
                     int64_t* out, bool required, int64_t lo, int64_t hi);

// The product of `factors` (each >= 0) in *out; false (and *out untouched) when it exceeds INT64_MAX.
bool CheckedProduct(std::initializer_list<int64_t> factors, int64_t* out);

// Stages' inclusive layer ranges [first, last] against a model of `layers` layers: together they
// cover 0..layers-1, each layer once (in any order: interleaved chunks list them by virtual stage).
// An error names `where` (the plan or launch file), the stage and the model file, and says what to fix.
Status CheckLayerCover(const std::string& where, const std::vector<std::pair<int64_t, int64_t>>& ranges, int64_t layers,
                       const std::string& model_path);

}  // namespace planner
