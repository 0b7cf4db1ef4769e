#include "spec/input_limits.h"

#include <algorithm>

#include <fmt/format.h>

namespace planner {

Status GetIntInRange(const YamlReader& r, const YAML::Node& map, const std::string& key, const std::string& field,
                     int64_t* out, bool required, int64_t lo, int64_t hi) {
  int64_t v = *out;
  PLANNER_RETURN_IF_ERROR(r.GetInt(map, key, field, &v, required, lo));
  if (v > hi) return r.FieldError(map[key], field, fmt::format("must be at most {}, got {}", hi, v));
  *out = v;
  return Status::OK();
}

bool CheckedProduct(std::initializer_list<int64_t> factors, int64_t* out) {
  int64_t p = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(p, f, &p)) return false;
  }
  *out = p;
  return true;
}

Status CheckLayerCover(const std::string& where, const std::vector<std::pair<int64_t, int64_t>>& ranges, int64_t layers,
                       const std::string& model_path) {
  std::vector<std::pair<std::pair<int64_t, int64_t>, size_t>> order;  // (range, stage index), by first layer
  for (size_t i = 0; i < ranges.size(); ++i) order.push_back({ranges[i], i});
  std::sort(order.begin(), order.end());
  int64_t next = 0;  // the first layer no stage has covered yet
  for (const auto& [range, i] : order) {
    if (range.second >= layers) {
      return Status::InvalidArgument(
          fmt::format("{}: field 'stages[{}].last_layer': layer {} does not exist: {} has {} layers (0..{}); solve "
                      "again for this model",
                      where, i, range.second, model_path, layers, layers - 1));
    }
    if (range.first != next) {
      return Status::InvalidArgument(
          fmt::format("{}: field 'stages[{}].first_layer': stage starts at layer {}, but {}; the stages must cover "
                      "each layer of {} once",
                      where, i, range.first,
                      range.first < next ? fmt::format("layer {} is already in another stage", range.first)
                                         : fmt::format("layers {}..{} are in no stage", next, range.first - 1),
                      model_path));
    }
    next = range.second + 1;
  }
  if (next != layers) {
    return Status::InvalidArgument(
        fmt::format("{}: field 'stages': layers {}..{} of {} are in no stage; the stages must cover each layer once",
                    where, next, layers - 1, model_path));
  }
  return Status::OK();
}

}  // namespace planner
