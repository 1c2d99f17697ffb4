// The arena's offsets (see arena.h): blocks from the liveness, placed best-fit
// in three orders, the smallest arena kept.
#include "analysis/arena.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "support/error.h"

namespace mutwo::analysis {

namespace {

int64_t round_up(int64_t bytes, int64_t alignment) { return (bytes + alignment - 1) / alignment * alignment; }

// The blocks to place, without offsets, and how many storages the rules left out.
std::vector<ArenaBlock> blocks_of(const ir::Graph& g, const Liveness& L, const ArenaOptions& o, int32_t& left_out) {
  const auto& nodes = g.nodes();
  const auto last_node = static_cast<int32_t>(nodes.size()) - 1;
  // Read by swap_out or swap_into (a copy stream's reads): held past its last use by the copy.
  std::vector<bool> copied_out(g.num_values(), false);
  for (const ir::Node& n : nodes)
    if (n.op == "swap_out" || n.op == "swap_into")
      copied_out[static_cast<size_t>(L.storage[static_cast<size_t>(n.inputs[0])])] = true;
  std::vector<ArenaBlock> blocks;
  left_out = 0;
  for (const ir::Value& v : g.values()) {
    const auto id = static_cast<size_t>(v.id);
    if (!L.owns_storage(v.id) || L.def[id] < 0 || L.on_host[id] || v.type.bytes() == 0) continue;
    if (copied_out[id]) {
      ++left_out;
      continue;
    }
    const int32_t end = L.storage_end[id] == kForever ? last_node : L.storage_end[id];
    blocks.push_back({v.id, L.def[id], std::max(end, L.def[id]), round_up(v.type.bytes(), o.alignment), -1});
  }
  MUTWO_ASSERT(o.workspace.empty() || o.workspace.size() == nodes.size(), "arena: {} workspaces for {} nodes",
               o.workspace.size(), nodes.size());
  for (size_t n = 0; n < o.workspace.size(); ++n)
    if (o.workspace[n] > 0)
      blocks.push_back({ir::kNoValue, static_cast<int32_t>(n), static_cast<int32_t>(n), round_up(o.workspace[n], o.alignment), -1});
  return blocks;
}

bool overlap_in_time(const ArenaBlock& a, const ArenaBlock& b) { return a.first <= b.last && b.first <= a.last; }

// Best fit in the given order: each block in the smallest gap that holds it
// among the blocks already placed that are live with it, else above them all.
// Returns the arena's size.
int64_t place(std::vector<ArenaBlock>& blocks, const std::vector<size_t>& order) {
  std::vector<size_t> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;  // (offset, end) of the placed blocks live with the current one
  int64_t size = 0;
  for (size_t i : order) {
    ArenaBlock& b = blocks[i];
    busy.clear();
    for (size_t j : placed)
      if (overlap_in_time(b, blocks[j])) busy.emplace_back(blocks[j].offset, blocks[j].offset + blocks[j].bytes);
    std::sort(busy.begin(), busy.end());
    int64_t free_from = 0, best = -1, best_gap = std::numeric_limits<int64_t>::max();
    for (auto [start, end] : busy) {
      const int64_t gap = start - free_from;
      if (gap >= b.bytes && gap < best_gap) {
        best = free_from;
        best_gap = gap;
      }
      free_from = std::max(free_from, end);
    }
    b.offset = best >= 0 ? best : free_from;
    size = std::max(size, b.offset + b.bytes);
    placed.push_back(i);
  }
  return size;
}

}  // namespace

ArenaPlan plan_arena(const ir::Graph& g, const Liveness& L, const ArenaOptions& o) {
  MUTWO_ASSERT(o.alignment > 0, "arena: alignment {}", o.alignment);
  ArenaPlan a;
  a.alignment = o.alignment;
  a.blocks = blocks_of(g, L, o, a.left_out);
  const std::vector<ArenaBlock>& bs = a.blocks;
  // The orders: by size (TFLite's greedy by size), by lifetime (XLA's
  // temporal sort), by schedule (a heap simulator's best fit), ties broken by
  // the schedule so every run places alike.
  using Less = std::function<bool(const ArenaBlock&, const ArenaBlock&)>;
  const std::vector<std::pair<std::string, Less>> orders{
      {"size", [](const ArenaBlock& x, const ArenaBlock& y) {
         return std::tie(y.bytes, x.first, x.owner) < std::tie(x.bytes, y.first, y.owner);
       }},
      {"lifetime", [](const ArenaBlock& x, const ArenaBlock& y) {
         const int32_t lx = x.last - x.first, ly = y.last - y.first;
         return std::tie(ly, y.bytes, x.first, x.owner) < std::tie(lx, x.bytes, y.first, y.owner);
       }},
      {"schedule", [](const ArenaBlock& x, const ArenaBlock& y) {
         return std::tie(x.first, y.bytes, x.owner) < std::tie(y.first, x.bytes, y.owner);
       }},
  };
  std::vector<ArenaBlock> best;
  for (const auto& [name, less] : orders) {
    std::vector<size_t> order(bs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t i, size_t j) { return less(bs[i], bs[j]); });
    std::vector<ArenaBlock> tried = bs;
    const int64_t size = place(tried, order);
    if (a.order.empty() || size < a.bytes) {
      a.bytes = size;
      a.order = name;
      best = std::move(tried);
    }
  }
  a.blocks = std::move(best);
  // What no placement can beat: the most block bytes live at one node.
  std::vector<int64_t> delta(g.nodes().size() + 1, 0);
  for (const ArenaBlock& b : a.blocks) {
    delta[static_cast<size_t>(b.first)] += b.bytes;
    delta[static_cast<size_t>(b.last) + 1] -= b.bytes;
  }
  int64_t live = 0;
  for (int64_t d : delta) a.live_peak_bytes = std::max(a.live_peak_bytes, live += d);
  a.offset.assign(g.num_values(), -1);
  a.workspace_offset.assign(g.nodes().size(), -1);
  std::vector<int64_t> owner_offset(g.num_values(), -1);
  for (const ArenaBlock& b : a.blocks) {
    if (b.owner == ir::kNoValue) a.workspace_offset[static_cast<size_t>(b.first)] = b.offset;
    else owner_offset[static_cast<size_t>(b.owner)] = b.offset;
  }
  for (size_t v = 0; v < g.num_values(); ++v) a.offset[v] = owner_offset[static_cast<size_t>(L.storage[v])];
  return a;
}

std::string arena_conflict(const ArenaPlan& a) {
  auto name = [](const ArenaBlock& b) {
    return b.owner == ir::kNoValue ? fmt::format("node {}'s workspace", b.first) : fmt::format("value {}", b.owner);
  };
  for (size_t i = 0; i < a.blocks.size(); ++i) {
    const ArenaBlock& x = a.blocks[i];
    if (x.offset < 0 || x.offset + x.bytes > a.bytes || x.offset % a.alignment != 0)
      return fmt::format("{} at [{}, {}) lies outside the arena of {} bytes or off its alignment {}", name(x), x.offset,
                         x.offset + x.bytes, a.bytes, a.alignment);
    for (size_t j = i + 1; j < a.blocks.size(); ++j) {
      const ArenaBlock& y = a.blocks[j];
      if (overlap_in_time(x, y) && x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes)
        return fmt::format("{} (nodes {}-{}, bytes [{}, {})) and {} (nodes {}-{}, bytes [{}, {})) overlap", name(x), x.first,
                           x.last, x.offset, x.offset + x.bytes, name(y), y.first, y.last, y.offset, y.offset + y.bytes);
    }
  }
  return "";
}

}  // namespace mutwo::analysis
