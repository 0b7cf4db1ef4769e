#include "common/digest.h"

#include <cstdint>
#include <fmt/format.h>

namespace planner {

std::string DigestHex(std::string_view bytes) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return fmt::format("{:016x}", h);
}

}  // namespace planner
