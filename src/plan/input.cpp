// What every planner reads (see input.h): the profile made plain data and
// checked against its graph, the candidates to drop and to swap, and what
// recomputing a value walks.
#include "plan/input.h"

#include <unistd.h>

#include <algorithm>
#include <set>
#include <unordered_map>

#include "analysis/liveness.h"
#include "ir/text.h"
#include "ops/op.h"
#include "rewrite/recompute.h"
#include "rewrite/swap.h"
#include "support/error.h"

namespace mutwo::plan {

int64_t default_host_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page / 2 : 0;
}

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
  in.h2d_bytes_per_ms = p.h2d_gbps * 1e6;
  in.d2h_bytes_per_ms = p.d2h_gbps * 1e6;
  in.copies_overlap = p.device.rfind("cuda", 0) == 0;
  // On the CPU the "device" is host memory already: a swap there frees
  // nothing real, so it is off unless --host-memory says how much memory
  // counts as apart (the CPU tests of the swap machinery do).
  in.host_limit_bytes = in.copies_overlap ? default_host_limit() : 0;
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
  std::vector<bool> spoiled;  // a group holding what recomputation may not repeat (or replay) is never dropped
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
    const ir::Node& made_by = g.nodes()[static_cast<size_t>(p)];
    if (!ops::recomputable(made_by) || (!in.replay_random && ops::has(made_by, ops::kRandom))) spoiled[it->second] = true;
  }
  std::vector<Candidate> kept;
  for (size_t i = 0; i < out.size(); ++i)
    if (!spoiled[i]) kept.push_back(std::move(out[i]));
  return kept;
}

std::vector<ir::ValueId> swap_candidates(const PlanInput& in) {
  const analysis::Liveness L = analysis::analyze_liveness(in.graph);
  const std::vector<rewrite::Gap> gaps = rewrite::swap_gaps(in.graph, L);
  std::vector<ir::ValueId> out;
  for (const ir::Value& v : in.graph.values())
    if (rewrite::swappable(in.graph, L, gaps, v.id)) out.push_back(v.id);
  return out;
}

RecomputeWalk::RecomputeWalk(const PlanInput& in, const std::vector<ir::ValueId>& drop)
    : in_(in), uses_(in.graph), kept_(rewrite::kept_at_backward(in.graph, uses_, drop)) {}

void RecomputeWalk::walk(ir::ValueId v, const std::function<void(int32_t)>& on_node,
                         const std::function<void(ir::ValueId)>& on_source) const {
  const ir::Graph& g = in_.graph;
  std::set<ir::ValueId> seen;
  std::set<int32_t> walked;
  std::vector<ir::ValueId> stack{v};
  while (!stack.empty()) {
    ir::ValueId x = stack.back();
    stack.pop_back();
    int32_t p = uses_.producer[static_cast<size_t>(x)];
    if (p < 0 || !walked.insert(p).second) continue;
    on_node(p);
    for (ir::ValueId in : g.nodes()[static_cast<size_t>(p)].inputs) {
      if (in == ir::kNoValue || !seen.insert(in).second) continue;
      if (kept_[static_cast<size_t>(in)]) on_source(in);
      else stack.push_back(in);
    }
  }
}

std::vector<ir::ValueId> RecomputeWalk::sources(ir::ValueId v) const {
  std::vector<ir::ValueId> out;
  walk(v, [](int32_t) {}, [&](ir::ValueId s) { out.push_back(s); });
  return out;
}

double RecomputeWalk::ms(ir::ValueId v) const {
  double t = 0;
  walk(v, [&](int32_t n) { t += in_.node_ms[static_cast<size_t>(n)]; }, [](ir::ValueId) {});
  return t;
}

std::vector<ir::ValueId> recompute_sources(const PlanInput& in, const std::vector<ir::ValueId>& drop, ir::ValueId v) {
  return RecomputeWalk(in, drop).sources(v);
}

double recompute_ms(const PlanInput& in, const std::vector<ir::ValueId>& drop, ir::ValueId v) {
  return RecomputeWalk(in, drop).ms(v);
}

}  // namespace mutwo::plan
