#include "common/parallel.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace planner {

void ParallelFor(int64_t n, int workers, const std::function<void(int64_t task, int worker)>& fn) {
  const int w = static_cast<int>(std::min<int64_t>(std::max(workers, 1), std::max<int64_t>(n, 1)));
  if (w <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  auto loop = [&](int worker) {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i, worker);
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(w - 1));
  for (int t = 1; t < w; ++t) threads.emplace_back(loop, t);
  loop(0);
  for (std::thread& t : threads) t.join();
}

}  // namespace planner
