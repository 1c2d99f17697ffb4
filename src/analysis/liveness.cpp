// Liveness analysis (see liveness.h).
#include "analysis/liveness.h"

#include <algorithm>

#include "ops/op.h"
#include "support/error.h"

namespace mutwo::analysis {

std::vector<ir::Role> charged_roles(const ir::Graph& g, const Liveness& L) {
  std::vector<ir::Role> role(g.num_values());
  for (const ir::Value& v : g.values()) {
    auto id = static_cast<size_t>(v.id);
    role[id] = v.role;
    if (L.def[id] >= 0 && g.nodes()[static_cast<size_t>(L.def[id])].phase == ir::Phase::recompute)
      role[id] = ir::Role::activation;
  }
  for (const ir::Value& v : g.values()) {
    auto owner = static_cast<size_t>(L.storage[static_cast<size_t>(v.id)]);
    if (v.role == ir::Role::activation && !ir::is_persistent(g.values()[owner].role)) role[owner] = ir::Role::activation;
  }
  // A storage copied back from host memory: for the backward pass, an
  // activation (as a recomputed clone is); for the optimizer, charged as the
  // storage copied out (a gradient).
  for (const ir::Node& n : g.nodes()) {
    if (n.op != "swap_in") continue;
    const int32_t out = L.def[static_cast<size_t>(n.inputs[0])];  // -1: state kept in host memory
    const ir::ValueId copied = out < 0 ? n.inputs[0] : g.nodes()[static_cast<size_t>(out)].inputs[0];
    role[static_cast<size_t>(n.outputs[0])] = ir::is_backward(n.phase) || ir::is_forward(n.phase)
                                                   ? ir::Role::activation
                                                   : role[static_cast<size_t>(L.storage[static_cast<size_t>(copied)])];
  }
  return role;
}

Liveness analyze_liveness(const ir::Graph& g) {
  const auto& nodes = g.nodes();
  const size_t nv = g.num_values();
  Liveness L;
  L.def.assign(nv, -1);
  L.last_use.assign(nv, -1);
  L.storage.resize(nv);
  L.storage_end.assign(nv, -1);
  for (size_t v = 0; v < nv; ++v) L.storage[v] = static_cast<ir::ValueId>(v);

  for (size_t n = 0; n < nodes.size(); ++n) {
    const ir::Node& node = nodes[n];
    bool view = ops::has(node, ops::kView);
    for (ir::ValueId v : node.outputs) {
      L.def[static_cast<size_t>(v)] = static_cast<int32_t>(n);
      L.last_use[static_cast<size_t>(v)] = static_cast<int32_t>(n);
    }
    if (view)  // every output of a view op aliases input 0 (split and unbind have several)
      for (ir::ValueId v : node.outputs) L.storage[static_cast<size_t>(v)] = L.storage[static_cast<size_t>(node.inputs[0])];
    for (ir::ValueId v : node.inputs)
      if (v != ir::kNoValue) L.last_use[static_cast<size_t>(v)] = static_cast<int32_t>(n);
  }
  for (const ir::Value& val : g.values())
    if (ir::is_persistent(val.role)) L.last_use[static_cast<size_t>(val.id)] = kForever;
  for (ir::ValueId v : g.outputs) L.last_use[static_cast<size_t>(v)] = kForever;

  // An op that writes its output over input 0 (kOverwrite) must be the last
  // reader of what that storage held: no value naming the old contents is read
  // after it, and none is held across steps.
  for (size_t n = 0; n < nodes.size(); ++n) {
    const ir::Node& node = nodes[n];
    if (!ops::has(node, ops::kOverwrite)) continue;
    const ir::ValueId root = L.storage[static_cast<size_t>(node.inputs[0])];
    for (size_t v = 0; v < nv; ++v) {
      if (L.storage[v] != root || L.def[v] >= static_cast<int32_t>(n)) continue;
      MUTWO_CHECK(L.last_use[v] <= static_cast<int32_t>(n),
                  "node {} ({}) writes its result over %{}, but %{} is {} after it; give the later reader a value "
                  "the node does not overwrite",
                  n, node.op, g.value(node.inputs[0]).name, g.value(static_cast<ir::ValueId>(v)).name,
                  L.last_use[v] == kForever ? "held across steps" : fmt::format("read by node {}", L.last_use[v]));
    }
  }

  L.release_after.resize(nodes.size());
  for (size_t v = 0; v < nv; ++v) {
    int32_t last = L.last_use[v];
    if (last >= 0 && last != kForever) L.release_after[static_cast<size_t>(last)].push_back(static_cast<ir::ValueId>(v));
    auto root = static_cast<size_t>(L.storage[v]);
    L.storage_end[root] = std::max(L.storage_end[root], last);
  }

  L.on_host.assign(nv, false);
  for (const ir::Node& node : nodes)
    if (ops::has(node, ops::kHost)) L.on_host[static_cast<size_t>(node.outputs[0])] = true;
  // Persistent state kept in host memory between steps: read by nothing but
  // swap_in (copied to the device) and swap_into (written back).
  {
    std::vector<int8_t> host_only(nv, -1);  // -1 unread, 1 only by those, 0 by another node
    for (const ir::Node& node : nodes)
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        const ir::ValueId v = node.inputs[i];
        if (v == ir::kNoValue) continue;
        const bool copy = node.op == "swap_in" || (node.op == "swap_into" && i == 1);
        int8_t& h = host_only[static_cast<size_t>(v)];
        h = copy && h != 0 ? 1 : 0;
      }
    for (const ir::Value& val : g.values())
      if (ir::is_persistent(val.role) && L.def[static_cast<size_t>(val.id)] < 0 && host_only[static_cast<size_t>(val.id)] == 1)
        L.on_host[static_cast<size_t>(val.id)] = true;
  }

