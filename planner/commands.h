// The subcommands of the planner executable. Each Register* adds its
// CLI11 subcommand and returns the function that runs it once parsed.
// main.cc turns the returned Status into "planner: error: ..." and an exit code.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "common/file_writer.h"
#include "common/status.h"

namespace planner {

using Runner = std::function<Status()>;
Runner RegisterSolve(CLI::App& app);
Runner RegisterInspect(CLI::App& app);
Runner RegisterImport(CLI::App& app);
Runner RegisterProfile(CLI::App& app, int argc, char** argv);
// `self`: this executable's path, for the scripts codegen writes.
Runner RegisterCodegen(CLI::App& app, const std::string& self);
Runner RegisterRun(CLI::App& app);
Runner RegisterCalibrate(CLI::App& app);

struct Calibration;
// The calibration's table (planner calibrate prints it; planner inspect CALIBRATION too).
std::string RenderCalibration(const Calibration& c);

}  // namespace planner
