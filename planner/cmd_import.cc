// planner import pipedream GRAPH.txt -o PROFILE.yaml
// planner import hf CONFIG.json -o MODEL.yaml [--seq N] [--global-batch N] [--name X]
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "common/log.h"
#include "common/units.h"
#include "planner/commands.h"
#include "planner/output_guard.h"
#include "spec/hf_import.h"
#include "spec/pipedream_import.h"

namespace planner {

namespace {

struct ImportArgs {
  std::string format, input, output, name;
  bool force = false;  // -o may replace a file the planner did not write
  int64_t minibatch = 0, seq = 0, global_batch = 0;
  bool seq_given = false, global_batch_given = false, minibatch_given = false;
};

Status ImportHf(const ImportArgs& a) {
  if (a.minibatch != 0) return Status::InvalidArgument("--minibatch: applies to 'import pipedream' only; remove it");
  if (a.minibatch_given) return Status::InvalidArgument("--minibatch: applies to 'import pipedream' only; remove it");
  if (a.seq_given && (a.seq < 1 || a.seq > (int64_t{1} << 24))) {
    return Status::InvalidArgument(fmt::format("--seq {}: must be between 1 and {}", a.seq, int64_t{1} << 24));
  }
  if (a.global_batch_given && (a.global_batch < 1 || a.global_batch > (int64_t{1} << 40))) {
    return Status::InvalidArgument(fmt::format("--global-batch {}: must be between 1 and 2^40", a.global_batch));
  }
  HfImportOptions o;
  o.seq = a.seq;
  o.global_batch = a.global_batch;
  o.name = a.name.empty() ? std::filesystem::path(a.output).stem().string() : a.name;
  // The name is written into the model file and every message: printable characters only.
  if (o.name.empty() || std::any_of(o.name.begin(), o.name.end(), [](char ch) {
        const auto c = static_cast<unsigned char>(ch);
        return c < 0x20 || c == 0x7f || c == '"' || c == '\\';
      }))
    return Status::InvalidArgument(fmt::format(
        "--name '{}': a model name is printable text without quotes or backslashes (it is written into the model "
        "file); choose another",
        Printable(o.name)));
  PLANNER_RETURN_IF_ERROR(CheckReplaceable("-o", a.output, OutputKind::kImportedModel, a.force));
  HfImport m;
  PLANNER_RETURN_IF_ERROR(ImportHfConfigFile(a.input, o, &m));
  PLANNER_RETURN_IF_ERROR(WriteFileAtomic(a.output, HfModelYaml(m, a.input)));
  for (const auto& n : m.notes) LogNote(n);
  LogNote(fmt::format("wrote {}: {} ({}), {} layers, seq {}, global_batch {}", a.output, m.name, m.architecture,
                      m.gpt.layers, m.gpt.seq, m.global_batch));
  return Status::OK();
}

Status ImportPipeDream(const ImportArgs& a) {
  if (a.seq_given || a.global_batch_given || !a.name.empty()) {
    return Status::InvalidArgument("--seq, --global-batch and --name: apply to 'import hf' only; remove them");
  }
  if (a.minibatch_given && (a.minibatch < 1 || a.minibatch > (int64_t{1} << 24))) {
    return Status::InvalidArgument(
        fmt::format("--minibatch {}: must be between 1 and {} (or leave it out: the Input node's size)", a.minibatch,
                    int64_t{1} << 24));
  }
  PLANNER_RETURN_IF_ERROR(CheckReplaceable("-o", a.output, OutputKind::kProfile, a.force));
  Profile p;
  PLANNER_RETURN_IF_ERROR(ImportPipeDreamFile(a.input, a.minibatch, &p));
  p.model = a.input;
  p.tool = "planner import pipedream";
  p.command = "planner import pipedream " + a.input + " -o " + a.output;
  PLANNER_RETURN_IF_ERROR(WriteFileAtomic(a.output, ProfileToYaml(p)));
  LogNote(fmt::format("wrote {}: {} layers, profiled minibatch {}", a.output, p.layers.size(), p.reference_microbatch));
  return Status::OK();
}

}  // namespace

Runner RegisterImport(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("import", "convert another tool's file: a PipeDream profile or a Hugging Face config.json");
  auto args = std::make_shared<ImportArgs>();
  cmd->add_option("format", args->format, "source format: pipedream (a profile) | hf (a model)")->required();
  cmd->add_option("input", args->input, "the file to import (PipeDream: graph.txt; hf: config.json)")->required();
  cmd->add_option("-o,--output", args->output, "file to write (pipedream: profile YAML; hf: model YAML)")->required();
  auto* mb = cmd->add_option("--minibatch", args->minibatch,
                             "pipedream: batch size the graph was profiled at (default: from the Input node)");
  auto* seq =
      cmd->add_option("--seq", args->seq, "hf: training sequence length (default: min(max_position_embeddings, 4096))");
  auto* gb =
      cmd->add_option("--global-batch", args->global_batch, "hf: sequences per iteration (default: 2^22 tokens / seq)");
  cmd->add_option("--name", args->name, "hf: model name (default: the output file's name without .yaml)");
  cmd->add_flag("--force", args->force, "let -o replace a file the planner did not write");
  return [args, seq, gb, mb]() -> Status {
    args->seq_given = seq->count() > 0;
    args->minibatch_given = mb->count() > 0;
    args->global_batch_given = gb->count() > 0;
    if (args->format == "hf") return ImportHf(*args);
    if (args->format == "pipedream") return ImportPipeDream(*args);
    return Status::InvalidArgument(
        fmt::format("unknown import format '{}'; the supported formats are 'pipedream' and 'hf'", args->format));
  };
}

}  // namespace planner
