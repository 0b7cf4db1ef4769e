// The launch directory's ownership (docs/hardening.md, "Outputs the planner owns"): codegen records
// every file it writes, with its content digest, in DIR/codegen.manifest; a later codegen replaces or
// removes only files of that manifest whose content is still what it wrote, never follows a symbolic
// link inside DIR, and refuses to overwrite a file it did not write unless `force` is given.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace planner {

inline constexpr const char* kCodegenManifest = "codegen.manifest";

// Writes `files` (relative path, content) into `dir` under the rules above and the new manifest
// after them. Files the old manifest lists for the `targets` written now that this codegen does not
// write are removed while unchanged (other targets' files stay, still owned); a changed one is kept
// and named in `notes`, as are files a pre-manifest codegen may have written (an export target's
// prefix) that are left in place.
Status WriteOwnedFiles(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files,
                       const std::vector<std::string>& targets, bool force, std::vector<std::string>* notes);

// The manifest's text for `files` (path, content) and `kept` earlier entries (digest, path), in path
// order, and its parse (entries: digest, relative path); a damaged manifest names its line and the fix.
std::string ManifestText(const std::vector<std::pair<std::string, std::string>>& files,
                         const std::vector<std::pair<std::string, std::string>>& kept);
Status ParseManifest(const std::string& path, const std::string& text,
                     std::vector<std::pair<std::string, std::string>>* entries);

}  // namespace planner
