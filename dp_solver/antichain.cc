// Antichain linearisation of a DAG, as PipeDream's graph.py builds it
// (antichain_dag / next_antichains / augment / deaugment).
#include <algorithm>
#include <map>
#include <queue>
#include <set>

#include <fmt/format.h>

#include "dp_solver/pipedream_dp.h"

namespace planner {

namespace {

using NodeSet = std::vector<int>;  // sorted node indices

struct Dag {
  int n = 0;
  std::vector<std::vector<int>> out;    // alive successors (with multiplicity as in the file)
  std::vector<std::vector<char>> anc;   // strict ancestors
  std::vector<std::vector<char>> desc;  // strict descendants
};

NodeSet Sorted(NodeSet v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// Kahn's topological order of a graph given by successor lists, taking the
// nodes with `include` set (their successors are included ones), queue order.
std::vector<int> TopologicalOrder(const std::vector<std::vector<int>>& succ, const std::vector<char>& include) {
  const int n = static_cast<int>(succ.size());
  std::vector<int> indeg(n, 0), order;
  for (int v = 0; v < n; ++v)
    for (int w : succ[v]) ++indeg[w];
  std::queue<int> q;
  for (int v = 0; v < n; ++v)
    if (include[v] && indeg[v] == 0) q.push(v);
  while (!q.empty()) {
    int v = q.front();
    q.pop();
    order.push_back(v);
    for (int w : succ[v])
      if (--indeg[w] == 0) q.push(w);
  }
  return order;
}

// anc[w][a] = 1 when a is a strict ancestor of w, by one pass in topological order.
std::vector<std::vector<char>> Ancestors(const std::vector<std::vector<int>>& succ, const std::vector<int>& order) {
  const size_t n = succ.size();
  std::vector<std::vector<char>> anc(n, std::vector<char>(n, 0));
  for (int v : order) {
    for (int w : succ[v]) {
      anc[w][v] = 1;
      for (size_t a = 0; a < n; ++a)
        if (anc[v][a]) anc[w][a] = 1;
    }
  }
  return anc;
}

// The alive part of the graph with its ancestor and descendant relations.
Dag BuildDag(const std::vector<std::vector<int>>& inputs, const std::vector<char>& alive) {
  Dag g;
  g.n = static_cast<int>(inputs.size());
  g.out.assign(g.n, {});
  for (int v = 0; v < g.n; ++v) {
    if (!alive[v]) continue;
    for (int u : inputs[v]) {
      if (alive[u]) g.out[u].push_back(v);
    }
  }
  g.anc = Ancestors(g.out, TopologicalOrder(g.out, alive));
  g.desc.assign(g.n, std::vector<char>(g.n, 0));
  for (int v = 0; v < g.n; ++v)
    for (int a = 0; a < g.n; ++a)
      if (g.anc[v][a]) g.desc[a][v] = 1;
  return g;
}

// Adds to the antichain every ancestor p of a member a that still feeds a
// node outside a's ancestors (its output crosses the cut).
NodeSet Augment(const Dag& g, const NodeSet& a) {
  NodeSet result = a;
  for (int x : a) {
    for (int p = 0; p < g.n; ++p) {
      if (!g.anc[x][p]) continue;
      for (int y : g.out[p]) {
        if (!g.anc[x][y] && y != x) {
          result.push_back(p);
          break;
        }
      }
    }
  }
  return Sorted(result);
}

// Drops members that have a descendant among the members.
NodeSet Deaugment(const Dag& g, const NodeSet& aug) {
  NodeSet result;
  for (int x : aug) {
    bool remove = false;
    for (int y : aug) remove = remove || g.desc[x][y];
    if (!remove) result.push_back(x);
  }
  return Sorted(result);
}

// PipeDream's next_antichains: each successor y of an augmented member x,
// not in the antichain and not an ancestor of a member, replaces x; one entry
// per such (x, y), deaugmented, duplicates kept.
std::vector<NodeSet> NextAntichains(const Dag& g, const NodeSet& a) {
  std::vector<NodeSet> result;
  NodeSet aug = Augment(g, a);
  for (int x : aug) {
    for (int y : g.out[x]) {
      if (std::binary_search(a.begin(), a.end(), y)) continue;
      bool next_ok = true;
      for (int z : aug) next_ok = next_ok && !g.desc[y][z];
      if (!next_ok) continue;
      NodeSet replaced = aug;
      for (int& z : replaced)
        if (z == x) z = y;
      result.push_back(Deaugment(g, Sorted(replaced)));
    }
  }
  return result;
}

// The state DAG: deaugmented antichains reachable from {start}, numbered in
// discovery order (breadth first), with their successor edges.
struct StateDag {
  std::vector<NodeSet> antichains;
  std::vector<std::vector<int>> succ;
};

Status EnumerateStates(const Dag& g, int start, int64_t max_states, StateDag* out) {
  StateDag d;
  std::map<NodeSet, int> id;  // deaugmented antichain -> state id
  std::set<NodeSet> expanded;
  std::queue<NodeSet> queue;
  NodeSet first = {start};
  id[first] = 0;
  d.antichains.push_back(first);
  d.succ.emplace_back();
  queue.push(first);
  while (!queue.empty()) {
    NodeSet a = queue.front();
    queue.pop();
    if (expanded.count(a)) continue;
    expanded.insert(a);
    for (NodeSet& next : NextAntichains(g, a)) {
      auto it = id.find(next);
      if (it == id.end()) {
        if (static_cast<int64_t>(d.antichains.size()) >= max_states) {
          return Status::NotSupported(
              fmt::format("the graph has more than {} antichain states; compress its branches first "
                          "(PipeDream's compress_graph_branches.py) or use --mode auto",
                          max_states));
        }
        it = id.emplace(next, static_cast<int>(d.antichains.size())).first;
        d.antichains.push_back(next);
        d.succ.emplace_back();
      }
      d.succ[id[a]].push_back(it->second);
      queue.push(std::move(next));
    }
  }
  *out = std::move(d);
  return Status::OK();
}

// The states in topological order (Kahn, by discovery id): each state's
// augmented frontier, the nodes up to it, and its ancestor states (by position).
AntichainStates OrderStates(const Dag& g, const StateDag& d) {
  const int s_count = static_cast<int>(d.antichains.size());
  const std::vector<int> sorder = TopologicalOrder(d.succ, std::vector<char>(s_count, 1));
  const std::vector<std::vector<char>> sanc = Ancestors(d.succ, sorder);  // by discovery id
  AntichainStates r;
  for (int k = 0; k < s_count; ++k) {
    NodeSet aug = Augment(g, d.antichains[sorder[k]]);
    std::vector<char> members(g.n, 0);
    for (int x : aug) {
      members[x] = 1;
      for (int p = 0; p < g.n; ++p)
        if (g.anc[x][p]) members[p] = 1;
    }
    std::vector<int> pred;
    for (int j = 0; j < s_count; ++j)
      if (sanc[sorder[k]][sorder[j]]) pred.push_back(j);
    r.frontier.push_back(aug);
    r.members.push_back(std::move(members));
    r.pred.push_back(std::move(pred));
  }
  return r;
}

}  // namespace

Status BuildAntichainStates(const std::vector<std::vector<int>>& inputs, const std::vector<char>& alive, int start,
                            int64_t max_states, AntichainStates* out) {
  const Dag g = BuildDag(inputs, alive);
  StateDag d;
  PLANNER_RETURN_IF_ERROR(EnumerateStates(g, start, max_states, &d));
  *out = OrderStates(g, d);
  return Status::OK();
}

}  // namespace planner
