// The records of a Profile that come from the graph alone (describe: names,
// roles, lifetimes, FLOPs, predicted live bytes; live_by_role), from the op
// table and the liveness analysis. ATen-free: the profiler (profiler.cpp)
// fills in the measured fields; planners and tests use these without running.
#include "analysis/liveness.h"
#include "ir/text.h"
#include "ops/op.h"
#include "profile/profile.h"
#include "support/error.h"

namespace mutwo::profile {

LiveByRole live_by_role(const ir::Graph& g) {
  analysis::Liveness L = analysis::analyze_liveness(g);
  const size_t nn = g.nodes().size();
  const std::vector<ir::Role> storage_role = analysis::charged_roles(g, L);
  using Row = std::array<int64_t, ir::kNumRoles>;
  std::vector<Row> made(nn), freed(nn);
  Row live{};
  for (const ir::Value& v : g.values()) {
    auto id = static_cast<size_t>(v.id);
    if (!L.owns_storage(v.id) || L.on_host[id]) continue;  // host copies take no device memory
    auto r = static_cast<size_t>(storage_role[id]);
    int64_t bytes = v.type.bytes();
    if (L.def[id] < 0) {
      if (ir::is_persistent(v.role)) live[r] += bytes;
      continue;
    }
    made[static_cast<size_t>(L.def[id])][r] += bytes;
    if (L.storage_end[id] != analysis::kForever) freed[static_cast<size_t>(L.storage_end[id])][r] += bytes;
  }
  LiveByRole out;
  out.during.resize(nn);
  out.after.resize(nn);
  for (size_t n = 0; n < nn; ++n) {
    for (size_t r = 0; r < live.size(); ++r) live[r] += made[n][r];
    out.during[n] = live;
    for (size_t r = 0; r < live.size(); ++r) live[r] -= freed[n][r];
    out.after[n] = live;
  }
  return out;
}

Profile describe(const ir::Graph& g) {
  analysis::Liveness L = analysis::analyze_liveness(g);
  const auto& nodes = g.nodes();
  Profile p;
  p.graph_text = ir::print(g);
  p.persistent_bytes = L.persistent_bytes;
  for (size_t n = 0; n < nodes.size(); ++n) {
    const ir::Node& node = nodes[n];
    NodeRecord r;
    r.rank = static_cast<int32_t>(n);
    r.name = node.outputs.empty() ? fmt::format("{}@{}", node.op, n) : g.value(node.outputs[0]).name;
    r.op = ops::display_name(node);
    r.phase = node.phase;
    r.scope = node.scope;
    r.flops = ops::flops(g, node);
    r.bytes_moved = ops::bytes_moved(g, node);
    r.predicted_live_after = L.live_after[n];
    for (ir::ValueId v : node.inputs)
      if (v != ir::kNoValue) r.input_roles.push_back(g.value(v).role);
    for (ir::ValueId v : node.outputs) r.output_roles.push_back(g.value(v).role);
    p.nodes.push_back(std::move(r));
  }
  LiveByRole by_role = live_by_role(g);
  for (size_t n = 0; n < nodes.size(); ++n) p.nodes[n].live_by_role = by_role.during[n];
  ir::UseIndex uses(g);
  for (const ir::Value& v : g.values()) {
    ValueRecord r;
    auto id = static_cast<size_t>(v.id);
    r.name = v.name;
    r.bytes = v.type.bytes();
    r.role = v.role;
    r.def = L.def[id];
    r.view = !L.owns_storage(v.id);
    r.random = r.def >= 0 && ops::has(nodes[static_cast<size_t>(r.def)], ops::kRandom);
    for (int32_t u : uses.users[id]) {
      if (ir::is_backward(nodes[static_cast<size_t>(u)].phase)) {
        if (r.first_bwd < 0) r.first_bwd = u;
        r.last_bwd = u;
      } else if (ir::is_forward(nodes[static_cast<size_t>(u)].phase)) {
        r.last_fwd = u;
      }
    }
    p.values.push_back(std::move(r));
  }
  return p;
}

void summarize(Profile& p) {
  p.node_ms_sum = 0;
  p.peak_bytes = 0;
  p.peak_node = -1;
  for (size_t n = 0; n < p.nodes.size(); ++n) {
    const NodeRecord& r = p.nodes[n];
    p.node_ms_sum += r.ms;
    if (r.peak_during > p.peak_bytes) {
      p.peak_bytes = r.peak_during;
      p.peak_node = static_cast<int32_t>(n);
    }
  }
  if (p.peak_node >= 0) {
    const NodeRecord& k = p.nodes[static_cast<size_t>(p.peak_node)];
    p.peak_by_role = k.live_by_role;
    p.peak_workspace_bytes = k.workspace_bytes;
  }
  // Idle time of a value: the time of the nodes strictly between its last
  // forward use and its first backward use.
  std::vector<double> prefix(p.nodes.size() + 1, 0);
  for (size_t n = 0; n < p.nodes.size(); ++n) prefix[n + 1] = prefix[n] + p.nodes[n].ms;
  for (ValueRecord& v : p.values)
    if (v.first_bwd >= 0 && v.last_fwd >= 0 && v.last_fwd < v.first_bwd)
      v.idle_ms = prefix[static_cast<size_t>(v.first_bwd)] - prefix[static_cast<size_t>(v.last_fwd) + 1];
}

}  // namespace mutwo::profile
