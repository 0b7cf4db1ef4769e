#include "spec/dp_comm.h"

#include <algorithm>

namespace planner {

const char* DpCommName(DpComm d) {
  switch (d) {
    case DpComm::kRingAllReduce: return "allreduce-ring";
    case DpComm::kTreeAllReduce: return "allreduce-tree";
    case DpComm::kHierAllReduce: return "allreduce-hier";
    case DpComm::kParameterServer: return "ps";
    case DpComm::kBytePS: return "byteps";
  }
  return "allreduce-hier";
}

bool ParseDpComm(std::string_view text, DpComm* out) {
  for (DpComm d : kAllDpComms) {
    if (text == DpCommName(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

std::string DpCommChoices() { return "allreduce-ring, allreduce-tree, allreduce-hier, ps or byteps"; }

std::vector<std::string> DpCommNames() {
  std::vector<std::string> v;
  for (DpComm d : kAllDpComms) v.emplace_back(DpCommName(d));
  return v;
}

BytePsSplit BytePsSplitAt(double n, double k) {
  BytePsSplit s;
  if (n <= 1) return s;
  if (k <= 0) {
    s.gpu_share = 1.0 / n;
  } else if (k >= n) {
    s.cpu_share = 1.0 / k;
    s.gpu_share = 0;
  } else {
    const double d = n * n + k * n - 2 * k;
    s.cpu_share = 2 * (n - 1) / d;
    s.gpu_share = (n - k) / d;
  }
  return s;
}

BytePsSplit BytePsOptimalSplit(int64_t n, int64_t k) {
  return BytePsSplitAt(static_cast<double>(n), static_cast<double>(k));
}

double BytePsTrafficFactor(int64_t n, int64_t k) {
  if (n <= 1) return 0;
  const BytePsSplit s = BytePsOptimalSplit(n, k);
  const double nn = static_cast<double>(n);
  const double gpu = (1 - s.gpu_share) + (nn - 1) * s.gpu_share;  // CS push of what others sum + SS receive from n-1
  const double cpu = nn * s.cpu_share;
  return std::max(gpu, cpu);
}

}  // namespace planner
