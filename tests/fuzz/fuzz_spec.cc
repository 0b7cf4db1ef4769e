// Fuzz target for every reader of user files: the first byte picks the
// reader (model, cluster, profile, plan, PipeDream graph, launch plan), the
// rest is the file text. A successful model parse also builds its analytic cost table
// and a parsed plan is written back and re-read (round trip).
//
// Built two ways:
//  - with clang and -fsanitize=fuzzer,address,undefined by tests/fuzz/run_fuzz.sh
//    (PLANNER_LIBFUZZER defined): libFuzzer drives it;
//  - by Meson as the `fuzz_corpus` test: main() replays every file of
//    tests/fuzz/corpus and tests/fuzz/regressions (crashers found earlier).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "dp_solver/cost_model.h"
#include "spec/cluster_spec.h"
#include "spec/model_spec.h"
#include "spec/launch_plan.h"
#include "spec/pipedream_import.h"
#include "spec/plan.h"
#include "spec/profile.h"

namespace {

void RunOne(const uint8_t* data, size_t size) {
  using namespace planner;
  if (size < 1) return;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 6) {
    case 0: {
      ModelSpec m;
      if (ParseModelSpec("fuzz.yaml", text, &m).ok() && m.layers.size() < 4096) {
        ClusterSpec c;
        c.levels = {TopologyLevel{"node", 8, 100, 100, 1, {}, {}, {}, {}}};
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
        Plan q;
        (void)ParsePlan("fuzz2.yaml", PlanToYaml(p), &q);
        (void)PlanToJson(p);
      }
      break;
    }
    case 4: {
      Profile p;
      (void)ImportPipeDreamGraph("graph.txt", text, 1, &p);
      break;
    }
    default: {
      LaunchPlan l;
      if (ParseLaunchPlan("launch.yaml", text, &l).ok()) {
        LaunchPlan again;
        (void)ParseLaunchPlan("launch2.yaml", LaunchPlanToYaml(l), &again);
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
// Replays the saved corpus; any crash, sanitizer report or hang fails the test.
int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  int files = 0;
  for (int i = 1; i < argc; ++i) {
    if (!fs::is_directory(argv[i])) continue;
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
