// What a planner command may replace with its -o / --svg output (docs/hardening.md, "Outputs the planner
// owns"): nothing, or a file of the same kind the planner writes (a plan over a plan, a profile over a
// profile, an imported model over an imported model, a timeline over a timeline), unless --force. A user's
// model file, notes or image at that path is refused, exit 2, naming it and the fix.
#pragma once

#include <string>

#include "common/status.h"

namespace planner {

enum class OutputKind { kPlan, kProfile, kImportedModel, kSvg, kCalibration, kKernelTable, kHtml };

// OK when `path` does not exist, or holds what the planner writes as `kind`, or `force`; else
// InvalidArgument "FLAG PATH: exists and is not a ... the planner wrote; ...". A directory or another
// non-regular file is left to the writer, which refuses it (WriteFileAtomic).
Status CheckReplaceable(const std::string& flag, const std::string& path, OutputKind kind, bool force);

}  // namespace planner
