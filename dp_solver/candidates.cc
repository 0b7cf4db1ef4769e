#include "dp_solver/candidates.h"

#include <algorithm>

#include <fmt/format.h>

#include "dp_solver/evaluate.h"
#include "dp_solver/search.h"
#include "spec/layer_catalog.h"

namespace planner {

int64_t CostSourceLayers(const CostSource& src) {
  if (src.model != nullptr) return static_cast<int64_t>(src.model->layers.size());
  return src.profile != nullptr ? static_cast<int64_t>(src.profile->layers.size()) : 0;
}

namespace {

std::vector<int64_t> Divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// Every microbatch size the profile measured (at tp = 1), else its reference size.
std::vector<int64_t> ProfiledMicrobatches(const Profile& profile) {
  std::vector<int64_t> mbs;
  for (const auto& l : profile.layers) {
    for (const auto& t : l.timings) {
      if (t.tp == 1 && std::find(mbs.begin(), mbs.end(), t.microbatch) == mbs.end()) mbs.push_back(t.microbatch);
    }
  }
  if (mbs.empty()) mbs = {profile.reference_microbatch};
  std::sort(mbs.begin(), mbs.end());
  return mbs;
}

// DualPipeV: 2 chunks per device, p >= 2, m >= 2p microbatches (torch's ScheduleDualPipeV), 2p chunks
// of a gpt model's blocks (or blocks + 2 with the embedding and the loss counted as a layer each).
std::vector<std::pair<int64_t, bool>> DualPipeVChunks(int64_t p, int64_t m, int64_t layers, int64_t blocks,
                                                      Rejections* why) {
  const bool whole = blocks > 0 && blocks % (2 * p) == 0, account = blocks > 0 && !whole && (blocks + 2) % (2 * p) == 0;
  std::string no;
  if (p < 2) no = "dualpipev needs pp >= 2";
  else if (!CheckDualPipeV(p, 2, m).ok())
    no = fmt::format("dualpipev needs at least 2 x pp = {} microbatches, not {}", 2 * p, m);
  else if (2 * p > layers || (blocks > 0 && !whole && !account)) {
    no = blocks > 0
             ? fmt::format(
                   "dualpipev with pp={}: its 2 x pp = {} stages must divide the {} layers (or {} with the embedding "
                   "and the loss counted as a layer each)",
                   p, 2 * p, blocks, blocks + 2)
             : fmt::format("dualpipev with pp={}: its 2 x pp = {} stages exceed the {} layers", p, 2 * p, layers);
  }
  if (no.empty()) return {{2, account}};
  if (why->interleave.empty()) why->interleave = no;
  return {};
}

// The interleave factors of schedule s at depth p (1 for all but interleaved), each with whether the
// split counts the embedding and the loss as a layer each (p v divides blocks + 2; Megatron's
// --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split).
std::vector<std::pair<int64_t, bool>> Interleaves(const SearchOptions& o, Schedule s, int64_t p, int64_t m,
                                                  int64_t layers, int64_t blocks, Rejections* why) {
  if (s == Schedule::kDualPipeV) return DualPipeVChunks(p, m, layers, blocks, why);
  if (s != Schedule::kInterleaved) {
    // Uneven stages: also the split Megatron runs with the account-for flags, where p divides blocks + 2, not blocks.
    if (blocks > 0 && p > 1 && blocks % p != 0 && (blocks + 2) % p == 0) return {{1, false}, {1, true}};
    return {{1, false}};
  }
  std::vector<std::pair<int64_t, bool>> vs;
  if (p < 2 || m % p != 0) {
    if (why->interleave.empty() && p >= 2) {
      why->interleave = fmt::format("interleaved needs the microbatch count ({}) to be a multiple of pp={}", m, p);
    }
    return vs;
  }
  // A gpt model: Megatron's rule, p v divides the transformer blocks (or blocks + 2). Else v in 2..4 over the table's rows.
  std::vector<int64_t> tried = o.interleave;
  if (tried.empty() && blocks > 0)
    for (int64_t v = 2; v * p <= blocks + 2; ++v) tried.push_back(v);
  if (tried.empty() && blocks == 0) tried = {2, 3, 4};
  for (int64_t v : tried) {
    const bool whole = blocks > 0 && blocks % (p * v) == 0,
               account = blocks > 0 && !whole && (blocks + 2) % (p * v) == 0;
    bool ok = v >= 2 && p * v <= layers && (blocks == 0 || whole || account);
    if (ok) vs.emplace_back(v, account);
    else if (why->interleave.empty() && v >= 2 && blocks > 0 && o.interleave.size() > 0) {
      why->interleave = fmt::format(
          "interleave v={} with pp={}: pp x v must divide the {} layers (or {} with the embedding and the loss counted "
          "as a layer each)",
          v, p, blocks, blocks + 2);
    }
  }
  return vs;
}

}  // namespace

SearchSpace MakeSearchSpace(const CostSource& src, const SearchOptions& o, int64_t global_batch) {
  SearchSpace sp;
  sp.gpus = o.gpus;
  sp.global_batch = global_batch;
  sp.node = src.cluster->levels[0].size;
  sp.tp = o.tp;
  if (sp.tp.empty())
    for (int64_t t = 1; t <= sp.node; t *= 2) sp.tp.push_back(t);
  sp.microbatch = o.microbatch;
  if (sp.microbatch.empty()) {
    if (src.profile) sp.microbatch = ProfiledMicrobatches(*src.profile);
    else
      for (int64_t b = 1; b <= 64; b *= 2) sp.microbatch.push_back(b);
  }
  sp.schedules = o.schedules;
  if (sp.schedules.empty()) {
    // Transformer (gpt:) models: the synchronous schedules the engines they train on run (Megatron-LM,
    // torchtitan, DeepSpeed); PipeDream's asynchronous one changes the optimisation (stale weights)
    // and no such engine runs it, so it is searched only when named (--schedule pipedream or
    // --mode pipedream). Other models keep it: PipeDream's setting (docs/cost_model.md section 8).
    const bool llm = src.model != nullptr && src.model->is_gpt;
    sp.schedules = {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1, Schedule::kDualPipeV};
    if (!llm && CostSourceLayers(src) <= kMaxReplicatedLayers)
      sp.schedules.insert(sp.schedules.begin() + 4, Schedule::kPipeDream);
  }
  sp.replicated = !o.replication.empty() ||
                  std::find(sp.schedules.begin(), sp.schedules.end(), Schedule::kPipeDream) != sp.schedules.end();
  // MTP modules each hold a transformer block and are split like one (Megatron's pipeline layout: a unit each).
  sp.blocks = src.model != nullptr && src.model->is_gpt ? src.model->gpt.layers + src.model->gpt.mtp : 0;
  if (src.model != nullptr) {
    const std::vector<int64_t> at = PartitionCutPoints(*src.model);  // empty: any row boundary
    sp.units = at.empty() ? 0 : static_cast<int64_t>(at.size()) - 1;
  }
  sp.seq = src.model != nullptr ? SequenceLength(*src.model) : 0;
  sp.cp = o.cp;
  if (sp.cp.empty()) {
    sp.cp = {1};
    if (src.profile == nullptr && HasAttention(src.model)) {
      for (int64_t cp = 2; cp <= 16 && sp.seq / (2 * cp) >= 1024; cp *= 2) sp.cp.push_back(cp);
    }
  }
  sp.experts = ModelExperts(src.profile == nullptr ? src.model : nullptr);
  sp.ep = o.ep;
  if (sp.ep.empty()) sp.ep = sp.experts > 0 ? Divisors(sp.experts) : std::vector<int64_t>{1};
  sp.etp = o.etp;
  if (sp.etp.empty()) sp.etp = sp.experts > 0 ? std::vector<int64_t>{1, 0} : std::vector<int64_t>{1};
  sp.sp = o.sequence_parallel;
  // Default: SP on with TP for transformers (Megatron-Core's recommendation); models without
  // attention have no sequence-parallel regions.
  if (sp.sp.empty()) sp.sp = {src.profile == nullptr && HasAttention(src.model) ? 1 : 0};
  sp.ranked = o.recompute;
  if (sp.ranked.empty() && o.recompute_block != 1) {
    sp.ranked = {Recompute::kNone, Recompute::kFull};
    if (HasAttention(src.model)) sp.ranked.insert(sp.ranked.begin() + 1, Recompute::kSelective);
  }
  sp.block = sp.blocks > 0 && src.profile == nullptr &&
             (o.recompute_block == 1 || (o.recompute_block < 0 && o.recompute.empty()));
  sp.recompute = sp.ranked;
  for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
    if (sp.block && std::find(sp.recompute.begin(), sp.recompute.end(), rc) == sp.recompute.end())
      sp.recompute.push_back(rc);
  }
  // Selective recompute: the forced modules, else core_attn (Megatron's default).
  sp.selective_modules = {o.recompute_modules != 0 ? o.recompute_modules : kDefaultRecomputeModules};
  return sp;
}

