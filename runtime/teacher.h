// The run's synthetic training data: a fixed teacher, the same for any
// partition of the model, so a synchronous plan's gradients equal one
// process's. GPT models: token sequences from a Markov chain (next = 5 t + 3
// mod V with probability 0.9, else uniform), targets the next tokens. Others:
// features in [-1, 1], labels the argmax of a fixed random linear map.
#pragma once

#include <cstdint>
#include <vector>

#include "spec/model_spec.h"

namespace planner {

// Deterministic synthetic data of sample `index` for `model`: inputs (token
// ids or features) and the teacher's targets (one class id per loss row).
void TeacherSample(const ModelSpec& model, uint64_t seed, int64_t index, std::vector<float>* input,
                   std::vector<float>* targets);

}  // namespace planner
