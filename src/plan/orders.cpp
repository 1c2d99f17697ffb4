// The candidate orders of a step's independent sub-graphs and the choice
// among them (see orders.h).
#include "plan/orders.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "ir/text.h"
#include "ir/verify.h"
#include "ops/op.h"
#include "plan/plan.h"
#include "profile/profile.h"
#include "support/error.h"

namespace mutwo::plan {

std::string to_string(CopyOrder o) {
  switch (o) {
    case CopyOrder::by_phase: return "by-phase";
    case CopyOrder::sequential: return "sequential";
    case CopyOrder::paired: return "paired";
  }
  return "?";
}

const std::vector<CopyOrder>& copy_orders() {
  static const std::vector<CopyOrder> all = {CopyOrder::by_phase, CopyOrder::sequential, CopyOrder::paired};
  return all;
}

namespace {

// Per sub-graph, its nodes in their order in `g`.
std::vector<std::vector<int32_t>> nodes_by_subgraph(const ir::Graph& g) {
  const std::vector<int32_t> sub = ir::independent_subgraphs(g);
  std::vector<std::vector<int32_t>> out;
  for (size_t n = 0; n < sub.size(); ++n) {
    if (static_cast<size_t>(sub[n]) >= out.size()) out.resize(static_cast<size_t>(sub[n]) + 1);
    out[static_cast<size_t>(sub[n])].push_back(static_cast<int32_t>(n));
  }
  return out;
}

// Sub-graphs that draw from one generator interleave their draws in any order
// but their own: refused (mutwo many gives each copy its own, ops::kSeedOffsetAttr).
void check_own_generators(const ir::Graph& g, const std::vector<std::vector<int32_t>>& subs) {
  std::map<int64_t, size_t> drawn_by;  // seed offset -> sub-graph
  for (size_t s = 0; s < subs.size(); ++s)
    for (int32_t n : subs[s]) {
      const ir::Node& node = g.nodes()[static_cast<size_t>(n)];
      if (!ops::has(node, ops::kRandom) && !ops::has(node, ops::kRngState)) continue;
      auto [it, fresh] = drawn_by.emplace(ops::seed_offset(node), s);
      MUTWO_CHECK(fresh || it->second == s,
                  "sub-graphs {} and {} of graph {} draw from one generator (seed offset {}): their order would change "
                  "their draws; give each its own generator (attribute {})", it->second, s, g.name, it->first,
                  ops::kSeedOffsetAttr);
    }
}

bool in_forward_part(const ir::Node& n) { return ir::is_forward(n.phase); }

}  // namespace

std::vector<int32_t> copy_schedule(const ir::Graph& g, CopyOrder o, const std::vector<double>& node_ms) {
  const auto& nodes = g.nodes();
  for (const ir::Node& n : nodes)
    MUTWO_ASSERT(n.phase != ir::Phase::recompute, "copy_schedule of a rewritten step: order before planning");
  MUTWO_ASSERT(node_ms.empty() || node_ms.size() == nodes.size(), "{} node times for {} nodes", node_ms.size(),
               nodes.size());
  const std::vector<std::vector<int32_t>> subs = nodes_by_subgraph(g);
  std::vector<int32_t> out;
  out.reserve(nodes.size());
  if (subs.size() <= 1) {
    for (size_t n = 0; n < nodes.size(); ++n) out.push_back(static_cast<int32_t>(n));
    return out;
  }
  check_own_generators(g, subs);
  switch (o) {
    case CopyOrder::by_phase:
      // Phase by phase, sub-graph by sub-graph within a phase, each in its own order.
      for (ir::Phase phase : {ir::Phase::forward, ir::Phase::loss, ir::Phase::backward, ir::Phase::optimizer})
        for (const auto& s : subs)
          for (int32_t n : s)
            if (nodes[static_cast<size_t>(n)].phase == phase) out.push_back(n);
      break;
    case CopyOrder::sequential:
      for (const auto& s : subs) out.insert(out.end(), s.begin(), s.end());
      break;
    case CopyOrder::paired: {
      double total = 0;
      for (double ms : node_ms) total += ms;
      auto weight = [&](int32_t n) { return total > 0 ? node_ms[static_cast<size_t>(n)] : 1.0; };
      // Each sub-graph's forward part (a prefix: its phases are in order) and backward part.
      std::vector<std::vector<int32_t>> fwd(subs.size()), bwd(subs.size());
      for (size_t s = 0; s < subs.size(); ++s)
        for (int32_t n : subs[s]) (in_forward_part(nodes[static_cast<size_t>(n)]) ? fwd[s] : bwd[s]).push_back(n);
      // [a, b] interleaved: the next node is the one whose part has done the smaller share of its time.
      auto merge = [&](const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
        double ta = 0, tb = 0, da = 0, db = 0;
        for (int32_t n : a) ta += weight(n);
        for (int32_t n : b) tb += weight(n);
        size_t i = 0, j = 0;
        while (i < a.size() || j < b.size()) {
          const bool take_a = j == b.size() || (i < a.size() && da * (tb > 0 ? tb : 1) <= db * (ta > 0 ? ta : 1));
          if (take_a) {
            da += weight(a[i]);
            out.push_back(a[i++]);
          } else {
            db += weight(b[j]);
            out.push_back(b[j++]);
          }
        }
      };
      out.insert(out.end(), fwd[0].begin(), fwd[0].end());
      for (size_t s = 0; s + 1 < subs.size(); ++s) merge(bwd[s], fwd[s + 1]);
      out.insert(out.end(), bwd.back().begin(), bwd.back().end());
      break;
    }
  }
  MUTWO_ASSERT(out.size() == nodes.size(), "order {} placed {} of {} nodes", to_string(o), out.size(), nodes.size());
  return out;
}

ir::Graph reorder(const ir::Graph& g, const std::vector<int32_t>& schedule) {
  MUTWO_ASSERT(schedule.size() == g.nodes().size(), "a schedule of {} nodes for {}", schedule.size(), g.nodes().size());
  ir::Graph out = g;
  std::vector<ir::Node>& nodes = out.nodes();
  for (size_t k = 0; k < schedule.size(); ++k) nodes[k] = g.nodes().at(static_cast<size_t>(schedule[k]));
  ops::verify(out);
  return out;
}

PlanInput reorder(const PlanInput& in, const std::vector<int32_t>& schedule) {
  PlanInput out = in;
  out.graph = reorder(in.graph, schedule);
  const profile::Profile own = profile::describe(out.graph);
  profile::Profile& p = out.profile;
  p.graph_text = ir::print(out.graph);
  p.values = own.values;
  for (size_t k = 0; k < schedule.size(); ++k) {
    const auto from = static_cast<size_t>(schedule[k]);
    out.node_ms[k] = in.node_ms.at(from);
    out.workspace[k] = in.workspace.at(from);
    const profile::NodeRecord& was = in.profile.nodes.at(from);
    const int64_t was_before = from ? in.profile.nodes[from - 1].predicted_live_after : in.profile.persistent_bytes;
    profile::NodeRecord r = was;
    r.rank = static_cast<int32_t>(k);
    r.predicted_live_after = own.nodes[k].predicted_live_after;
    r.live_by_role = own.nodes[k].live_by_role;
    const int64_t before = k ? own.nodes[k - 1].predicted_live_after : own.persistent_bytes;
    r.live_before = before + (was.live_before - was_before);
    r.live_after = r.predicted_live_after + (was.live_after - was.predicted_live_after);
    r.peak_during = r.live_before + (was.peak_during - was.live_before);
    p.nodes[k] = std::move(r);
  }
  profile::summarize(p);
  return out;
}

namespace {

bool same_time(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)); }

}  // namespace

