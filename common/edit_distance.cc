#include "common/edit_distance.h"

#include <algorithm>

namespace planner {

int EditDistance(std::string_view a, std::string_view b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diag = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int up = row[j];
      int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + cost});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string DidYouMean(std::string_view word, const std::vector<std::string>& candidates) {
  int limit = std::max<int>(2, static_cast<int>(word.size()) / 3);
  int best = limit + 1;
  const std::string* best_word = nullptr;
  for (const auto& c : candidates) {
    int d = EditDistance(word, c);
    if (d < best) {
      best = d;
      best_word = &c;
    }
  }
  if (best_word == nullptr) return "";
  return ", did you mean '" + *best_word + "'?";
}

}  // namespace planner
