// Dinic's maximum flow (BFS levels, then blocking flows along level-increasing
// edges, with an explicit stack: the partitioner's graphs chain thousands of
// nodes), then the sink side as networkx reads it off the residual network.
// Indices are int64_t throughout (the op's lists), used directly as vector indices.
#include "plan/min_cut.h"

#include <algorithm>
#include <tuple>
#include <limits>

#include "support/error.h"

namespace mutwo::plan {

namespace {

constexpr int64_t kInfinite = std::numeric_limits<int64_t>::max() / 4;  // above any finite cut

struct Network {
  std::vector<int64_t> first;               // per node: its first arc, or -1
  std::vector<int64_t> next, to, residual;  // per arc; arc a ^ 1 is a's reverse
  void arc(int64_t u, int64_t v, int64_t c) {
    for (auto [from, into, cap] : {std::tuple{u, v, c}, std::tuple{v, u, int64_t{0}}}) {
      next.push_back(first[from]);
      first[from] = static_cast<int64_t>(to.size());
      to.push_back(into), residual.push_back(cap);
    }
  }
};

// Levels from the source through arcs with capacity left; false where the sink is not reached.
bool levels(const Network& g, int64_t s, int64_t t, std::vector<int64_t>& level) {
  std::fill(level.begin(), level.end(), -1);
  std::vector<int64_t> queue{s};
  level[s] = 0;
  for (size_t i = 0; i < queue.size(); ++i) {
    const int64_t u = queue[i];
    for (int64_t a = g.first[u]; a >= 0; a = g.next[a]) {
      const int64_t v = g.to[a];
      if (g.residual[a] > 0 && level[v] < 0) {
        level[v] = level[u] + 1;
        queue.push_back(v);
      }
    }
  }
  return level[t] >= 0;
}

// One blocking flow, at most `limit`: repeatedly a path of level-increasing
// arcs from s to t (`current` skips arcs found dead), augmented by its bottleneck.
int64_t blocking_flow(Network& g, int64_t s, int64_t t, const std::vector<int64_t>& level, int64_t limit) {
  std::vector<int64_t> current(g.first), path;  // path: the arcs from s to the stack's top
  int64_t pushed = 0;
  int64_t u = s;
  while (pushed < limit) {
    if (u == t) {
      int64_t bottleneck = limit - pushed;
      for (int64_t a : path) bottleneck = std::min(bottleneck, g.residual[a]);
      for (int64_t a : path) g.residual[a] -= bottleneck, g.residual[a ^ 1] += bottleneck;
      pushed += bottleneck;
      path.clear(), u = s;
      continue;
    }
    int64_t& a = current[u];
    while (a >= 0 && !(g.residual[a] > 0 && level[g.to[a]] == level[u] + 1)) a = g.next[a];
    if (a >= 0) {
      path.push_back(a), u = g.to[a];
      continue;
    }
    if (u == s) break;  // no path left in this level graph
    const int64_t back = path.back();  // u is dead: retreat, and skip the arc into it
    path.pop_back();
    u = g.to[back ^ 1];
    int64_t& into = current[u];
    into = g.next[into];
  }
  return pushed;
}

}  // namespace

MinCut min_cut(int64_t nodes, const std::vector<int64_t>& tail, const std::vector<int64_t>& head,
               const std::vector<int64_t>& capacity, int64_t source, int64_t sink) {
  MUTWO_ASSERT(tail.size() == head.size() && head.size() == capacity.size(),
              "min_cut: edge lists of {} tails, {} heads, {} capacities", tail.size(), head.size(), capacity.size());
  MUTWO_ASSERT(source >= 0 && source < nodes && sink >= 0 && sink < nodes && source != sink,
              "min_cut: source {} and sink {} among {} nodes", source, sink, nodes);
  Network g;
  g.first.assign(nodes, -1);
  for (size_t e = 0; e < tail.size(); ++e) {
    MUTWO_ASSERT(tail[e] >= 0 && tail[e] < nodes && head[e] >= 0 && head[e] < nodes &&
                    (capacity[e] >= 0 || capacity[e] == kUnboundedCapacity),
                "min_cut: edge {} ({} -> {}, capacity {}) among {} nodes", e, tail[e], head[e], capacity[e], nodes);
    if (tail[e] != head[e]) g.arc(tail[e], head[e], capacity[e] == kUnboundedCapacity ? kInfinite : capacity[e]);
  }
  MinCut cut;
  std::vector<int64_t> level(nodes);
  while (cut.value < kInfinite && levels(g, source, sink, level))
    cut.value += blocking_flow(g, source, sink, level, kInfinite - cut.value);
  if (cut.value >= kInfinite) return MinCut{true, 0, {}};
  // The sink side: the nodes from which the sink is reached through arcs with capacity left.
  cut.sink.assign(nodes, 0);
  std::vector<int64_t> queue{sink};
  cut.sink[sink] = 1;
  for (size_t i = 0; i < queue.size(); ++i) {
    const int64_t v = queue[i];
    for (int64_t a = g.first[v]; a >= 0; a = g.next[a]) {
      const int64_t u = g.to[a];  // arc a ^ 1 runs u -> v
      if (g.residual[a ^ 1] > 0 && !cut.sink[u]) {
        cut.sink[u] = 1;
        queue.push_back(u);
      }
    }
  }
  return cut;
}

}  // namespace mutwo::plan
