// Megatron-LM's --pipeline-model-parallel-layout as an input (megatron/core/transformer/
// pipeline_parallel_layer_layout.py): the model's layers placed on pipeline chunks by hand, uneven
// stages, any virtual size, the embedding and the loss where the user puts them (docs/cost_model.md
// section 5, "--pipeline-model-parallel-layout"). Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "spec/model_spec.h"

namespace planner {

// A layout resolved on a model: chunk q (q = virtual stage x pp + pipeline rank, Megatron's order) holds
// model.layers[cuts[q], cuts[q + 1]).
struct PipelineLayout {
  std::vector<std::string> chunks;  // expanded, one string of E / t / m / L per chunk
  int64_t pp = 1, vp = 1;           // pipeline ranks and chunks per rank (chunks = pp x vp)
  std::vector<int64_t> cuts;        // pp x vp + 1 row boundaries in model.layers
};

// The layout's symbol of a layer: E (embedding), t (transformer or MoE block), m (MTP module), L (the
// loss); 0 for a layer that joins the next symbol's chunk (the final norm and the output layer join the
// loss, as Megatron's L holds them); '?' for a layer Megatron's layouts cannot place.
char PipelineLayoutSymbol(LayerKind kind);

// Expands Megatron's string: commas dropped, "(...)*n" then "x*n" repeated, split at '|'. InvalidArgument
// naming the character or the repeat (expanded text capped at 1 000 000 characters).
Status ExpandPipelineLayout(const std::string& text, std::vector<std::string>* chunks);

// Checks the layout against the model and pp (a chunk count that is a multiple of pp, the model's
// embedding, blocks, MTP modules and loss in order, no empty chunk) and fills *out. InvalidArgument naming
// what differs and the fix, "--pipeline-model-parallel-layout: ..." first.
Status ResolvePipelineLayout(const std::string& text, const ModelSpec& model, int64_t pp, PipelineLayout* out);

}  // namespace planner
