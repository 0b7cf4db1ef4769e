// The communicator groups of a uniform layout, in Megatron-Core's manner (megatron/core/parallel_state.py:
// RankGenerator and generate_masked_orthogonal_rank_groups). The world of tp x cp x ep x dp x pp ranks is laid out
// in an order string, its first dimension varying fastest: order tp-cp-dp-pp numbers rank
// tp_rank + tp (cp_rank + cp (dp_rank + dp pp_rank)), which is codegen's ((position x dp + replica) x cp + cp rank)
// x tp + tp rank. A token names some of the dimensions ("tp", "dp-cp", "tp-ep"); its groups are the sets of ranks
// that differ only in those dimensions, listed as Megatron-Core lists them: the groups by the other dimensions'
// coordinates counting up (the one first in the order fastest), each group's ranks by the token's coordinates
// counting up the same way. Codegen writes launch.yaml's groups from it and the launch reader checks them against
// it (spec/launch_plan.cc). Plain value type; no dependencies beyond common.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace planner {

using RankGroups = std::vector<std::vector<int64_t>>;

// A parallel dimension as the order and tokens name it.
enum class ParallelDim { kTp, kCp, kEp, kDp, kPp };
constexpr std::array<ParallelDim, 5> kAllParallelDims = {ParallelDim::kTp, ParallelDim::kCp, ParallelDim::kEp,
                                                         ParallelDim::kDp, ParallelDim::kPp};
const char* ParallelDimName(ParallelDim d);  // "tp", "cp", "ep", "dp", "pp"

// Megatron-Core's default order, and the two this project writes: the dense layout (tp, cp, dp over pp positions)
// and the MoE folding of a stage's tp x cp x dp ranks as expert tp x ep x expert dp (MOE.md). With ep 1 (dense)
// or cp 1 (expert) each gives the same groups as Megatron-Core's default.
inline constexpr std::string_view kMegatronOrder = "tp-cp-ep-dp-pp";
inline constexpr std::string_view kDenseOrder = "tp-cp-dp-pp";
inline constexpr std::string_view kExpertOrder = "tp-ep-dp-pp";

struct ParallelSizes {
  int64_t tp = 1, cp = 1, ep = 1, dp = 1, pp = 1;
};

// generate_masked_orthogonal_rank_groups: `sizes` in layout order (the first fastest), `mask` the dimensions a
// group spans. Sizes >= 1, mask as long as sizes; world = the product of sizes.
RankGroups MaskedOrthogonalRankGroups(const std::vector<int64_t>& sizes, const std::vector<bool>& mask);

class RankGenerator {
 public:
  // InvalidArgument when a size is below 1, the product exceeds 2^31 ranks, ep and cp are both above 1 (as in
  // Megatron-Core: cp belongs to the dense generator, ep to the expert one), or the order names an unknown or
  // repeated dimension or leaves out one whose size is not 1. Left-out dimensions of size 1 are appended.
  static Status Make(const ParallelSizes& sizes, std::string_view order, RankGenerator* out);

  // Megatron-Core's get_ranks(token): the token's dimensions joined by '-' in any order ("tp", "dp-cp",
  // "tp-ep"). InvalidArgument for an unknown or repeated dimension.
  Status Ranks(std::string_view token, RankGroups* out) const;
  // A rank's coordinate along `d` (0 for a dimension of size 1); rank in [0, world_size()).
  int64_t Coordinate(int64_t rank, ParallelDim d) const;

  int64_t world_size() const { return world_size_; }
  int64_t size(ParallelDim d) const { return sizes_[static_cast<size_t>(d)]; }
  // The order as given, e.g. "tp-cp-dp-pp".
  const std::string& order() const { return order_; }
  // "tp 2, cp 1, dp 2, pp 2 in order tp-cp-dp-pp": the sizes of the order's dimensions, for messages.
  std::string Describe() const;

 private:
  std::array<int64_t, 5> sizes_{1, 1, 1, 1, 1};  // by ParallelDim
  std::vector<ParallelDim> layout_;              // the order with the left-out dimensions appended
  size_t named_ = 0;                             // how many of layout_ the order named
  std::string order_;
  int64_t world_size_ = 1;
};

}  // namespace planner
