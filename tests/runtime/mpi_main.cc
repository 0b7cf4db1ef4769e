// Runs under mpirun: the communicator conformance table on MPI_COMM_WORLD,
// then the collective profiler on it (every result must be right). The
// transport must say which shared-memory eager limit carried the messages:
// the value exported before the start, else the one planner set (256 KiB
// where /dev/shm has room); meson runs this table under both eager copies
// and CMA rendezvous.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "profiler/comm_profiler.h"
#include "tests/runtime/comm_conformance.h"

int main() {
  using namespace planner;
  const char* preset = std::getenv("OMPI_MCA_btl_vader_eager_limit");
  const bool rules_preset = std::getenv("OMPI_MCA_coll_tuned_use_dynamic_rules") != nullptr;
  std::unique_ptr<Communicator> world;
  Status s = MakeMpiWorld(&world);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 77;
  }
  if (preset == nullptr && MpiEagerLimitSet() != 262144) {
    std::fprintf(stderr, "rank %d: planner set no 256 KiB eager limit (%ld); is /dev/shm full?\n", world->rank(),
                 static_cast<long>(MpiEagerLimitSet()));
  }
  const std::string want_eager =
      (preset != nullptr ? std::string(preset) : std::to_string(MpiEagerLimitSet() > 0 ? MpiEagerLimitSet() : 4096)) +
      " B";
  const std::string transport = world->transport();
  if (transport.rfind("Open MPI", 0) == 0) {
    // Planner's all-reduce rule (segmented ring from 1 MiB) is in force unless the user set dynamic rules.
    if (!rules_preset && transport.find("all-reduce from 1048576 B as a segmented ring") == std::string::npos) {
      std::fprintf(stderr, "rank %d: transport '%s' lacks the segmented-ring all-reduce rule\n", world->rank(),
                   transport.c_str());
      return 1;
    }
    if (transport.find("eager limit " + want_eager) == std::string::npos) {
      std::fprintf(stderr, "rank %d: transport '%s' does not carry the eager limit %s\n", world->rank(),
                   transport.c_str(), want_eager.c_str());
      return 1;
    }
  }
  world->set_timeout_seconds(60);
  s = RunConformance(*world);
  if (s.ok()) {
    CommProfileOptions o;
    o.max_bytes = 1 << 16;
    o.iterations = 3;
    std::vector<CommRow> rows;
    std::vector<CommCurve> curves;
    s = ProfileCollectives(*world, o, &rows, &curves, [](const std::string&) {});
    int64_t wrong = 0;
    for (const auto& r : rows) wrong += r.wrong;
    if (s.ok() && (wrong != 0 || curves.empty() || curves.size() % 6 != 0))
      s = Status::Internal("collective profile: wrong results or missing curves");
  }
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", world->rank(), s.message().c_str());
    return 1;
  }
  if (world->rank() == 0) std::printf("MPI conformance passed on %d ranks over %s\n", world->size(), transport.c_str());
  return 0;
}
