#include "spec/pipedream_import.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "common/digest.h"
#include "spec/yaml_reader.h"

namespace planner {

namespace {

std::vector<std::string> SplitOn(const std::string& s, const std::string& sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    if (pos == std::string::npos) {
      parts.push_back(s.substr(start));
      return parts;
    }
    parts.push_back(s.substr(start, pos - start));
    start = pos + sep.size();
  }
}

std::string Trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

bool ParseNumber(const std::string& s, double* out) {
  std::string t = Trim(s);
  if (t.empty()) return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || errno == ERANGE || !std::isfinite(v) || v < 0) return false;
  *out = v;
  return true;
}

// PipeDream's profiler writes node lines, then one edge line per edge, and no line after: a file
// cut at a line boundary loses edges, leaving a node other than a source (an Input, or a
// recurrent model's initial `hidden` state) with no producer, or, cut among the node lines, no
// edge at all. Such a fragment would otherwise plan as a smaller model.
Status CheckGraphComplete(const std::string& path, const Profile& p, const std::vector<int>& node_lines,
                          bool has_edges) {
  if (p.layers.size() > 1 && !has_edges) {
    return Status::InvalidArgument(
        fmt::format("{}:{}: {} node lines and no edge line (a tab, '<src> -- <dst>'); the file looks truncated: "
                    "give the whole graph.txt",
                    path, node_lines.back(), p.layers.size()));
  }
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const ProfileLayer& l = p.layers[i];
    // PipeDream's sources are its Input nodes and, in recurrent models (GNMT), their initial `hidden` state.
    if (l.inputs.empty() && l.desc.rfind("Input", 0) != 0 && l.desc != "hidden") {
      return Status::InvalidArgument(
          fmt::format("{}:{}: node '{}' ({}) has no incoming edge and is not an Input node; the file looks "
                      "truncated (edge lines missing): give the whole graph.txt",
                      path, node_lines[i], l.name, l.desc));
    }
  }
  return Status::OK();
}

}  // namespace

Status ImportPipeDreamGraph(const std::string& path, const std::string& text, int64_t minibatch, Profile* out) {
  Profile p;
  p.path = path;
  p.digest = DigestHex(text);
  p.backend = "pipedream-import";
  p.dtype = DType::kFp32;
  p.device = "unknown GPU (PipeDream profile; the paper used V100s)";
  std::map<std::string, size_t> index;
  std::vector<int> node_lines;  // graph.txt's line of every node: errors cite graph.txt, never the YAML made from it
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  bool edges_started = false;
  auto err = [&](const std::string& what) {
    return Status::InvalidArgument(fmt::format("{}:{}: {}", path, line_no, what));
  };
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (Trim(line).empty()) continue;
    if (line[0] == '\t') {
      edges_started = true;
      auto parts = SplitOn(Trim(line), " -- ");
      if (parts.size() != 2) return err("an edge line must read '<src> -- <dst>' after a tab");
      auto a = index.find(parts[0]), b = index.find(parts[1]);
      if (a == index.end()) return err("edge from unknown node '" + parts[0] + "'; node lines must come first");
      if (b == index.end()) return err("edge to unknown node '" + parts[1] + "'; node lines must come first");
      if (std::find(p.layers[b->second].inputs.begin(), p.layers[b->second].inputs.end(), parts[0]) !=
          p.layers[b->second].inputs.end()) {
        return err("edge '" + parts[0] + " -- " + parts[1] + "' is listed twice; keep one");
      }
      p.layers[b->second].inputs.push_back(parts[0]);
      continue;
    }
    if (edges_started) return err("a node line after the edge lines; node lines must come first");
    auto parts = SplitOn(Trim(line), " -- ");
    if (parts.size() < 3 || parts.size() > 4) {
      return err(
          "a node line must read '<id> -- <desc> -- forward_compute_time=..., backward_compute_time=..., "
          "activation_size=..., parameter_size=...'");
    }
    ProfileLayer l;
    l.name = parts[0];
    l.desc = parts[1];
    if (index.count(l.name)) return err("duplicate node id '" + l.name + "'");
    auto fields = SplitOn(parts[2], ", ");
    if (fields.size() != 4)
      return err("expected 4 comma-separated metadata fields, got " + std::to_string(fields.size()));
    const char* names[4] = {"forward_compute_time", "backward_compute_time", "activation_size", "parameter_size"};
    double values[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; ++k) {
      auto kv = SplitOn(fields[k], "=");
      if (kv.size() != 2 || Trim(kv[0]) != names[k])
        return err(std::string("expected '") + names[k] + "=<number>', got '" + fields[k] + "'");
      std::string v = Trim(kv[1]);
      if (!v.empty() && v.front() == '[') {
        if (v.back() != ']') return err(std::string("unterminated list in ") + names[k]);
        double sum = 0;
        for (const auto& item : SplitOn(v.substr(1, v.size() - 2), "; ")) {
          double x = 0;
          if (!ParseNumber(item, &x)) return err(std::string("bad number '") + item + "' in " + names[k]);
          sum += x;
        }
        values[k] = sum;
      } else if (!ParseNumber(v, &values[k])) {
        return err(std::string("bad number '") + v + "' in " + names[k] + "; expected a non-negative number");
      }
    }
    ProfileTiming t;
    t.forward_s = values[0] / 1000.0;
    t.backward_s = values[1] / 1000.0;
    l.output_bytes = values[2];
    l.stash_bytes = values[2];
    l.params_bytes = values[3];
    l.timings.push_back(t);
    index[l.name] = p.layers.size();
    node_lines.push_back(line_no);
    p.layers.push_back(std::move(l));
  }
  if (p.layers.empty()) return Status::InvalidArgument(path + ": no node lines found; is this a PipeDream graph.txt?");
  PLANNER_RETURN_IF_ERROR(CheckGraphComplete(path, p, node_lines, edges_started));
  if (const auto cycle = FindInputCycle(p.layers, index)) {  // a cycle is reported at graph.txt's line of a node on it
    const auto [u, v] = *cycle;
    return Status::InvalidArgument(
        fmt::format("{}:{}: node '{}' is on a cycle of edges (through '{}'); the edges must form a DAG", path,
                    node_lines[u], p.layers[u].name, p.layers[v].name));
  }
  if (minibatch <= 0) {
    minibatch = 1;
    for (const auto& l : p.layers) {
      double images = l.output_bytes / (4.0 * 3 * 224 * 224);
      if (l.desc.rfind("Input", 0) == 0 && images >= 1 && images == std::floor(images)) {
        minibatch = static_cast<int64_t>(images);
        break;
      }
    }
  }
  p.reference_microbatch = minibatch;
  for (auto& l : p.layers) l.timings[0].microbatch = minibatch;
  // Cycle check and input validation via the common reader.
  Profile checked;
  PLANNER_RETURN_IF_ERROR(ParseProfile(path + " (as a profile)", ProfileToYaml(p), &checked));
  checked.path = path;
  checked.digest = p.digest;
  *out = std::move(checked);
  return Status::OK();
}

Status ImportPipeDreamFile(const std::string& path, int64_t minibatch, Profile* out) {
  std::string text;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(path, &text));
  return ImportPipeDreamGraph(path, text, minibatch, out);
}

}  // namespace planner
