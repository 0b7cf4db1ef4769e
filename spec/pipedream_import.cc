#include "spec/pipedream_import.h"

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

}  // namespace

Status ImportPipeDreamGraph(const std::string& path, const std::string& text, int64_t minibatch, Profile* out) {
  Profile p;
  p.path = path;
  p.digest = DigestHex(text);
  p.backend = "pipedream-import";
  p.dtype = "fp32";
  p.device = "unknown GPU (PipeDream profile; the paper used V100s)";
  std::map<std::string, size_t> index;
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
      p.layers[b->second].inputs.push_back(parts[0]);
      continue;
    }
    if (edges_started) return err("a node line after the edge lines; node lines must come first");
    auto parts = SplitOn(Trim(line), " -- ");
    if (parts.size() < 3 || parts.size() > 4) {
      return err("a node line must read '<id> -- <desc> -- forward_compute_time=..., backward_compute_time=..., activation_size=..., parameter_size=...'");
    }
    ProfileLayer l;
    l.name = parts[0];
    l.desc = parts[1];
    if (index.count(l.name)) return err("duplicate node id '" + l.name + "'");
    auto fields = SplitOn(parts[2], ", ");
    if (fields.size() != 4) return err("expected 4 comma-separated metadata fields, got " + std::to_string(fields.size()));
    const char* names[4] = {"forward_compute_time", "backward_compute_time", "activation_size", "parameter_size"};
    double values[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; ++k) {
      auto kv = SplitOn(fields[k], "=");
      if (kv.size() != 2 || Trim(kv[0]) != names[k]) return err(std::string("expected '") + names[k] + "=<number>', got '" + fields[k] + "'");
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
    p.layers.push_back(std::move(l));
  }
  if (p.layers.empty()) return Status::InvalidArgument(path + ": no node lines found; is this a PipeDream graph.txt?");
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
  PLANNER_RETURN_IF_ERROR(ParseProfile(path, ProfileToYaml(p), &checked));
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
