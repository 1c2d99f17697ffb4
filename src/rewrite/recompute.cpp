// The recomputation rewrite (see recompute.h).
#include "rewrite/recompute.h"

#include <unordered_map>

#include "analysis/reinplace.h"
#include "ops/op.h"
#include "support/error.h"

namespace mutwo::rewrite {

std::vector<bool> kept_at_backward(const ir::Graph& g, const ir::UseIndex& uses, const std::vector<ir::ValueId>& drop) {
  std::vector<bool> dropped(g.num_values(), false);
  for (ir::ValueId v : drop) dropped[static_cast<size_t>(v)] = true;
  std::vector<bool> kept(g.num_values(), false);
  for (const ir::Value& v : g.values()) {
    auto id = static_cast<size_t>(v.id);
    const int32_t p = uses.producer[id];
    if (p < 0) {
      kept[id] = ir::is_persistent(v.role);
      continue;
    }
    const ir::Node& made_by = g.nodes()[static_cast<size_t>(p)];
    if (!ir::is_forward(made_by.phase) || !ops::recomputable(made_by)) {
      kept[id] = true;
      continue;
    }
    bool read_in_bwd = false;
    for (int32_t u : uses.users[id]) read_in_bwd |= ir::is_backward(g.nodes()[static_cast<size_t>(u)].phase);
    // A random output is replayed only where a planner dropped it (its state
    // then costs bytes the simulator counts); otherwise held for any clone.
    kept[id] = (read_in_bwd || ops::has(made_by, ops::kRandom)) && !dropped[id];
  }
  return kept;
}

bool droppable(const ir::Graph& g, ir::ValueId v) {
  if (g.value(v).role != ir::Role::activation) return false;
  ir::UseIndex uses(g);
  int32_t p = uses.producer[static_cast<size_t>(v)];
  return p >= 0 && ops::recomputable(g.nodes()[static_cast<size_t>(p)]);
}

namespace {

// Puts an rng_save node just before every forward node in `state_of`, making
// its state (origin -1: the input graph has no such node).
void save_states(Rewritten& out, const std::vector<ir::Node>& original,
                 const std::unordered_map<int32_t, ir::ValueId>& state_of) {
  std::vector<ir::Node> nodes = std::move(out.graph.nodes());
  std::vector<int32_t> origin = std::move(out.origin);
  out.graph.nodes().clear();
  out.origin.clear();
  for (size_t k = 0; k < nodes.size(); ++k) {
    auto it = nodes[k].phase == ir::Phase::recompute ? state_of.end() : state_of.find(origin[k]);
    if (it != state_of.end()) {
      const ir::Node& random = original[static_cast<size_t>(it->first)];
      ir::Attrs attrs;  // the state of the generator the random node draws from (ops::kSeedOffsetAttr)
      if (random.attrs.has(ops::kSeedOffsetAttr)) attrs.set(ops::kSeedOffsetAttr, ops::seed_offset(random));
      out.graph.append(ir::Node{"rng_save", {}, {it->second}, std::move(attrs), random.phase, random.scope});
      out.origin.push_back(-1);
    }
    out.graph.append(std::move(nodes[k]));
    out.origin.push_back(origin[k]);
  }
}

}  // namespace

Rewritten insert_recomputation(const ir::Graph& g, const std::vector<ir::ValueId>& drop) {
  const auto& nodes = g.nodes();
  ir::UseIndex uses(g);
  for (ir::ValueId v : drop) {
    MUTWO_ASSERT(v >= 0 && static_cast<size_t>(v) < g.num_values(), "no value {}", v);
    MUTWO_ASSERT(g.value(v).role == ir::Role::activation, "%{} is not an activation", g.value(v).name);
  }
  const std::vector<bool> kept = kept_at_backward(g, uses, drop);

  Rewritten out;
  out.graph.name = g.name;
  // A dropped activation is no longer read by the backward pass: in the
  // rewritten step it is a forward temporary.
  out.graph.copy_values_from(g);
  for (ir::ValueId v : drop) out.graph.value(v).role = ir::Role::other;
  out.graph.outputs = g.outputs;
  std::unordered_map<ir::ValueId, ir::ValueId> clone_of;  // original value -> its recomputed clone
  // A recomputed random node replays the generator state where its forward
  // node ran: rng_save's output, appended to the clone's inputs.
  std::unordered_map<int32_t, ir::ValueId> state_of;  // random forward node -> its saved state
  auto replay_state = [&](int32_t p, ir::Node& clone) {
    const ir::Value& first = g.value(nodes[static_cast<size_t>(p)].outputs.at(0));
    ir::ValueId s = out.graph.add_value(out.graph.unique_name(first.name + ".rng_state"), ops::rng_state_type(),
                                        ir::Role::activation);
    state_of.emplace(p, s);
    clone.inputs.push_back(s);
    clone.attrs.set(ops::kRngReplayAttr, int64_t{1});
  };

  // Returns a value usable at the current backward position for `v`,
  // appending clones of its producer (and, recursively, its inputs) as needed.
  auto materialize = [&](auto&& self, ir::ValueId v) -> ir::ValueId {
    if (v == ir::kNoValue || kept[static_cast<size_t>(v)]) return v;
    if (auto it = clone_of.find(v); it != clone_of.end()) return it->second;
    int32_t p = uses.producer[static_cast<size_t>(v)];
    MUTWO_ASSERT(p >= 0, "%{} has no producer to recompute it from", g.value(v).name);
    const ir::Node& src = nodes[static_cast<size_t>(p)];
    MUTWO_ASSERT(ops::recomputable(src), "%{} is made by {}, which writes in place or reads the generator: it must be kept",
                 g.value(v).name, src.op);
    ir::Node clone = src;
    clone.phase = ir::Phase::recompute;
    // A clone never writes state: it leaves out what the op updates in place
    // (batch_norm's running statistics), which must be optional inputs.
    for (int i : ops::op(src.op).mutated_inputs(src)) {
      MUTWO_ASSERT(i >= ops::op(src.op).min_inputs, "{} writes into its required input {}", src.op, i);
      if (static_cast<size_t>(i) < clone.inputs.size()) clone.inputs[static_cast<size_t>(i)] = ir::kNoValue;
    }
    for (ir::ValueId& in : clone.inputs) in = self(self, in);
    if (ops::has(src, ops::kRandom)) replay_state(p, clone);
    clone.outputs.clear();
    for (ir::ValueId o : src.outputs) {
      const ir::Value& ov = g.value(o);
      ir::ValueId c = out.graph.add_value(out.graph.unique_name(ov.name + ".recompute"), ov.type, ir::Role::other);
      clone_of.emplace(o, c);
      clone.outputs.push_back(c);
    }
    out.graph.append(std::move(clone));
    out.origin.push_back(p);
    ++out.clones;
    return clone_of.at(v);
  };

  for (size_t n = 0; n < nodes.size(); ++n) {
    ir::Node node = nodes[n];
    if (ir::is_backward(node.phase))
      for (ir::ValueId& in : node.inputs) in = materialize(materialize, in);
    out.graph.append(std::move(node));
    out.origin.push_back(static_cast<int32_t>(n));
  }
  if (!state_of.empty()) save_states(out, nodes, state_of);
  analysis::reinplace(out.graph);  // a clone may read a storage after a node that overwrote it in `g`
  return out;
}

}  // namespace mutwo::rewrite
