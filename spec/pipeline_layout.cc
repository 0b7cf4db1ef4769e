#include "spec/pipeline_layout.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace planner {

namespace {

constexpr size_t kMaxExpanded = 1000000;
constexpr const char* kFlag = "--pipeline-model-parallel-layout";

// The repeat count at text[i..] ("*n"): its value and the index after it; false when there is none.
bool RepeatAt(const std::string& text, size_t i, int64_t* n, size_t* end) {
  if (i >= text.size() || text[i] != '*') return false;
  size_t j = i + 1;
  int64_t v = 0;
  while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j])) && v <= 10000000) {
    v = v * 10 + (text[j] - '0');
    ++j;
  }
  if (j == i + 1) return false;
  *n = v;
  *end = j;
  return true;
}

Status Append(const std::string& part, int64_t n, std::string* out) {
  if (n > 0 && part.size() * static_cast<size_t>(n) > kMaxExpanded - std::min(out->size(), kMaxExpanded))
    return Status::InvalidArgument(fmt::format(
        "{}: expands to more than {} characters; a layout has one character per layer", kFlag, kMaxExpanded));
  for (int64_t k = 0; k < n; ++k) *out += part;
  return Status::OK();
}

// Megatron's first pattern, \(([^)]+)\)\*(\d+): each "(...)*n" (the leftmost first) replaced by n copies.
Status UnrollGroups(const std::string& s, std::string* out) {
  for (size_t i = 0; i < s.size();) {
    const size_t close = s[i] == '(' ? s.find(')', i + 1) : std::string::npos;
    int64_t n = 0;
    size_t end = 0;
    if (close != std::string::npos && close > i + 1 && RepeatAt(s, close + 1, &n, &end)) {
      PLANNER_RETURN_IF_ERROR(Append(s.substr(i + 1, close - i - 1), n, out));
      i = end;
      continue;
    }
    *out += s[i++];
  }
  return Status::OK();
}

// The second, (.)\*(\d+): each "x*n" replaced by n copies of x.
Status UnrollChars(const std::string& s, std::string* out) {
  for (size_t i = 0; i < s.size();) {
    int64_t n = 0;
    size_t end = 0;
    if (RepeatAt(s, i + 1, &n, &end)) {
      PLANNER_RETURN_IF_ERROR(Append(s.substr(i, 1), n, out));
      i = end;
      continue;
    }
    *out += s[i++];
  }
  return Status::OK();
}

const char* SymbolName(char c) {
  switch (c) {
    case 'E': return "embedding ('E')";
    case 't': return "decoder layers ('t')";
    case 'm': return "MTP modules ('m')";
    default: return "loss ('L')";
  }
}

}  // namespace

char PipelineLayoutSymbol(LayerKind kind) {
  switch (kind) {
    case LayerKind::kEmbedding: return 'E';
    case LayerKind::kTransformerBlock:
    case LayerKind::kMoeBlock: return 't';
    case LayerKind::kMtp: return 'm';
    case LayerKind::kLoss: return 'L';
    case LayerKind::kLayernorm:
    case LayerKind::kRmsnorm:
    case LayerKind::kLmHead: return 0;
    case LayerKind::kLinear:
    case LayerKind::kConv2d:
    case LayerKind::kRelu:
    case LayerKind::kGelu:
    case LayerKind::kMaxpool:
    case LayerKind::kAvgpool:
    case LayerKind::kFlatten:
    case LayerKind::kDropout:
    case LayerKind::kAttention:
    case LayerKind::kMlp:
    case LayerKind::kMoe: return '?';
  }
  return '?';
}

Status ExpandPipelineLayout(const std::string& text, std::vector<std::string>* chunks) {
  std::string plain;
  for (char c : text) {
    if (c != ',') plain += c;
  }
  std::string groups, flat;
  PLANNER_RETURN_IF_ERROR(UnrollGroups(plain, &groups));
  PLANNER_RETURN_IF_ERROR(UnrollChars(groups, &flat));
  chunks->assign(1, "");
  for (char c : flat) {
    if (c == '|') {
      chunks->emplace_back();
    } else if (c == 'E' || c == 't' || c == 'm' || c == 'L') {
      chunks->back() += c;
    } else {
      const std::string shown = std::isprint(static_cast<unsigned char>(c)) ? std::string(1, c) : "\\x??";
      return Status::InvalidArgument(fmt::format(
          "{} '{}': character '{}' is not a layer; use E (embedding), t (decoder layer), m (MTP module), L (loss), "
          "'|' between chunks, (...)*n and x*n to repeat",
          kFlag, text.size() > 80 ? text.substr(0, 77) + "..." : text, shown));
    }
  }
  return Status::OK();
}

Status ResolvePipelineLayout(const std::string& text, const ModelSpec& model, int64_t pp, PipelineLayout* out) {
  if (!model.is_gpt)
    return Status::InvalidArgument(
        fmt::format("{}: places Megatron's layer types; model {} is not a gpt: model", kFlag, model.name));
  PipelineLayout L;
  PLANNER_RETURN_IF_ERROR(ExpandPipelineLayout(text, &L.chunks));
  const int64_t k = static_cast<int64_t>(L.chunks.size());
  if (pp < 1 || k % pp != 0)
    return Status::InvalidArgument(
        fmt::format("{}: {} chunks are not a multiple of --pp {}; give pp x vp chunks separated by '|'", kFlag, k, pp));
  // The model's symbols in layer order, and the row of each.
  std::string want;
  std::vector<int64_t> rows;
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const char s = PipelineLayoutSymbol(model.layers[i].kind);
    if (s == 0) continue;
    if (s == '?')
      return Status::InvalidArgument(fmt::format("{}: layer {} ({}) of model {} has no layout symbol", kFlag,
                                                 model.layers[i].name, LayerKindName(model.layers[i].kind),
                                                 model.name));
    want += s;
    rows.push_back(static_cast<int64_t>(i));
  }
  std::string have;
  for (const auto& c : L.chunks) have += c;
  for (char s : {'E', 't', 'm', 'L'}) {
    const auto n_want = std::count(want.begin(), want.end(), s), n_have = std::count(have.begin(), have.end(), s);
    if (n_want != n_have)
      return Status::InvalidArgument(fmt::format("{}: model {} has {} {} and the layout places {}; place each once",
                                                 kFlag, model.name, n_want, SymbolName(s), n_have));
  }
  if (have != want)
    return Status::InvalidArgument(fmt::format(
        "{}: the layers are out of order; the embedding comes first, then the decoder layers, the MTP modules, and "
        "the loss last ({}'s order: E t*{} {}L)",
        kFlag, model.name, std::count(want.begin(), want.end(), 't'),
        want.find('m') != std::string::npos ? fmt::format("m*{} ", std::count(want.begin(), want.end(), 'm')) : ""));
  L.pp = pp;
  L.vp = k / pp;
  L.cuts.push_back(0);
  size_t at = 0;  // symbols placed so far
  for (int64_t q = 0; q < k; ++q) {
    const std::string& c = L.chunks[static_cast<size_t>(q)];
    if (c.empty())
      return Status::InvalidArgument(fmt::format(
          "{}: chunk {} (pipeline rank {}, virtual stage {}) is empty; the planner costs chunks holding a layer: "
          "move one into it or use fewer chunks",
          kFlag, q, q % pp, q / pp));
    at += c.size();
    L.cuts.push_back(q + 1 == k ? static_cast<int64_t>(model.layers.size()) : rows[at - 1] + 1);
  }
  *out = std::move(L);
  return Status::OK();
}

}  // namespace planner
