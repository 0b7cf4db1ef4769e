#include "spec/rank_generator.h"

#include <fmt/format.h>

namespace planner {

namespace {

// The dimensions of a '-'-joined list of names, each once; false for an unknown or repeated name.
bool ParseDims(std::string_view text, std::vector<ParallelDim>* out) {
  out->clear();
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find('-', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view name = text.substr(at, end - at);
    bool known = false;
    for (ParallelDim d : kAllParallelDims) {
      if (name != ParallelDimName(d)) continue;
      for (ParallelDim seen : *out) {
        if (seen == d) return false;
      }
      out->push_back(d);
      known = true;
    }
    if (!known) return false;
    at = end + 1;
  }
  return true;
}

// Megatron-Core's prefix_product: the stride of each dimension (the product of the sizes before it).
std::vector<int64_t> Strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> stride(sizes.size());
  int64_t s = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    stride[i] = s;
    s *= sizes[i];
  }
  return stride;
}

}  // namespace

const char* ParallelDimName(ParallelDim d) {
  switch (d) {
    case ParallelDim::kTp: return "tp";
    case ParallelDim::kCp: return "cp";
    case ParallelDim::kEp: return "ep";
    case ParallelDim::kDp: return "dp";
    case ParallelDim::kPp: return "pp";
  }
  return "?";
}

// Group g (counting over the unmasked dimensions, the first fastest) holds the ranks whose unmasked
// coordinates are g's digits and whose masked coordinates count up (the first fastest); a rank is the
// coordinates' inner product with the layout's strides.
RankGroups MaskedOrthogonalRankGroups(const std::vector<int64_t>& sizes, const std::vector<bool>& mask) {
  const std::vector<int64_t> stride = Strides(sizes);
  std::vector<int64_t> in_size, in_stride, out_size, out_stride;
  for (size_t i = 0; i < sizes.size(); ++i) {
    (mask[i] ? in_size : out_size).push_back(sizes[i]);
    (mask[i] ? in_stride : out_stride).push_back(stride[i]);
  }
  // The rank offset of a digit string `index` over `shape` (the first digit fastest) placed at `strides`.
  auto place = [](int64_t index, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
    int64_t rank = 0;
    for (size_t i = 0; i < shape.size(); ++i) {
      rank += (index % shape[i]) * strides[i];
      index /= shape[i];
    }
    return rank;
  };
  int64_t group_size = 1, groups = 1;
  for (int64_t s : in_size) group_size *= s;
  for (int64_t s : out_size) groups *= s;
  RankGroups out(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t base = place(g, out_size, out_stride);
    auto& group = out[static_cast<size_t>(g)];
    group.reserve(static_cast<size_t>(group_size));
    for (int64_t k = 0; k < group_size; ++k) group.push_back(base + place(k, in_size, in_stride));
  }
  return out;
}

Status RankGenerator::Make(const ParallelSizes& sizes, std::string_view order, RankGenerator* out) {
  RankGenerator g;
  g.sizes_ = {sizes.tp, sizes.cp, sizes.ep, sizes.dp, sizes.pp};
  g.order_ = std::string(order);
  constexpr int64_t kMaxWorld = int64_t{1} << 31;
  for (ParallelDim d : kAllParallelDims) {
    const int64_t s = g.size(d);
    if (s < 1) {
      return Status::InvalidArgument(fmt::format("rank generator: {} {} must be at least 1", ParallelDimName(d), s));
    }
    if (g.world_size_ > kMaxWorld / s) return Status::InvalidArgument("rank generator: more than 2^31 ranks");
    g.world_size_ *= s;
  }
  if (sizes.ep > 1 && sizes.cp > 1) {
    return Status::InvalidArgument(
        fmt::format("rank generator: ep {} and cp {} are both above 1; cp belongs to the "
                    "dense generator and ep to the expert one (Megatron-Core)",
                    sizes.ep, sizes.cp));
  }
  if (!ParseDims(order, &g.layout_)) {
    return Status::InvalidArgument(
        fmt::format("rank generator: order '{}' is not tp, cp, ep, dp and pp joined by '-', each at most once", order));
  }
  g.named_ = g.layout_.size();
  for (ParallelDim d : kAllParallelDims) {
    bool named = false;
    for (ParallelDim x : g.layout_) named = named || x == d;
    if (named) continue;
    if (g.size(d) != 1) {
      return Status::InvalidArgument(fmt::format("rank generator: {} is {} but the order '{}' leaves it out",
                                                 ParallelDimName(d), g.size(d), order));
    }
    g.layout_.push_back(d);
  }
  *out = std::move(g);
  return Status::OK();
}

Status RankGenerator::Ranks(std::string_view token, RankGroups* out) const {
  std::vector<ParallelDim> dims;
  if (!ParseDims(token, &dims)) {
    return Status::InvalidArgument(
        fmt::format("rank generator: token '{}' is not tp, cp, ep, dp and pp joined by '-', each at most once", token));
  }
  std::vector<int64_t> sizes;
  std::vector<bool> mask;
  for (ParallelDim d : layout_) {
    sizes.push_back(size(d));
    bool in = false;
    for (ParallelDim x : dims) in = in || x == d;
    mask.push_back(in);
  }
  *out = MaskedOrthogonalRankGroups(sizes, mask);
  return Status::OK();
}

int64_t RankGenerator::Coordinate(int64_t rank, ParallelDim d) const {
  for (ParallelDim x : layout_) {
    if (x == d) return rank % size(x);
    rank /= size(x);
  }
  return 0;
}

std::string RankGenerator::Describe() const {
  std::string s;
  for (size_t i = 0; i < named_; ++i) {
    s += fmt::format("{}{} {}", i ? ", " : "", ParallelDimName(layout_[i]), size(layout_[i]));
  }
  return s + " in order " + order_;
}

}  // namespace planner
