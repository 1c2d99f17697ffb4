// Structural and type verification of a graph (see verify.h).
#include "ir/verify.h"

#include "ir/text.h"
#include "support/error.h"

namespace mutwo::ir {

namespace {

int phase_rank(Phase p) {
  switch (p) {
    case Phase::forward: return 0;
    case Phase::loss: return 1;
    case Phase::backward:
    case Phase::recompute: return 2;
    case Phase::optimizer: return 3;
  }
  return 0;
}

// The root of `v` in a union-find forest, halving paths on the way.
int32_t root(std::vector<int32_t>& parent, int32_t v) {
  while (parent[static_cast<size_t>(v)] != v) {
    parent[static_cast<size_t>(v)] = parent[static_cast<size_t>(parent[static_cast<size_t>(v)])];
    v = parent[static_cast<size_t>(v)];
  }
  return v;
}

}  // namespace

std::vector<int32_t> independent_subgraphs(const Graph& g) {
  const auto nv = static_cast<int32_t>(g.num_values());
  std::vector<int32_t> parent(static_cast<size_t>(nv));
  for (int32_t v = 0; v < nv; ++v) parent[static_cast<size_t>(v)] = v;
  auto first_value = [&](const Node& n) {  // the node's first value in range, or kNoValue
    for (const auto* list : {&n.inputs, &n.outputs})
      for (ValueId v : *list)
        if (v >= 0 && v < nv) return v;
    return kNoValue;
  };
  for (const Node& n : g.nodes()) {
    const ValueId a = first_value(n);
    if (a == kNoValue) continue;
    for (const auto* list : {&n.inputs, &n.outputs})
      for (ValueId v : *list)
        if (v >= 0 && v < nv) parent[static_cast<size_t>(root(parent, v))] = root(parent, a);
  }
  std::vector<int32_t> index_of_root(static_cast<size_t>(nv), -1);
  std::vector<int32_t> out;
  out.reserve(g.nodes().size());
  int32_t count = 0;
  for (const Node& n : g.nodes()) {
    const ValueId a = first_value(n);
    if (a == kNoValue) {
      out.push_back(count++);
      continue;
    }
    int32_t& index = index_of_root[static_cast<size_t>(root(parent, a))];
    if (index < 0) index = count++;
    out.push_back(index);
  }
  return out;
}

void verify(const Graph& g, const OpChecker& check) {
  const auto& nodes = g.nodes();
  std::vector<bool> device_copy(g.num_values(), false);  // swap_wait's outputs
  for (const Node& m : nodes)
    if (m.op == "swap_wait" && m.outputs.size() == 1 && m.outputs[0] >= 0 && static_cast<size_t>(m.outputs[0]) < g.num_values())
      device_copy[static_cast<size_t>(m.outputs[0])] = true;
  std::vector<int32_t> producer(g.num_values(), -1);
  auto where = [&](size_t n) { return fmt::format("verifier: node {} `{}`", n, print_node(g, nodes[n])); };

  // The phase rule (verify.h): per independent sub-graph, the latest phase so far.
  const std::vector<int32_t> subgraph = independent_subgraphs(g);
  std::vector<int> last_phase(nodes.size(), 0);
  for (size_t n = 0; n < nodes.size(); ++n) {
    const Node& node = nodes[n];
    for (ValueId v : node.inputs) {
      if (v == kNoValue) continue;
      MUTWO_CHECK(v >= 0 && static_cast<size_t>(v) < g.num_values(), "{}: input id {} does not exist", where(n), v);
      const Value& val = g.value(v);
      if (producer[static_cast<size_t>(v)] < 0 && !is_persistent(val.role))
        MUTWO_FAIL("{}: %{} is used before it is defined (it has role {} and is made by no earlier node)", where(n),
                   val.name, to_string(val.role));
    }
    for (ValueId v : node.outputs) {
      MUTWO_CHECK(v >= 0 && static_cast<size_t>(v) < g.num_values(), "{}: output id {} does not exist", where(n), v);
      const Value& val = g.value(v);
      MUTWO_CHECK(producer[static_cast<size_t>(v)] < 0, "{}: %{} already has a producer, node {}", where(n), val.name,
                  producer[static_cast<size_t>(v)]);
      MUTWO_CHECK(!is_persistent(val.role), "{}: %{} has role {}, which no node may produce (it lives across steps)",
                  where(n), val.name, to_string(val.role));
      if (val.role == Role::gradient)
        MUTWO_CHECK(node.phase == Phase::backward, "{}: gradient %{} is made in phase {}, not in the backward pass",
                    where(n), val.name, to_string(node.phase));
      if (val.role == Role::activation)
        MUTWO_CHECK(is_forward(node.phase),
                    "{}: activation %{} is made in phase {}; activations are made in the forward pass", where(n),
                    val.name, to_string(node.phase));
      producer[static_cast<size_t>(v)] = static_cast<int32_t>(n);
    }
    const int rank = phase_rank(node.phase);
    int& last = last_phase[static_cast<size_t>(subgraph[n])];
    MUTWO_CHECK(rank >= last,
                "{}: phase {} comes after a later phase; the order must be fwd, loss, bwd, optim (within each "
                "independent sub-graph: nodes that share values)",
                where(n), to_string(node.phase));
    last = rank;

    OpCheck expect;
    try {
      expect = check(g, node);
    } catch (const UserError& e) {
      MUTWO_FAIL("{}: {}", where(n), e.what());
    }
    MUTWO_CHECK(expect.outputs.size() == node.outputs.size(), "{}: op {} makes {} outputs, the node has {}", where(n),
                node.op, expect.outputs.size(), node.outputs.size());
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const Value& val = g.value(node.outputs[i]);
      MUTWO_CHECK(val.type == expect.outputs[i], "{}: %{} is declared {} but {} makes {}", where(n), val.name,
                  to_string(val.type), node.op, to_string(expect.outputs[i]));
    }
    for (int idx : expect.mutated_inputs) {
      if (static_cast<size_t>(idx) >= node.inputs.size() || node.inputs[static_cast<size_t>(idx)] == kNoValue) continue;
      ValueId v = node.inputs[static_cast<size_t>(idx)];
      // Or the device copy of state kept in host memory between steps (swap_wait's output, rewrite/swap.h).
      MUTWO_CHECK((is_persistent(g.value(v).role) && g.value(v).role != Role::input) || device_copy[static_cast<size_t>(v)],
                  "{}: op {} writes into %{}, which is not a parameter, optimizer state or buffer", where(n), node.op,
                  g.value(v).name);
    }
  }
  // Activations: made in the forward pass and used again in the backward pass.
  UseIndex uses(g);
  for (const Value& val : g.values()) {
    if (val.role != Role::activation) continue;
    bool used_in_backward = false;
    for (int32_t u : uses.users[static_cast<size_t>(val.id)])
      used_in_backward |= is_backward(nodes[static_cast<size_t>(u)].phase);
    MUTWO_CHECK(used_in_backward, "verifier: %{} has role activation but no backward node uses it", val.name);
  }
  for (ValueId v : g.outputs)
    MUTWO_CHECK(v >= 0 && static_cast<size_t>(v) < g.num_values(), "verifier: graph output id {} does not exist", v);
}

}  // namespace mutwo::ir