  // Walk the schedule: a storage is allocated by the node defining its owner
  // and freed after storage_end.
  std::vector<int64_t> freed_after(nodes.size(), 0), host_freed_after(nodes.size(), 0);
  for (size_t v = 0; v < nv; ++v) {
    if (L.storage[v] != static_cast<ir::ValueId>(v)) continue;
    int64_t bytes = g.type(static_cast<ir::ValueId>(v)).bytes();
    if (L.on_host[v]) {
      if (L.def[v] < 0) L.host_persistent_bytes += bytes;
      else if (L.storage_end[v] != kForever) host_freed_after[static_cast<size_t>(L.storage_end[v])] += bytes;
      continue;
    }
    if (L.def[v] < 0) {
      MUTWO_ASSERT(ir::is_persistent(g.value(static_cast<ir::ValueId>(v)).role) || L.last_use[v] < 0,
                   "%{} is used but made by no node", g.value(static_cast<ir::ValueId>(v)).name);
      if (ir::is_persistent(g.value(static_cast<ir::ValueId>(v)).role)) L.persistent_bytes += bytes;
      continue;
    }
    if (L.storage_end[v] != kForever) freed_after[static_cast<size_t>(L.storage_end[v])] += bytes;
  }
  L.live_before.resize(nodes.size());
  L.live_during.resize(nodes.size());
  L.live_after.resize(nodes.size());
  int64_t live = L.persistent_bytes, host = L.host_persistent_bytes;
  L.peak_bytes = live;
  L.host_peak_bytes = host;
  for (size_t n = 0; n < nodes.size(); ++n) {
    L.live_before[n] = live;
    for (ir::ValueId v : nodes[n].outputs)
      if (L.owns_storage(v)) (L.on_host[static_cast<size_t>(v)] ? host : live) += g.type(v).bytes();
    L.live_during[n] = live;
    L.host_peak_bytes = std::max(L.host_peak_bytes, host);
    if (live > L.peak_bytes || L.peak_node < 0) {
      L.peak_bytes = std::max(L.peak_bytes, live);
      L.peak_node = static_cast<int32_t>(n);
    }
    live -= freed_after[n];
    host -= host_freed_after[n];
    L.live_after[n] = live;
  }
  return L;
}

}  // namespace mutwo::analysis
