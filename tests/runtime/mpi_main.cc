// Runs under mpirun: the communicator conformance table on MPI_COMM_WORLD,
// then the collective profiler on it (every result must be right).
#include <cstdio>

#include "profiler/comm_profiler.h"
#include "tests/runtime/comm_conformance.h"

int main() {
  using namespace planner;
  std::unique_ptr<Communicator> world;
  Status s = MakeMpiWorld(&world);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 77;
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
  if (world->rank() == 0) std::printf("MPI conformance passed on %d ranks\n", world->size());
  return 0;
}
