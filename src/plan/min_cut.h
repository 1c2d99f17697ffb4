// The minimum s-t cut that PyTorch's min-cut partitioner asks networkx for
// (torch/_functorch/partitioners.py, solve_min_cut), on plain arrays: the
// compiled route (python/mutwo/compiled/_mincut.py) hands the partitioner's
// graph here as edge lists. The answer is networkx's own: the sink side is
// every node that reaches the sink through edges with capacity left after a
// maximum flow, a set that is the same for every maximum flow, so the
// partition matches networkx's whichever exact algorithm finds the flow.
#pragma once

#include <cstdint>
#include <vector>

namespace mutwo::plan {

// An edge's capacity that no flow saturates (networkx: math.inf, or no capacity).
inline constexpr int64_t kUnboundedCapacity = -1;

struct MinCut {
  bool unbounded = false;      // an s-t path of unbounded edges: no finite cut (networkx raises)
  int64_t value = 0;           // the cut's capacity (the maximum flow)
  std::vector<uint8_t> sink;   // per node: 1 on the sink side
};

// Edge e runs tail[e] -> head[e] with capacity[e] >= 0, or kUnboundedCapacity.
// Nodes are 0 .. nodes-1; the finite capacities sum to below 2^61.
MinCut min_cut(int64_t nodes, const std::vector<int64_t>& tail, const std::vector<int64_t>& head,
               const std::vector<int64_t>& capacity, int64_t source, int64_t sink);

}  // namespace mutwo::plan
