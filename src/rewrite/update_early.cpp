// The early-update rewrite (see update_early.h).
#include "rewrite/update_early.h"

#include <algorithm>
#include <numeric>

#include "ops/attrs.h"
#include "ops/op.h"
#include "support/error.h"

namespace mutwo::rewrite {

Rewritten update_early(const Rewritten& r) {
  const ir::Graph& g = r.graph;
  const auto& nodes = g.nodes();
  for (const ir::Node& n : nodes)
    if (ops::has(n, ops::kCollective)) return r;
  // Per node: the pieces of optimizer nodes to place right after it.
  struct Piece {
    ir::Node node;
    size_t from;
    double share;
  };
  std::vector<std::vector<Piece>> after(nodes.size());
  std::vector<bool> moved(nodes.size(), false);
  // The last node other than an optimizer node touching each value (reading or making it).
  std::vector<int32_t> last_touch(g.num_values(), -1);
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (!ops::optimizer_lists(nodes[n]).empty()) continue;
    for (const auto* list : {&nodes[n].inputs, &nodes[n].outputs})
      for (ir::ValueId v : *list)
        if (v != ir::kNoValue) last_touch[static_cast<size_t>(v)] = static_cast<int32_t>(n);
  }
  for (size_t n = 0; n < nodes.size(); ++n) {
    const ir::Node& node = nodes[n];
    const size_t lists = ops::optimizer_lists(node).size();
    if (lists == 0 || node.inputs.empty()) continue;
    const size_t count = node.inputs.size() / lists;
    // When each parameter is ready: after the last other node touching any of its entries.
    std::vector<int32_t> ready(count, -1);
    for (size_t i = 0; i < count; ++i)
      for (size_t l = 0; l < lists; ++l) ready[i] = std::max(ready[i], last_touch[static_cast<size_t>(node.inputs[l * count + i])]);
    std::vector<size_t> order(count);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ready[a] < ready[b]; });
    std::vector<size_t> bucket;
    int64_t bytes = 0;
    auto flush = [&] {
      if (bucket.empty()) return;
      ir::Node piece = ops::optimizer_part(node, bucket);
      int32_t at = -1;
      for (size_t i : bucket) at = std::max(at, ready[i]);
      MUTWO_ASSERT(at >= 0 && static_cast<size_t>(at) < n, "optimizer entry ready after its node");
      const bool in_backward = ir::is_backward(nodes[static_cast<size_t>(at)].phase);
      piece.phase = in_backward ? ir::Phase::backward : node.phase;
      piece.scope = "optimizer";
      // After the backward part: stays where the optimizer was.
      const size_t place = in_backward ? static_cast<size_t>(at) : n;
      after[place].push_back({std::move(piece), n, ops::optimizer_share(g, node, bucket)});
      bucket.clear();
      bytes = 0;
    };
    for (size_t i : order) {
      bucket.push_back(i);
      bytes += g.type(node.inputs[i]).bytes();
      if (bytes >= kUpdateBucket) flush();
    }
    flush();
    moved[n] = true;
  }

  Rewritten out;
  out.graph.name = g.name;
  out.graph.copy_values_from(g);
  out.graph.outputs = g.outputs;
  out.clones = r.clones;
  out.swaps = r.swaps;
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (!moved[n]) {
      out.graph.append(nodes[n]);
      out.origin.push_back(r.origin[n]);
      out.share.push_back(r.share_of(n));
    }
    for (Piece& p : after[n]) {
      out.graph.append(std::move(p.node));
      out.origin.push_back(r.origin[p.from]);
      out.share.push_back(r.share_of(p.from) * p.share);
    }
  }
  return out;
}

}  // namespace mutwo::rewrite
