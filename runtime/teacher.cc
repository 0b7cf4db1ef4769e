#include "runtime/teacher.h"

#include <algorithm>

namespace planner {

namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
double Unit(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

int64_t Product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

}  // namespace

void TeacherSample(const ModelSpec& m, uint64_t seed, int64_t index, std::vector<float>* input,
                   std::vector<float>* targets) {
  const Layer& first = m.layers.front();
  const Layer& last = m.layers.back();
  const int64_t classes = last.in_shape.back();
  const int64_t rows = Product(last.in_shape) / classes;
  input->clear();
  targets->clear();
  const uint64_t base = Mix(seed * 0x100000001B3ull + static_cast<uint64_t>(index));
  if (first.kind == LayerKind::kEmbedding) {
    // A fixed "teacher" Markov chain: the next token is (5 t + 3) mod V with
    // probability 0.9, else uniform. Targets are the next tokens.
    const int64_t seq = first.in_shape[0], vocab = first.attrs.Int("vocab", 2);
    std::vector<int64_t> tok(static_cast<size_t>(seq + 1));
    tok[0] = static_cast<int64_t>(Mix(base) % static_cast<uint64_t>(vocab));
    for (int64_t i = 1; i <= seq; ++i) {
      uint64_t h = Mix(base + static_cast<uint64_t>(i));
      tok[static_cast<size_t>(i)] = Unit(h) < 0.9 ? (5 * tok[static_cast<size_t>(i - 1)] + 3) % vocab
                                                  : static_cast<int64_t>(Mix(h) % static_cast<uint64_t>(vocab));
    }
    for (int64_t i = 0; i < seq; ++i) input->push_back(static_cast<float>(tok[static_cast<size_t>(i)]));
    for (int64_t r = 0; r < rows; ++r)
      targets->push_back(static_cast<float>(tok[static_cast<size_t>(std::min(r + 1, seq))] % classes));
    return;
  }
  // Features in [-1, 1]; the teacher is a fixed random linear map to the
  // classes, the label its argmax (per loss row).
  const int64_t n = Product(first.in_shape);
  for (int64_t i = 0; i < n; ++i)
    input->push_back(static_cast<float>(2 * Unit(Mix(base + static_cast<uint64_t>(i))) - 1));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t best = 0;
    double best_v = -1e300;
    for (int64_t c = 0; c < classes; ++c) {
      double v = 0;
      for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n / 64)) {
        double w = 2 * Unit(Mix(seed ^ (0xABCDEFull + static_cast<uint64_t>((r * classes + c) * n + i)))) - 1;
        v += w * (*input)[static_cast<size_t>(i)];
      }
      if (v > best_v) {
        best_v = v;
        best = c;
      }
    }
    targets->push_back(static_cast<float>(best));
  }
}

}  // namespace planner