std::string TpRejection(const SearchSpace& sp, const ModelSpec* model, int64_t t) {
  if (t < 1 || sp.gpus % t != 0) return fmt::format("tp={} does not divide the {} GPUs", t, sp.gpus);
  if (t > sp.node) return fmt::format("tp={} exceeds the {} GPUs of a node", t, sp.node);
  if (model && !TpDegreeValid(*model, t))
    return fmt::format("tp={} does not divide every tensor-parallel layer of {}", t, model->name);
  return "";
}

std::vector<std::pair<int64_t, int64_t>> ExpertSplits(const SearchSpace& sp, int64_t t) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t ep : sp.ep) {
    for (int64_t etp : sp.etp) {
      const std::pair<int64_t, int64_t> e{ep, etp == 0 ? t : etp};
      if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
    }
  }
  return out;
}

std::string EpRejection(const SearchSpace& sp, const ModelSpec* model, int64_t ep, int64_t etp) {
  if (ep < 1 || etp < 1) return fmt::format("ep={} etp={}: expert parallel sizes start at 1", ep, etp);
  if (sp.experts == 0) return ep == 1 && etp == 1 ? "" : fmt::format("ep={} etp={}: the model has no experts", ep, etp);
  if (sp.experts % ep != 0) return fmt::format("ep={} does not divide the {} experts", ep, sp.experts);
  if (sp.gpus % (ep * etp) != 0) return fmt::format("ep={} x etp={} does not divide the {} GPUs", ep, etp, sp.gpus);
  if (model != nullptr && etp > 1) {
    for (const auto& l : model->layers) {
      const int64_t width = l.attrs.Int("expert_ffn", 0);
      if (l.experts > 0 && width > 0 && width % etp != 0)
        return fmt::format("etp={} does not divide the expert FFN width {}", etp, width);
    }
  }
  return "";
}

