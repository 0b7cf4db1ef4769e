#include "codegen/output_dir.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "codegen/codegen.h"
#include "common/digest.h"
#include "common/file_writer.h"
#include "spec/yaml_reader.h"

namespace planner {
namespace {

namespace fs = std::filesystem;

constexpr const char* kHeader =
    "# planner codegen manifest, format 1: the files codegen wrote in this directory, each with its content digest\n"
    "# (FNV-1a 64). A later codegen replaces or removes only these files, and only while their content is unchanged.\n";

// A relative path codegen may own: no absolute path, no empty, "." or ".." component.
bool SafeRelative(const std::string& rel) {
  if (rel.empty() || rel.front() == '/' || rel.back() == '/') return false;
  size_t start = 0;
  while (start <= rel.size()) {
    const size_t end = std::min(rel.find('/', start), rel.size());
    const std::string part = rel.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

// The first component of dir/rel below dir that is a symbolic link ("" when none is): codegen never
// writes or removes through one (it may point out of the directory).
std::string LinkOnPath(const std::string& dir, const std::string& rel) {
  fs::path p = dir;
  for (const auto& part : fs::path(rel)) {
    p /= part;
    std::error_code ec;
    if (fs::is_symlink(fs::symlink_status(p, ec))) return p.string();
  }
  return "";
}

Status ReadManifest(const std::string& dir, std::map<std::string, std::string>* owned) {
  const fs::path path = fs::path(dir) / kCodegenManifest;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return Status::OK();
  if (!fs::is_regular_file(fs::symlink_status(path, ec))) {
    return Status::InvalidArgument(
        fmt::format("{}: not a regular file; remove it (codegen then refuses to overwrite files it did not record) "
                    "or write elsewhere",
                    path.string()));
  }
  std::string text;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(path.string(), &text));
  std::vector<std::pair<std::string, std::string>> entries;
  PLANNER_RETURN_IF_ERROR(ParseManifest(path.string(), text, &entries));
  for (auto& [digest, rel] : entries) (*owned)[rel] = digest;
  return Status::OK();
}

// Whether codegen may write `rel`: absent, ours and unchanged, already the same content, or --force.
Status CheckWritable(const std::string& dir, const std::string& rel, const std::string& text,
                     const std::map<std::string, std::string>& owned, bool force) {
  const fs::path path = fs::path(dir) / rel;
  if (const std::string link = LinkOnPath(dir, rel); !link.empty() && (link != path.string() || !force)) {
    return Status::InvalidArgument(
        fmt::format("{}: a symbolic link; codegen writes only real files and folders inside {} (remove the link{} or "
                    "write elsewhere)",
                    link, dir, link == path.string() ? ", pass --force to replace it" : ""));
  }
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (!fs::exists(st) || fs::is_symlink(st)) return Status::OK();
  if (!fs::is_regular_file(st)) {
    return Status::InvalidArgument(fmt::format(
        "{}: exists and is not a regular file; codegen would write its {} there (move it or write elsewhere)",
        path.string(), rel));
  }
  std::string now;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(path.string(), &now));
  const auto it = owned.find(rel);
  if (now == text || force || (it != owned.end() && it->second == DigestHex(now))) return Status::OK();
  return Status::InvalidArgument(fmt::format(
      "{}: {}; codegen does not overwrite it (move it, write elsewhere, or pass --force to replace it)", path.string(),
      it == owned.end() ? "not written by codegen (not in " + std::string(kCodegenManifest) + ")"
                        : "changed since codegen wrote it"));
}

// Files of the old manifest not written now: those of the targets written now (a refusal replaced by
// the export, or the reverse) removed while unchanged; the other targets' kept in the manifest while
// unchanged (*kept: digest, path); a changed one is the user's now: kept, named, and left out of it.
Status RemoveStale(const std::string& dir, const std::map<std::string, std::string>& owned,
                   const std::vector<std::pair<std::string, std::string>>& files,
                   const std::vector<std::string>& targets, std::vector<std::pair<std::string, std::string>>* kept,
                   std::vector<std::string>* notes) {
  for (const auto& [rel, digest] : owned) {
    if (std::any_of(files.begin(), files.end(), [&](const auto& f) { return f.first == rel; })) continue;
    const fs::path path = fs::path(dir) / rel;
    std::error_code ec;
    if (!LinkOnPath(dir, rel).empty()) {
      notes->push_back(
          fmt::format("kept {}: a symbolic link lies on its path (codegen does not follow links)", path.string()));
      continue;
    }
    if (!fs::is_regular_file(fs::symlink_status(path, ec))) continue;
    std::string now;
    PLANNER_RETURN_IF_ERROR(ReadTextFile(path.string(), &now));
    if (DigestHex(now) != digest) {
      notes->push_back(
          fmt::format("kept {}: changed since codegen wrote it, and this plan does not write it", path.string()));
      continue;
    }
    if (std::none_of(targets.begin(), targets.end(), [&rel](const std::string& t) { return ExportOwnsFile(t, rel); })) {
      kept->emplace_back(digest, rel);  // another target's export, not asked for now: left as it is
      continue;
    }
    if (!fs::remove(path, ec) || ec) {
      return Status::Unavailable(fmt::format("{}: cannot remove the earlier export ({}); remove it or write elsewhere",
                                             path.string(), ec.message()));
    }
  }
  return Status::OK();
}

// A directory written before the manifest: files an export target owns by name that this codegen
// neither writes nor can prove it wrote are left, and named.
void NoteUnowned(const std::string& dir, const std::vector<std::string>& targets,
                 const std::vector<std::pair<std::string, std::string>>& files, std::vector<std::string>* notes) {
  std::error_code ec;
  for (const std::string& sub : ExportSubdirectories()) {
    const fs::path d = fs::path(dir) / sub;
    if (!fs::is_directory(fs::symlink_status(d, ec))) continue;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      const std::string rel = sub.empty() ? e.path().filename().string() : sub + "/" + e.path().filename().string();
      const bool written = std::any_of(files.begin(), files.end(), [&rel](const auto& f) { return f.first == rel; });
      const bool owned =
          std::any_of(targets.begin(), targets.end(), [&rel](const std::string& t) { return ExportOwnsFile(t, rel); });
      if (owned && !written && e.is_regular_file(ec)) {
        notes->push_back(
            fmt::format("left {}: not in {} (an earlier planner's export, or yours); this plan does not write it",
                        e.path().string(), kCodegenManifest));
      }
    }
  }
}

}  // namespace

