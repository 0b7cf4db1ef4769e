// A hand-built MoE model for the expert-parallelism tests: a gpt: template whose blocks after the
// first `dense` become moe_block with the Layer MoE fields set as the model side fills them
// (the MoE contract of spec/layer.h), so the solver's tests need no MoE model file.
#pragma once

#include <cstdint>

#include "dp_solver/search.h"
#include "spec/model_spec.h"
#include "tests/test_util.h"

namespace planner::testing {

inline constexpr double kH = 1024, kSeq = 2048, kDt = 2;

// A Llama-like bf16 gpt of `layers` blocks whose blocks after the first `dense` become moe_block:
// E routed SwiGLU experts of width fe (top_k per token) on top of the block's own costs (its MLP
// standing for a shared expert), with the MoE fields as the model side fills them (spec/layer.h).
inline ModelSpec MoeModel(int64_t layers, int64_t experts, int64_t top_k, int64_t fe, int64_t dense,
                          int64_t batch = 64) {
  GptConfig g;
  g.layers = layers;
  g.hidden = static_cast<int64_t>(kH);
  g.heads = 16;
  g.kv_heads = 8;
  g.seq = static_cast<int64_t>(kSeq);
  g.vocab = 32000;
  g.ffn = 2816;
  g.ffn_act = "swiglu";
  g.norm = "rmsnorm";
  g.position = "rope";
  g.bias = false;
  g.tie_embeddings = false;
  g.dropout = 0;
  ModelSpec m;
  REQUIRE_OK(BuildGptModel(g, DType::kBf16, &m));
  m.name = "moe-test";
  m.global_batch = batch;
  int64_t seen = 0;
  for (Layer& l : m.layers) {
    if (l.kind != LayerKind::kTransformerBlock || seen++ < dense) continue;
    const double e = static_cast<double>(experts), k = static_cast<double>(top_k), f = static_cast<double>(fe);
    l.kind = LayerKind::kMoeBlock;
    l.experts = experts;
    l.top_k = top_k;
    l.attrs.ints["experts"] = experts;
    l.attrs.ints["top_k"] = top_k;
    l.attrs.ints["expert_ffn"] = fe;
    l.expert_params = e * 3 * kH * f;
    l.expert_fwd_flops = l.expert_bwd_input_flops = l.expert_bwd_weight_flops = kSeq * k * 6 * kH * f;
    l.expert_stash_bytes = kDt * kSeq * k * (kH + 3 * f);
    l.moe_dispatch_bytes = kSeq * k * kH * kDt;
    l.params += l.expert_params;
    l.fwd_flops += l.expert_fwd_flops;
    l.bwd_input_flops += l.expert_bwd_input_flops;
    l.bwd_weight_flops += l.expert_bwd_weight_flops;
    l.stash_bytes += l.expert_stash_bytes;
    l.stash_bytes_selective += l.expert_stash_bytes;
  }
  return m;
}

// DeepSeek-V3's published layout (report arXiv:2412.19437 section 3.2): 2048 GPUs, PP16 with
// DualPipe (dualpipev here), EP64, no TP, no CP, microbatch 1; the tests force it with these options.
inline SearchOptions DeepSeekV3PublishedLayout() {
  SearchOptions o;
  o.gpus = 2048;
  o.pp = {16};
  o.tp = {1};
  o.cp = {1};
  o.ep = {64};
  o.etp = {1};
  o.microbatch = {1};
  o.schedules = {Schedule::kDualPipeV};
  return o;
}

}  // namespace planner::testing
