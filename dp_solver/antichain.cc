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
  std::vector<std::vector<int>> out;     // alive successors (with multiplicity as in the file)
  std::vector<std::vector<char>> anc;    // strict ancestors
  std::vector<std::vector<char>> desc;   // strict descendants
};

NodeSet Sorted(NodeSet v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
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

}  // namespace

Status BuildAntichainStates(const std::vector<std::vector<int>>& inputs, const std::vector<char>& alive, int start,
                            int64_t max_states, AntichainStates* out) {
  Dag g;
  g.n = static_cast<int>(inputs.size());
  g.out.assign(g.n, {});
  for (int v = 0; v < g.n; ++v) {
    if (!alive[v]) continue;
    for (int u : inputs[v]) {
      if (alive[u]) g.out[u].push_back(v);
    }
  }
  // Ancestors by a topological order (Kahn).
  std::vector<int> indeg(g.n, 0), order;
  for (int v = 0; v < g.n; ++v) for (int w : g.out[v]) ++indeg[w];
  std::queue<int> q;
  for (int v = 0; v < g.n; ++v) if (alive[v] && indeg[v] == 0) q.push(v);
  while (!q.empty()) {
    int v = q.front();
    q.pop();
    order.push_back(v);
    for (int w : g.out[v]) if (--indeg[w] == 0) q.push(w);
  }
  g.anc.assign(g.n, std::vector<char>(g.n, 0));
  g.desc.assign(g.n, std::vector<char>(g.n, 0));
  for (int v : order) {
    for (int w : g.out[v]) {
      g.anc[w][v] = 1;
      for (int a = 0; a < g.n; ++a) if (g.anc[v][a]) g.anc[w][a] = 1;
    }
  }
  for (int v = 0; v < g.n; ++v) for (int a = 0; a < g.n; ++a) if (g.anc[v][a]) g.desc[a][v] = 1;

  std::map<NodeSet, int> id;           // deaugmented antichain -> state id
  std::vector<NodeSet> antichains;
  std::vector<std::vector<int>> succ;  // state DAG edges
  std::set<NodeSet> expanded;
  std::queue<NodeSet> queue;
  NodeSet first = {start};
  id[first] = 0;
  antichains.push_back(first);
  succ.emplace_back();
  queue.push(first);
  while (!queue.empty()) {
    NodeSet a = queue.front();
    queue.pop();
    if (expanded.count(a)) continue;
    expanded.insert(a);
    NodeSet aug = Augment(g, a);
    for (int x : aug) {
      for (int y : g.out[x]) {
        if (std::binary_search(a.begin(), a.end(), y)) continue;
        bool next_ok = true;
        for (int z : aug) next_ok = next_ok && !g.desc[y][z];
        if (!next_ok) continue;
        NodeSet replaced = aug;
        for (int& z : replaced) if (z == x) z = y;
        NodeSet next = Deaugment(g, Sorted(replaced));
        auto it = id.find(next);
        if (it == id.end()) {
          if (static_cast<int64_t>(antichains.size()) >= max_states) {
            return Status::NotSupported(fmt::format(
                "the graph has more than {} antichain states; compress its branches first "
                "(PipeDream's compress_graph_branches.py) or use --mode auto",
                max_states));
          }
          it = id.emplace(next, static_cast<int>(antichains.size())).first;
          antichains.push_back(next);
          succ.emplace_back();
        }
        succ[id[a]].push_back(it->second);
        queue.push(next);
      }
    }
  }
  // Topological order of the state DAG (Kahn, by discovery id).
  int s_count = static_cast<int>(antichains.size());
  std::vector<int> sindeg(s_count, 0), sorder;
  for (int s = 0; s < s_count; ++s) for (int t : succ[s]) ++sindeg[t];
  std::queue<int> sq;
  for (int s = 0; s < s_count; ++s) if (sindeg[s] == 0) sq.push(s);
  while (!sq.empty()) {
    int s = sq.front();
    sq.pop();
    sorder.push_back(s);
    for (int t : succ[s]) if (--sindeg[t] == 0) sq.push(t);
  }
  std::vector<int> pos(s_count);
  for (int k = 0; k < s_count; ++k) pos[sorder[k]] = k;
  // Ancestor sets of states, in topological positions.
  std::vector<std::vector<char>> sanc(s_count, std::vector<char>(s_count, 0));
  for (int s : sorder) {
    for (int t : succ[s]) {
      sanc[pos[t]][pos[s]] = 1;
      for (int a = 0; a < s_count; ++a) if (sanc[pos[s]][a]) sanc[pos[t]][a] = 1;
    }
  }
  AntichainStates r;
  for (int k = 0; k < s_count; ++k) {
    const NodeSet& a = antichains[sorder[k]];
    NodeSet aug = Augment(g, a);
    std::vector<char> members(g.n, 0);
    for (int x : aug) {
      members[x] = 1;
      for (int p = 0; p < g.n; ++p) if (g.anc[x][p]) members[p] = 1;
    }
    std::vector<int> pred;
    for (int j = 0; j < s_count; ++j) if (sanc[k][j]) pred.push_back(j);
    r.frontier.push_back(aug);
    r.members.push_back(std::move(members));
    r.pred.push_back(std::move(pred));
  }
  *out = std::move(r);
  return Status::OK();
}

}  // namespace planner
