// A parallel for over independent tasks: `workers` threads (the caller one of them) take tasks
// 0..n-1 in increasing order from a shared counter and run fn(task, worker). Results that must not
// depend on the thread count are written per task by fn and combined by the caller in task order
// (the search's --threads, dp_solver/search.cc). workers <= 1 or n <= 1: the caller runs every task
// in order, no thread is started. fn must not throw.
#pragma once

#include <cstdint>
#include <functional>

namespace planner {

void ParallelFor(int64_t n, int workers, const std::function<void(int64_t task, int worker)>& fn);

}  // namespace planner