std::string CpRejection(const SearchSpace& sp, const CostSource& src, int64_t cp) {
  if (cp < 1) return fmt::format("cp={}: must be at least 1", cp);
  if (cp == 1) return "";
  if (src.profile != nullptr)
    return fmt::format("cp={}: a measured profile has no context-parallel timings; plan it with --cp 1", cp);
  if (sp.seq <= 0 || sp.seq % (2 * cp) != 0) {
    return fmt::format(
        "cp={}: causal load balancing cuts the sequence ({} tokens) into 2cp = {} chunks, which must divide it; choose "
        "a cp with 2cp dividing the sequence",
        cp, sp.seq, 2 * cp);
  }
  if (sp.gpus % cp != 0) return fmt::format("cp={} does not divide the {} GPUs", cp, sp.gpus);
  if (src.model != nullptr) {
    for (const auto& l : src.model->layers) {
      if (l.attrs.String("attention", "flash") == "unfused" && HasAttention(l.kind)) {
        return fmt::format(
            "cp={}: {} has unfused attention; Megatron-Core runs context parallelism only in Transformer Engine's "
            "fused "
            "attention (its local DotProductAttention asserts context_parallel_size == 1); use attention: flash or "
            "--cp 1",
            cp, src.model->name);
      }
    }
  }
  return "";
}

