// Edit distance and "did you mean" suggestions for keys, layer types, enum
// values and subcommands. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace planner {

// Levenshtein distance between a and b (case-sensitive).
int EditDistance(std::string_view a, std::string_view b);

// Returns ", did you mean 'x'?" for the closest candidate within a distance of
// max(2, |word|/3), or "" when none is close. Ties go to the first candidate.
std::string DidYouMean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace planner
