// Runs under mpirun: the communicator conformance table on MPI_COMM_WORLD,
// then the collective profiler on it (every result must be right). The
// transport must say which shared-memory eager limit carried the messages:
// planner's 1 MiB default, or the value exported before the start
// (meson runs this table under both: eager copies and CMA rendezvous).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "profiler/comm_profiler.h"
#include "tests/runtime/comm_conformance.h"

int main() {
  using namespace planner;
  const char* preset = std::getenv("OMPI_MCA_btl_vader_eager_limit");
  const std::string want_eager = std::string(preset != nullptr ? preset : "1048576") + " B";
  std::unique_ptr<Communicator> world;
  Status s = MakeMpiWorld(&world);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 77;
  }
  const std::string transport = world->transport();
  if (transport.rfind("Open MPI", 0) == 0 && transport.find("eager limit " + want_eager) == std::string::npos) {
    std::fprintf(stderr, "rank %d: transport '%s' does not carry the eager limit %s\n", world->rank(), transport.c_str(), want_eager.c_str());
    return 1;
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
    if (s.ok() && (wrong != 0 || curves.empty() || curves.size() % 5 != 0)) s = Status::Internal("collective profile: wrong results or missing curves");
  }
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", world->rank(), s.message().c_str());
    return 1;
  }
  if (world->rank() == 0) std::printf("MPI conformance passed on %d ranks over %s\n", world->size(), transport.c_str());
  return 0;
}
