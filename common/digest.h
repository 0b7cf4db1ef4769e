// Content digests recorded in plans (which model / cluster / profile a plan
// was solved for). FNV-1a 64-bit: not cryptographic, only a change detector.
#pragma once

#include <string>
#include <string_view>

namespace planner {

// 16 lowercase hex digits of FNV-1a-64 of `bytes`.
std::string DigestHex(std::string_view bytes);

}  // namespace planner
