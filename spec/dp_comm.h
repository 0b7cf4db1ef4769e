// How data-parallel ranks synchronise gradients (the seeds' architectures:
// ring, tree and hierarchical all-reduce, a parameter server, BytePS), as an
// enum parsed once where a flag or file is read, and BytePS's optimal split of
// the summation work between CPU and GPU machines, which the cost model and
// the runtime both use (docs/cost_model.md, "Data-parallel communication
// architectures"). Plain functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace planner {

enum class DpComm { kRingAllReduce, kTreeAllReduce, kHierAllReduce, kParameterServer, kBytePS };
inline constexpr DpComm kAllDpComms[] = {DpComm::kRingAllReduce, DpComm::kTreeAllReduce, DpComm::kHierAllReduce,
                                         DpComm::kParameterServer, DpComm::kBytePS};
const char* DpCommName(DpComm d);  // allreduce-ring | allreduce-tree | allreduce-hier | ps | byteps
bool ParseDpComm(std::string_view text, DpComm* out);
std::string DpCommChoices();             // "allreduce-ring, allreduce-tree, allreduce-hier, ps or byteps"
std::vector<std::string> DpCommNames();  // in kAllDpComms order
// Parameter server and BytePS need summation servers outside the all-reduce's ranks.
inline bool DpCommUsesServers(DpComm d) { return d == DpComm::kParameterServer || d == DpComm::kBytePS; }

// BytePS's summation-service split (Jiang et al., OSDI'20, section 4.1; the seed's slide) for n
// GPU machines and k CPU machines, as fractions of the model size M: each CPU machine sums
// cpu_share M and each GPU machine gpu_share M, k cpu_share + n gpu_share = 1.
//   cpu_share = 2(n-1) / (n^2 + kn - 2k),  gpu_share = (n-k) / (n^2 + kn - 2k)   for k <= n;
//   cpu_share = 1/k, gpu_share = 0                                              for k >= n (the
// formula's GPU share would be negative: every byte goes to the CPU machines, a sharded PS).
// n <= 1: nothing crosses machines (gpu_share = 1, cpu_share = 0). k = 0 is the all-reduce's split
// (each GPU machine sums M/n).
struct BytePsSplit {
  double cpu_share = 0;
  double gpu_share = 1;
};
BytePsSplit BytePsOptimalSplit(int64_t n, int64_t k);
// The same formula at real n and k (the cost model's k / G servers per group): equal at integers.
BytePsSplit BytePsSplitAt(double n, double k);

// The bytes the busiest machine sends (= receives) per byte of model under that split, i.e. the
// time in units of M / B when every machine has bandwidth B:
//   GPU machine: 1 + (n - 2) gpu_share  (its push/pull of what others sum, plus its own summing);
//   CPU machine: n cpu_share;  the larger of the two. Equals 2(n-1)/n at k = 0 (ring all-reduce),
//   2n(n-1)/(n^2+kn-2k) for 0 < k <= n (both equal) and 1 for k >= n.
double BytePsTrafficFactor(int64_t n, int64_t k);

}  // namespace planner
