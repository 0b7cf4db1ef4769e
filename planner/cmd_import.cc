// planner import pipedream GRAPH.txt -o PROFILE.yaml
#include <fmt/format.h>

#include "common/log.h"
#include "planner/commands.h"
#include "spec/pipedream_import.h"

namespace planner {

Runner RegisterImport(CLI::App& app) {
  auto* cmd = app.add_subcommand("import", "convert another tool's profile into a planner profile");
  struct Args { std::string format, input, output; int64_t minibatch = 0; };
  auto args = std::make_shared<Args>();
  cmd->add_option("format", args->format, "source format (pipedream)")->required();
  cmd->add_option("input", args->input, "the file to import (PipeDream: graph.txt)")->required();
  cmd->add_option("-o,--output", args->output, "profile to write (YAML)")->required();
  cmd->add_option("--minibatch", args->minibatch, "batch size the graph was profiled at (default: from the Input node)");
  return [args]() -> Status {
    if (args->format != "pipedream") {
      return Status::InvalidArgument(fmt::format("unknown import format '{}'; the supported format is 'pipedream'", args->format));
    }
    Profile p;
    PLANNER_RETURN_IF_ERROR(ImportPipeDreamFile(args->input, args->minibatch, &p));
    p.model = args->input;
    p.tool = "planner import pipedream";
    p.command = "planner import pipedream " + args->input + " -o " + args->output;
    PLANNER_RETURN_IF_ERROR(WriteFileAtomic(args->output, ProfileToYaml(p)));
    LogNote(fmt::format("wrote {}: {} layers, profiled minibatch {}", args->output, p.layers.size(), p.reference_microbatch));
    return Status::OK();
  };
}

}  // namespace planner
