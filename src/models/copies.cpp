// N copies of a training step as one graph (see copies.h).
#include "models/copies.h"

#include <fmt/format.h>

#include <algorithm>

#include "ops/op.h"
#include "support/error.h"

namespace mutwo::models {

std::string copy_value_name(size_t copy, std::string_view name) { return fmt::format("copy{}.{}", copy, name); }

namespace {

// Appends copy `i` of `step` to `out`: its values under their copy names, its
// nodes in their order, its outputs after the copies before it.
void append_copy(Copies& out, const ir::Graph& step, size_t i) {
  ir::Graph& g = out.graph;
  std::vector<ir::ValueId>& ids = out.value_of.emplace_back();
  ids.reserve(step.num_values());
  for (const ir::Value& v : step.values()) {
    MUTWO_CHECK(v.init.kind != ir::Init::data,
                "%{} is read from the tensor file {}: copies of a captured step are not supported yet; use a zoo "
                "model (--model)", v.name, step.data_file);
    ids.push_back(g.add_value(copy_value_name(i, v.name), v.type, v.role, v.init));
  }
  auto mapped = [&](ir::ValueId v) { return v == ir::kNoValue ? v : ids.at(static_cast<size_t>(v)); };
  for (const ir::Node& n : step.nodes()) {
    ir::Node c = n;
    for (ir::ValueId& v : c.inputs) v = mapped(v);
    for (ir::ValueId& v : c.outputs) v = mapped(v);
    c.scope = n.scope.empty() ? fmt::format("copy{}", i) : fmt::format("copy{}.{}", i, n.scope);
    if (ops::has(n, ops::kRandom) || ops::has(n, ops::kRngState))
      c.attrs.set(ops::kSeedOffsetAttr, static_cast<int64_t>(i));
    g.append(std::move(c));
  }
  MUTWO_ASSERT(!step.outputs.empty(), "copy {}'s step has no outputs (its loss)", i);
  out.loss_output.push_back(g.outputs.size());
  for (ir::ValueId v : step.outputs) g.outputs.push_back(mapped(v));
}

}  // namespace

Copies compose_copies(const std::vector<ir::Graph>& steps) {
  MUTWO_CHECK(!steps.empty(), "no copies to compose: give at least one (--copies 1 or more)");
  Copies out;
  out.graph.name = fmt::format("{}_x{}", steps.front().name, steps.size());  // one word: the text form's graph name
  for (size_t i = 0; i < steps.size(); ++i) append_copy(out, steps[i], i);
  // Phase by phase (copies.h): every copy's forward, then every copy's loss,
  // backward and update, each copy's nodes in their order.
  std::vector<ir::Node>& nodes = out.graph.nodes();
  for (const ir::Node& n : nodes)
    MUTWO_ASSERT(n.phase != ir::Phase::recompute, "copies of a rewritten step: compose before planning");
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const ir::Node& a, const ir::Node& b) { return a.phase < b.phase; });
  ops::verify(out.graph);
  return out;
}

}  // namespace mutwo::models