std::string Rejections::Summary() const {
  std::string s;
  for (const std::string* r : {&tp, &cp, &ep, &moe_overlap, &pp, &batch, &interleave}) {
    if (!r->empty()) s += (s.empty() ? "" : "; ") + *r;
  }
  return s;
}

bool MoeOverlapRuns(const SearchOptions& o, const CostTable& table, int64_t p, int64_t v, Rejections* why) {
  if (!o.cost.moe_overlap || table.ep <= 1) return true;
  if (MegatronOverlapsMoe(p, v, table.recompute)) return true;
  if (why->moe_overlap.empty()) {
    why->moe_overlap = fmt::format(
        "--moe-overlap on: Megatron-Core overlaps the expert all-to-all only with pp 1 or the interleaved schedule "
        "(or DualPipeV's two chunks) and without full recompute (TransformerConfig's checks); pp={} v={}{} left out",
        p, v, table.recompute == Recompute::kFull ? " with full recompute" : "");
  }
  return false;
}

std::vector<Candidate> UniformCandidates(const SearchSpace& sp, const SearchOptions& o, size_t table_index,
                                         const CostTable& table, Rejections* why) {
  std::vector<Candidate> out;
  const int64_t n = sp.gpus, t = table.tp, cp = table.cp, b = table.microbatch,
                layers = sp.units > 0 ? sp.units : static_cast<int64_t>(table.rows.size());
  if (n % (t * cp) != 0) {
    if (why->cp.empty()) why->cp = fmt::format("tp={} x cp={} does not divide the {} GPUs", t, cp, n);
    return out;
  }
  const std::vector<int64_t> pps = o.pp.empty() ? Divisors(n / (t * cp)) : o.pp;
  for (int64_t p : pps) {
    if (p < 1 || p > layers || (n / (t * cp)) % p != 0) {
      if (why->pp.empty()) {
        why->pp = p > layers ? fmt::format("pp={} exceeds the {} layers", p, layers)
                             : fmt::format("pp={} does not divide the {} GPUs / (tp={} x cp={})", p, n, t, cp);
      }
      continue;
    }
    const int64_t d = n / (t * cp * p);
    if ((t * cp * d) % (table.ep * table.etp) != 0) {  // Megatron-Core's MoE parallel folding
      if (why->ep.empty()) {
        why->ep = fmt::format(
            "ep={} x etp={} does not divide tp x cp x dp = {} x {} x {} at pp={} (the expert groups are folded out of "
            "a stage's GPUs)",
            table.ep, table.etp, t, cp, d, p);
      }
      continue;
    }
    if (sp.global_batch % (b * d) != 0) {
      if (why->batch.empty()) {
        why->batch =
            fmt::format("tp={} pp={}: the global batch {} is not a multiple of microbatch {} x data-parallel {}", t, p,
                        sp.global_batch, b, d);
      }
      continue;
    }
    const int64_t m = sp.global_batch / (b * d);
    for (Schedule s : sp.schedules) {
      if (s == Schedule::kPipeDream) continue;                                  // the replicated family
      if ((s == Schedule::kZbH1 || s == Schedule::kGpipe) && p == 1) continue;  // same as 1f1b at p = 1
      for (auto [v, account] : Interleaves(o, s, p, m, layers, sp.blocks, why)) {
        if (!MoeOverlapRuns(o, table, p, v, why)) continue;
        Candidate k = MakeCandidate(table_index, t, b, p, d, m, v, s, table.recompute, cp, table.sp);
        k.account = account;
        k.ep = table.ep;
        k.etp = table.etp;
        k.recompute_modules = table.recompute_modules;
        out.push_back(k);
      }
    }
  }
  return out;
}

Candidate MakeCandidate(size_t table, int64_t t, int64_t b, int64_t p, int64_t d, int64_t m, int64_t v, Schedule s,
                        Recompute rc, int64_t cp, bool sp) {
  Candidate k;
  k.table = table;
  k.tp = t, k.microbatch_size = b, k.pp = p, k.dp = d, k.num_microbatches = m, k.interleave = v;
  k.schedule = s;
  k.recompute = rc;
  k.cp = cp;
  k.sequence_parallel = sp;
  return k;
}

}  // namespace planner