std::string ManifestText(const std::vector<std::pair<std::string, std::string>>& files,
                         const std::vector<std::pair<std::string, std::string>>& kept) {
  std::map<std::string, std::string> entries;  // path -> digest, in path order
  for (const auto& [digest, rel] : kept) entries[rel] = digest;
  for (const auto& [rel, text] : files) entries[rel] = DigestHex(text);
  std::string o = kHeader;
  for (const auto& [rel, digest] : entries) o += fmt::format("{}  {}\n", digest, rel);
  return o;
}

Status ParseManifest(const std::string& path, const std::string& text,
                     std::vector<std::pair<std::string, std::string>>* entries) {
  size_t start = 0;
  for (int line = 1; start < text.size(); ++line) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string s = text.substr(start, end - start);
    start = end + 1;
    if (s.empty() || s.front() == '#') continue;
    const bool hex = s.size() > 18 && std::all_of(s.begin(), s.begin() + 16,
                                                  [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
    const std::string rel = hex ? s.substr(18) : "";
    if (!hex || s.substr(16, 2) != "  " || !SafeRelative(rel)) {
      return Status::InvalidArgument(fmt::format(
          "{}:{}: not a manifest entry ('<16 hex digits>  <relative path>'); the file is damaged: remove it "
          "and codegen again with --force",
          path, line));
    }
    entries->emplace_back(s.substr(0, 16), rel);
  }
  return Status::OK();
}

Status WriteOwnedFiles(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files,
                       const std::vector<std::string>& targets, bool force, std::vector<std::string>* notes) {
  PLANNER_RETURN_IF_ERROR(MakeDirectories(dir));
  std::map<std::string, std::string> owned;
  PLANNER_RETURN_IF_ERROR(ReadManifest(dir, &owned));
  for (const auto& [rel, text] : files) {
    if (!SafeRelative(rel)) return Status::Internal(fmt::format("codegen: unsafe output path '{}'", rel));
    PLANNER_RETURN_IF_ERROR(CheckWritable(dir, rel, text, owned, force));
  }
  std::vector<std::pair<std::string, std::string>> kept;
  PLANNER_RETURN_IF_ERROR(RemoveStale(dir, owned, files, targets, &kept, notes));
  if (owned.empty()) NoteUnowned(dir, targets, files, notes);
  for (const auto& [rel, text] : files) {
    const fs::path path = fs::path(dir) / rel;
    if (rel.find('/') != std::string::npos) PLANNER_RETURN_IF_ERROR(MakeDirectories(path.parent_path().string()));
    const bool script = rel.size() > 3 && rel.substr(rel.size() - 3) == ".sh";
    PLANNER_RETURN_IF_ERROR(WriteFileAtomic(path.string(), text, script ? 0755 : 0644));
  }
  return WriteFileAtomic((fs::path(dir) / kCodegenManifest).string(), ManifestText(files, kept), 0644);
}

}  // namespace planner
