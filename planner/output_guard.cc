#include "planner/output_guard.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "common/file_writer.h"
#include "common/units.h"
#include "planner/html_report.h"
#include "spec/calibration.h"

namespace planner {

namespace {

const char* KindName(OutputKind k) {
  switch (k) {
    case OutputKind::kPlan: return "plan";
    case OutputKind::kProfile: return "profile";
    case OutputKind::kImportedModel: return "model file";
    case OutputKind::kSvg: return "timeline";
    case OutputKind::kCalibration: return "calibration";
    case OutputKind::kKernelTable: return "measured kernel table";
    case OutputKind::kHtml: return "HTML report";
  }
  return "file";
}

// The first bytes of the file (enough for the headers below).
std::string Head(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string s(4096, '\0');
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

// Whether `head` starts as the planner writes `kind`: PlanToYaml, ProfileToYaml, HfModelYaml and
// RenderTimelineSvg / RenderEventsSvg's first lines.
bool Written(OutputKind kind, const std::string& head) {
  const std::string first = head.substr(0, head.find('\n'));
  switch (kind) {
    case OutputKind::kPlan: return head.rfind("format_version: 1\nmode: ", 0) == 0;
    case OutputKind::kProfile: return head.rfind("format_version: 1\nmodel: ", 0) == 0;
    case OutputKind::kImportedModel:
      return first.find("imported by `planner import hf`") != std::string::npos ||
             head.rfind("format_version: 1\nmodel: ", 0) == 0;  // import pipedream writes a profile
    case OutputKind::kCalibration: return first == kCalibrationHeader;
    case OutputKind::kKernelTable: return first == kMeasuredKernelsHeader;
    case OutputKind::kHtml: return head.rfind(kHtmlHeader, 0) == 0;
    case OutputKind::kSvg:
      return first.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", 0) == 0 &&
             first.find("font-family=\"monospace\"") != std::string::npos;
  }
  return false;
}

}  // namespace

Status CheckReplaceable(const std::string& flag, const std::string& path, OutputKind kind, bool force) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  // Refused before any work (a solve, a run): the directory it would go to must be there.
  if (ec || !fs::exists(st)) return CheckOutputDirectory(path, flag + " " + Printable(path));
  if (fs::is_symlink(st)) {
    if (force) return Status::OK();  // replaced by a file (the rename never writes through the link)
    return Status::InvalidArgument(fmt::format(
        "{} {}: is a symbolic link; the planner replaces only files it wrote: choose another path or pass --force "
        "(the link itself is replaced, never what it points to)",
        flag, Printable(path)));
  }
  if (!fs::is_regular_file(st)) return Status::OK();  // the writer refuses it in its own words (WriteFileAtomic)
  if (force || Written(kind, Head(path))) return Status::OK();
  return Status::InvalidArgument(fmt::format(
      "{} {}: exists and is not a {} the planner wrote; it is kept: choose another path, move it, or pass --force to "
      "replace it",
      flag, Printable(path), KindName(kind)));
}

}  // namespace planner
