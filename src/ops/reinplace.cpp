// ops::reinplace (op.h): PyTorch's reinplace pass for the ops the table gives
// an overwriting variant. A node takes the variant where it is the last reader
// of its input 0's storage, which a node made; elsewhere the plain op. Decided
// afresh on every run: the recomputation rewrite runs it again after adding
// readers. ATen-free.
#include <cstdint>
#include <string>
#include <vector>

#include "ops/op.h"
#include "support/error.h"

namespace mutwo::ops {

void reinplace(ir::Graph& g) {
  auto& nodes = g.nodes();
  const size_t nv = g.num_values();
  auto plain_form = [](const OpDef& variant) -> const OpDef& {  // the op whose overwriting variant this is
    for (const OpDef& d : all_ops())
      if (d.overwriting == variant.name) return d;
    MUTWO_ASSERT(false, "overwriting op {} is no op's variant", variant.name);
    return variant;
  };
  // Storage roots through view ops, other than the overwriting ones (their
  // outputs are the new contents), and the last node reading each root.
  std::vector<ir::ValueId> root(nv);
  std::vector<int32_t> made_by(nv, -1), last_read(nv, -1);
  for (size_t v = 0; v < nv; ++v) root[v] = static_cast<ir::ValueId>(v);
  for (size_t n = 0; n < nodes.size(); ++n) {
    const ir::Node& node = nodes[n];
    for (ir::ValueId v : node.inputs)
      if (v != ir::kNoValue) last_read[static_cast<size_t>(root[static_cast<size_t>(v)])] = static_cast<int32_t>(n);
    for (ir::ValueId v : node.outputs) made_by[static_cast<size_t>(v)] = static_cast<int32_t>(n);
    const OpDef& d = op(node.op);
    if (d.has(kView) && !d.has(kOverwrite))
      root[static_cast<size_t>(node.outputs[0])] = root[static_cast<size_t>(node.inputs[0])];
  }
  for (ir::ValueId v : g.outputs) last_read[static_cast<size_t>(root[static_cast<size_t>(v)])] = INT32_MAX;
  for (size_t n = 0; n < nodes.size(); ++n) {
    ir::Node& node = nodes[n];
    const OpDef& d = op(node.op);
    if (d.overwriting.empty() && !d.has(kOverwrite)) continue;
    const OpDef& plain = d.has(kOverwrite) ? plain_form(d) : d;
    if (node.inputs.empty() || node.inputs[0] == ir::kNoValue) continue;
    auto r = static_cast<size_t>(root[static_cast<size_t>(node.inputs[0])]);
    bool dies_here = made_by[r] >= 0 && last_read[r] == static_cast<int32_t>(n);
    node.op = std::string(dies_here ? plain.overwriting : plain.name);
  }
}

}  // namespace mutwo::ops
