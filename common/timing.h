// The clock and the statistic the runtime's figures use: seconds on the
// machine's monotonic clock (shared by the processes of one node, so traces
// of its ranks line up), and the median that every measured figure quotes.
#pragma once

#include <vector>

namespace planner {

double MonotonicSeconds();
// The upper median (v[n / 2] of the sorted values); 0 for none.
double Median(std::vector<double> v);

}  // namespace planner
