// Fuzz target for every reader of user files: the first byte picks the
// reader (model, cluster, profile, plan, PipeDream graph, launch plan, Hugging
// Face config.json), the rest is the file text. An imported config.json's model
// file must read back as a model with the same template (else abort). A successful model parse also builds its analytic cost table;
// a parsed plan or launch plan is written back and re-read, and the second
// serialization must equal the first (else abort: a crash to libFuzzer).
//
// Built two ways:
//  - with clang and -fsanitize=fuzzer,address,undefined by tests/fuzz/run_fuzz.sh
//    (PLANNER_LIBFUZZER defined): libFuzzer drives it;
//  - by Meson as the `fuzz_corpus` test: main() replays every file of
//    tests/fuzz/corpus and tests/fuzz/regressions (crashers found earlier).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "dp_solver/cost_model.h"
#include "spec/cluster_spec.h"
#include "spec/hf_import.h"
#include "spec/model_spec.h"
#include "spec/launch_plan.h"
#include "spec/pipedream_import.h"
#include "spec/plan.h"
#include "spec/profile.h"

namespace {

// A round trip that loses or changes something is a bug: print both texts and
// abort, which libFuzzer reports as a crash (and saves the input) and which
// fails the `fuzz_corpus` replay.
[[noreturn]] void RoundTripFailed(const char* what, const std::string& why, const std::string& first,
                                  const std::string& second) {
  std::fprintf(stderr, "%s round trip: %s\n--- first serialization ---\n%s\n--- second ---\n%s\n", what, why.c_str(),
               first.c_str(), second.c_str());
  std::abort();
}

bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += n;
  }
  return true;
}

void RunOne(const uint8_t* data, size_t size) {
  using namespace planner;
  if (size < 1) return;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 7) {
    case 0: {
      ModelSpec m;
      if (ParseModelSpec("fuzz.yaml", text, &m).ok() && m.layers.size() < 4096) {
        ClusterSpec c;
        c.levels = {TopologyLevel{"node", 8, 100, 100, 1, {}, {}, {}, {}, {}}};
        c.peak_tflops = {{"fp16", 100}, {"bf16", 100}, {"fp32", 20}};
        c.hbm_bandwidth_GBps = 1000;
        CostSource src;
        src.model = &m;
        src.cluster = &c;
        CostTable t;
        (void)BuildCostTable(src, 1, 1, Recompute::kNone, CostOptions{}, &t);
      }
      break;
    }
    case 1: {
      ClusterSpec c;
      (void)ParseClusterSpec("fuzz.yaml", text, &c);
      break;
    }
    case 2: {
      Profile p;
      (void)ParseProfile("fuzz.yaml", text, &p);
      break;
    }
    case 3: {
      Plan p;
      if (ParsePlan("fuzz.yaml", text, &p).ok()) {
        // Round trip: what planner writes, planner reads back to the same plan.
        const std::string first = PlanToYaml(p);
        Plan q;
        const Status again = ParsePlan("fuzz2.yaml", first, &q);
        if (!again.ok()) RoundTripFailed("plan", "re-parse failed: " + again.ToString(), first, "");
        const std::string second = PlanToYaml(q);
        if (second != first) RoundTripFailed("plan", "YAML differs after parse -> serialize -> parse", first, second);
        // The plan read back equals the plan read (all its fields, as JSON), when the input
        // is valid UTF-8: yaml-cpp writes invalid bytes in strings as U+FFFD.
        if (ValidUtf8(text) && PlanToJson(q) != PlanToJson(p)) {
          RoundTripFailed("plan", "the plan read back differs from the plan read (JSON)", PlanToJson(p), PlanToJson(q));
        }
      }
      break;
    }
    case 4: {
      Profile p;
      (void)ImportPipeDreamGraph("graph.txt", text, 1, &p);
      break;
    }
    case 6: {
      HfImport h;
      HfImportOptions o;
      o.name = "fuzz";
      if (ImportHfConfig("config.json", text, o, &h).ok()) {
        // What `planner import hf` writes, the model reader takes, with the template imported.
        const std::string yaml = HfModelYaml(h, "config.json");
        ModelSpec m;
        const Status st = ParseModelSpec("imported.yaml", yaml, &m);
        if (!st.ok())
          RoundTripFailed("hf import", "the written model file does not read back: " + st.ToString(), yaml, "");
        // 0 for kv_heads and ffn means heads and 4 hidden (the file writes them out).
        auto normal = [](GptConfig g) {
          if (g.kv_heads == 0) g.kv_heads = g.heads;
          if (g.ffn == 0) g.ffn = 4 * g.hidden;
          return g;
        };
        const GptConfig a = normal(h.gpt);
        const GptConfig b = normal(m.gpt);
        if (!m.is_gpt || a.layers != b.layers || a.hidden != b.hidden || a.heads != b.heads ||
            a.kv_heads != b.kv_heads || a.ffn != b.ffn || a.vocab != b.vocab || a.seq != b.seq ||
            a.ffn_act != b.ffn_act || a.norm != b.norm || a.position != b.position ||
            (a.position == "rope" && a.rope_theta != b.rope_theta) || a.bias != b.bias ||
            a.tie_embeddings != b.tie_embeddings) {
          RoundTripFailed("hf import", "the model file read back has another template", yaml, "");
        }
      }
      break;
    }
    default: {
      LaunchPlan l;
      if (ParseLaunchPlan("launch.yaml", text, &l).ok()) {
        const std::string first = LaunchPlanToYaml(l);
        LaunchPlan again;
        const Status st = ParseLaunchPlan("launch2.yaml", first, &again);
        if (!st.ok()) RoundTripFailed("launch plan", "re-parse failed: " + st.ToString(), first, "");
        const std::string second = LaunchPlanToYaml(again);
        if (second != first)
          RoundTripFailed("launch plan", "YAML differs after parse -> serialize -> parse", first, second);
      }
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RunOne(data, size);
  return 0;
}

#ifndef PLANNER_LIBFUZZER
// Replays the saved corpus; any crash, failed round trip, sanitizer report or hang
// fails the test, and so does a missing corpus directory.
int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  int files = 0;
  for (int i = 1; i < argc; ++i) {
    if (!fs::is_directory(argv[i])) {
      std::fprintf(stderr, "fuzz_replay: corpus directory missing: %s\n", argv[i]);
      return 1;
    }
    for (const auto& e : fs::directory_iterator(argv[i])) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string bytes = ss.str();
      RunOne(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++files;
    }
  }
  std::printf("replayed %d inputs\n", files);
  return files > 0 ? 0 : 1;
}
#endif
