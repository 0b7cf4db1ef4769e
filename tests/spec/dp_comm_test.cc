// BytePS's optimal split (spec/dp_comm.h) against the seed's closed forms: the shares sum to the
// model, k = 0 is the all-reduce, k = n is the parameter server's M/B, the busiest machine's
// traffic falls as k grows, and the optimum is a brute-force minimum over splits; names round-trip.
#include <algorithm>
#include <cmath>

#include "spec/dp_comm.h"
#include "tests/test_util.h"

namespace planner {
namespace {

TEST_CASE("dp_comm names round-trip") {
  for (DpComm d : kAllDpComms) {
    DpComm back = DpComm::kRingAllReduce;
    CHECK(ParseDpComm(DpCommName(d), &back));
    CHECK(static_cast<int>(back) == static_cast<int>(d));
  }
  DpComm x;
  CHECK_FALSE(ParseDpComm("ring", &x));
  CHECK(DpCommNames().size() == 5u);
}

TEST_CASE("BytePS split: the seed's closed forms, k = 0 all-reduce, k = n parameter server, falling in k") {
  for (int64_t n = 2; n <= 16; ++n) {
    for (int64_t k = 0; k <= 2 * n; ++k) {
      const BytePsSplit s = BytePsOptimalSplit(n, k);
      CHECK(std::abs(static_cast<double>(k) * s.cpu_share + static_cast<double>(n) * s.gpu_share - (1.0)) <= 1e-12);
      CHECK(s.cpu_share >= 0);
      CHECK(s.gpu_share >= 0);
    }
    // k = 0: each GPU machine sums M/n and sends 2(n-1)M/n, the ring all-reduce's traffic.
    CHECK(std::abs(BytePsOptimalSplit(n, 0).gpu_share - (1.0 / static_cast<double>(n))) <= 1e-12);
    CHECK(std::abs(BytePsTrafficFactor(n, 0) - (2.0 * static_cast<double>(n - 1) / static_cast<double>(n))) <= 1e-12);
    // k = n: every byte on the CPU machines, M/B (a parameter server with as many servers as workers).
    CHECK(std::abs(BytePsTrafficFactor(n, n) - (1.0)) <= 1e-12);
    // Falls as k grows up to n (strictly from n = 3: with two GPU machines the all-reduce already
    // moves M per machine), flat beyond.
    for (int64_t k = 1; k <= n; ++k) {
      if (n >= 3) {
        CHECK(BytePsTrafficFactor(n, k) < BytePsTrafficFactor(n, k - 1));
      } else {
        CHECK(BytePsTrafficFactor(n, k) <= BytePsTrafficFactor(n, k - 1) + 1e-12);
      }
    }
    CHECK(std::abs(BytePsTrafficFactor(n, 2 * n) - (1.0)) <= 1e-12);
  }
  // n = 4, k = 2: D = 16 + 8 - 4 = 20; cpu 6/20, gpu 2/20; factor 2*4*3/20 = 1.2.
  const BytePsSplit s = BytePsOptimalSplit(4, 2);
  CHECK(std::abs(s.cpu_share - (0.3)) <= 1e-12);
  CHECK(std::abs(s.gpu_share - (0.1)) <= 1e-12);
  CHECK(std::abs(BytePsTrafficFactor(4, 2) - (1.2)) <= 1e-12);
  CHECK(std::abs(BytePsTrafficFactor(1, 3) - (0.0)) <= 1e-12);
}

TEST_CASE("BytePS split: the brute-force optimum over splits") {
  for (int64_t n = 2; n <= 8; ++n) {
    for (int64_t k = 1; k < n; ++k) {
      double best = 1e9;
      const double nn = static_cast<double>(n), kk = static_cast<double>(k);
      for (int i = 0; i <= 20000; ++i) {  // gpu share g on a grid, cpu share (1 - n g) / k
        const double g = (1.0 / nn) * i / 20000.0;
        const double c = (1 - nn * g) / kk;
        best = std::min(best, std::max(1 + (nn - 2) * g, nn * c));
      }
      CHECK(std::abs(BytePsTrafficFactor(n, k) - (best)) <= 1e-3);
      CHECK(BytePsTrafficFactor(n, k) <= best + 1e-12);
    }
  }
}

}  // namespace
}  // namespace planner