OrderChoice choose_order(const PlannedStep& p, const PlanOptions& o, const std::vector<CopyOrder>& orders) {
  MUTWO_ASSERT(!orders.empty(), "no orders to choose from");
  // One budget for every order: a fraction's bytes on `p` as given.
  PlanOptions each = o;
  if (o.budget.kind == Budget::Kind::fraction || o.budget.kind == Budget::Kind::bytes) {
    each.budget = Budget::of_bytes(budget_bytes(p, o));
    each.exempt_bytes = 0;
    each.at_least_bytes = 0;
  }
  // Paired interleaves by node count, not by the measured times: the order,
  // and so what a budget drops in it, is a property of the step, the same in
  // every run (measured times judge the planned orders below, never move one).
  const std::vector<double> by_count;
  OrderChoice c;
  for (CopyOrder order : orders) {
    OrderCandidate& k = c.candidates.emplace_back();
    k.order = order;
    k.schedule = copy_schedule(p.input.graph, order, by_count);
    k.step = prepare(reorder(p.input, k.schedule));
    choose_plan(k.step, each);
  }
  const bool lowest = o.budget.kind == Budget::Kind::lowest;
  auto better = [&](const OrderCandidate& a, const OrderCandidate& b) {  // a strictly before b
    const Plan &x = a.step.plan, &y = b.step.plan;
    if (x.feasible != y.feasible) return x.feasible;
    const int64_t px = x.predicted.peak_bytes, py = y.predicted.peak_bytes;
    const double tx = x.predicted.step_ms, ty = y.predicted.step_ms;
    if (lowest || !x.feasible) return px != py ? px < py : !same_time(tx, ty) && tx < ty;
    return !same_time(tx, ty) ? tx < ty : px < py;
  };
  for (size_t i = 1; i < c.candidates.size(); ++i)
    if (better(c.candidates[i], c.candidates[c.chosen])) c.chosen = i;
  return c;
}

}  // namespace mutwo::plan
