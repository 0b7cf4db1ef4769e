// Hugging Face config.json -> model.yaml (`planner import hf`): the dense
// decoder architectures Llama, Mistral, Qwen2, Qwen3, GPT-2, GPT-NeoX and
// Nemotron and the MoE ones Mixtral, Qwen3-MoE and DeepSeek-V3 (MLA, MTP)
// mapped onto the `gpt:` template (docs/formats.md, "planner import
// hf"). config.json is read with yaml-cpp (JSON is YAML 1.2), so errors name
// the file and line like every other reader. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "spec/model_spec.h"

namespace planner {

// The training run, which a config.json does not describe.
struct HfImportOptions {
  int64_t seq = 0;  // training sequence length; 0: min(max_position_embeddings, 4096)
  int64_t global_batch =
      0;             // sequences per iteration; 0: 2^22 tokens / seq (4M tokens, Llama 2 and 3's batch), at least 1
  std::string name;  // model name written to the file; "" keeps HfImport::name as given by the caller
};

struct HfImport {
  std::string architecture;    // e.g. "LlamaForCausalLM"
  GptConfig gpt;               // the template the config maps onto
  DType dtype = DType::kBf16;  // from torch_dtype (bf16 when absent)
  int64_t global_batch = 0;
  int64_t max_positions = 0;  // the config's max_position_embeddings (GPT-2: n_positions)
  std::string name;
  std::vector<std::string> notes;  // what was defaulted or left out, one sentence each
};

// The architectures `planner import hf` reads, in the order error messages list them.
const std::vector<std::string>& HfArchitectures();

// Reads a config.json's text; `path` names it in messages. InvalidArgument
// "path:line: field 'x': ...; fix" for an unknown architecture (naming the
// supported list), a missing or malformed field, --seq above the model's
// limit, or a shape the planner cannot cost.
Status ImportHfConfig(const std::string& path, const std::string& text, const HfImportOptions& options, HfImport* out);
Status ImportHfConfigFile(const std::string& path, const HfImportOptions& options, HfImport* out);

// The model file for an import: a header comment naming the source and the
// notes, then format_version, name, precision, global_batch and gpt:.
std::string HfModelYaml(const HfImport& imported, const std::string& source_path);

}  // namespace planner
