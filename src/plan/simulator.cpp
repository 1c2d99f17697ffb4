// The memory simulator (mu-TWO's Algorithm G for our executor): rewrite, then
// liveness, then the measured workspace and times of the nodes.
#include <algorithm>
#include <unordered_map>

#include "analysis/liveness.h"
#include "ir/text.h"
#include "profile/profile.h"
#include "ops/op.h"
#include "plan/plan.h"
#include "rewrite/recompute.h"
#include "support/error.h"

namespace mutwo::plan {

PlanInput make_input(const profile::Profile& p) {
  PlanInput in;
  try {
    in.graph = ir::parse(p.graph_text);
    ops::verify(in.graph);
  } catch (const UserError& e) {
    MUTWO_FAIL("the profile's graph does not load ({}); rerun mutwo profile with this version of mutwo", e.what());
  }
  MUTWO_CHECK(in.graph.nodes().size() == p.nodes.size(), "the profile has {} node records for a graph of {} nodes",
              p.nodes.size(), in.graph.nodes().size());
  // The records must describe this graph, value for value (by name: the
  // parsed graph declares its inputs first) and node for node: what the
  // graph alone decides is compared with describe's records of it.
  MUTWO_CHECK(p.values.size() == in.graph.num_values(), "the profile has {} value records for a graph of {} values",
              p.values.size(), in.graph.num_values());
  std::unordered_map<std::string, const profile::ValueRecord*> record_of;
  for (const profile::ValueRecord& r : p.values)
    MUTWO_CHECK(record_of.emplace(r.name, &r).second, "values: two records of %{}", r.name);
  const profile::Profile own = profile::describe(in.graph);
  for (const profile::ValueRecord& e : own.values) {
    auto it = record_of.find(e.name);
    MUTWO_CHECK(it != record_of.end(), "values: no record of %{}, which the graph has", e.name);
    const profile::ValueRecord& r = *it->second;
    MUTWO_CHECK(r.bytes == e.bytes, "values: the record of %{} says {} bytes, the graph {}", r.name, r.bytes, e.bytes);
    MUTWO_CHECK(r.role == e.role && r.def == e.def && r.last_fwd == e.last_fwd && r.first_bwd == e.first_bwd &&
                    r.last_bwd == e.last_bwd && r.random == e.random && r.view == e.view,
                "values: the record of %{} (role, def, last_fwd, first_bwd, last_bwd, random, view) is not what the "
                "graph says ({}, {}, {}, {}, {}, {}, {})",
                r.name, ir::to_string(e.role), e.def, e.last_fwd, e.first_bwd, e.last_bwd, e.random, e.view);
  }
  for (size_t n = 0; n < p.nodes.size(); ++n) {
    const profile::NodeRecord &r = p.nodes[n], &e = own.nodes[n];
    MUTWO_CHECK(r.name == e.name, "nodes[{}]: the record is of '{}', the graph's node {} makes '{}'", n, r.name, n, e.name);
    MUTWO_CHECK(r.op == e.op && r.phase == e.phase, "nodes[{}]: the record says {} in phase {}, the graph {} in {}", n,
                r.op, ir::to_string(r.phase), e.op, ir::to_string(e.phase));
    MUTWO_CHECK(r.input_roles == e.input_roles && r.output_roles == e.output_roles,
                "nodes[{}]: the roles of %{}'s inputs or outputs are not the graph's", n, r.name);
  }
  in.profile = p;
  for (const auto& n : p.nodes) {
    in.node_ms.push_back(n.ms);
    in.workspace.push_back(std::max<int64_t>(0, n.workspace_bytes));
  }
  // What the device held beyond the graph's own tensors, at the most: on CUDA
  // the libraries' workspaces (cuBLAS, cuBLASLt), some made lazily during the
  // step; on CPU nothing. Counted in every prediction, so plans stay on the
  // safe side of what the allocator will report.
  for (const auto& n : p.nodes) {
    in.start_extra_bytes = std::max(in.start_extra_bytes, n.live_before - (n.rank ? p.nodes[static_cast<size_t>(n.rank - 1)].predicted_live_after : p.persistent_bytes));
    in.start_extra_bytes = std::max(in.start_extra_bytes, n.live_after - n.predicted_live_after);
  }
  return in;
}

std::vector<Candidate> candidates(const PlanInput& in) {
  const ir::Graph& g = in.graph;
  analysis::Liveness L = analysis::analyze_liveness(g);
  ir::UseIndex uses(g);
  std::unordered_map<ir::ValueId, size_t> by_owner;
  std::vector<Candidate> out;
  std::vector<bool> spoiled;  // a group holding what recomputation may not repeat is never dropped
  for (const ir::Value& v : g.values()) {
    if (v.role != ir::Role::activation) continue;
    ir::ValueId owner = L.storage[static_cast<size_t>(v.id)];
    if (L.def[static_cast<size_t>(owner)] < 0) continue;  // a view of a persistent value: nothing to free
    auto [it, fresh] = by_owner.emplace(owner, out.size());
    if (fresh) {
      out.push_back(Candidate{owner, {}, g.type(owner).bytes(), uses.producer[static_cast<size_t>(owner)]});
      spoiled.push_back(false);
    }
    out[it->second].members.push_back(v.id);
    int32_t p = uses.producer[static_cast<size_t>(v.id)];
    if (!ops::recomputable(g.nodes()[static_cast<size_t>(p)])) spoiled[it->second] = true;
  }
  std::vector<Candidate> kept;
  for (size_t i = 0; i < out.size(); ++i)
    if (!spoiled[i]) kept.push_back(std::move(out[i]));
  return kept;
}

Simulation simulate(const PlanInput& in, const std::vector<ir::ValueId>& drop) {
  rewrite::Recomputed r = rewrite::insert_recomputation(in.graph, drop);
  analysis::Liveness L = analysis::analyze_liveness(r.graph);
  Simulation s;
  s.recompute_nodes = r.clones;
  const size_t nn = r.graph.nodes().size();
  s.live_after.resize(nn);
  s.peak_bytes = L.persistent_bytes + in.start_extra_bytes;
  for (size_t n = 0; n < nn; ++n) {
    auto origin = static_cast<size_t>(r.origin[n]);
    int64_t during = L.live_during[n] + in.workspace[origin] + in.start_extra_bytes;
    s.live_after[n] = L.live_after[n] + in.start_extra_bytes;
    if (during > s.peak_bytes || s.peak_node < 0) {
      s.peak_bytes = std::max(s.peak_bytes, during);
      s.peak_node = static_cast<int32_t>(n);
    }
    if (r.graph.nodes()[n].phase == ir::Phase::recompute) s.extra_ms += in.node_ms[origin];
  }
  // The peak's breakdown: storages live during the peak node, charged as the
  // profile charges them (analysis::charged_roles).
  s.idle_at_peak.assign(in.graph.num_values(), false);
  if (s.peak_node >= 0) {
    auto k = s.peak_node;
    // Per storage: its last read in the forward pass and its first read by the
    // backward pass or a recomputation. Dropping a value frees its storage
    // between the two, and only there.
    const auto& rn = r.graph.nodes();
    std::vector<int32_t> last_fwd(r.graph.num_values(), -1), first_bwd(r.graph.num_values(), INT32_MAX);
    for (size_t n = 0; n < nn; ++n) {
      const bool fwd = ir::is_forward(rn[n].phase);
      const bool bwd = ir::is_backward(rn[n].phase);
      for (ir::ValueId v : rn[n].inputs) {
        if (v == ir::kNoValue) continue;
        auto owner = static_cast<size_t>(L.storage[static_cast<size_t>(v)]);
        if (fwd) last_fwd[owner] = static_cast<int32_t>(n);
        if (bwd) first_bwd[owner] = std::min(first_bwd[owner], static_cast<int32_t>(n));
      }
    }
    for (size_t v = 0; v < in.graph.num_values(); ++v) {
      auto owner = static_cast<size_t>(L.storage[v]);
      s.idle_at_peak[v] = L.def[owner] >= 0 && L.def[owner] < k && last_fwd[owner] < k && first_bwd[owner] > k;
    }
    const std::vector<ir::Role> storage_role = analysis::charged_roles(r.graph, L);
    for (const ir::Value& v : r.graph.values()) {
      auto id = static_cast<size_t>(v.id);
      if (!L.owns_storage(v.id)) continue;
      bool live = L.def[id] < 0 ? ir::is_persistent(v.role) : (L.def[id] <= k && L.storage_end[id] >= k);
      if (live) s.peak_by_role[static_cast<size_t>(storage_role[id])] += v.type.bytes();
    }
    const int64_t workspace = in.workspace[static_cast<size_t>(r.origin[static_cast<size_t>(k)])];
    s.peak_by_role[static_cast<size_t>(ir::Role::other)] += workspace + in.start_extra_bytes;
    // The peak node's working set: the storages it reads and writes, and its workspace.
    const ir::Node& peak = rn[static_cast<size_t>(k)];
    std::vector<size_t> touched;
    for (const auto* list : {&peak.inputs, &peak.outputs})
      for (ir::ValueId v : *list)
        if (v != ir::kNoValue) touched.push_back(static_cast<size_t>(L.storage[static_cast<size_t>(v)]));
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    s.peak_working_bytes = workspace;
    for (size_t owner : touched) s.peak_working_bytes += r.graph.values()[owner].type.bytes();
    s.peak_op = peak.op;
  }
  return s;
}

Plan finish(const PlanInput& in, std::string planner, int64_t budget, std::vector<ir::ValueId> drop) {
  Plan p;
  p.planner = std::move(planner);
  p.budget_bytes = budget;
  p.drop = std::move(drop);
  p.predicted = simulate(in, p.drop);
  p.feasible = p.predicted.peak_bytes <= budget;
  return p;
}

}  // namespace mutwo::plan
