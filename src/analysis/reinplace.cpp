// analysis::reinplace (see reinplace.h).
#include "analysis/reinplace.h"

#include "analysis/liveness.h"
#include "ops/op.h"
#include "support/error.h"

namespace mutwo::analysis {

namespace {

// The op whose overwriting variant `variant` is.
const ops::OpDef& plain_form(const ops::OpDef& variant) {
  for (const ops::OpDef& d : ops::all_ops())
    if (d.overwriting == variant.name) return d;
  MUTWO_FAIL("overwriting op {} is no op's variant", variant.name);
}

}  // namespace

void reinplace(ir::Graph& g) {
  // Every such node in its plain form first: liveness then sees the storages
  // and readers as they are without any overwrite.
  std::vector<size_t> sites;
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    ir::Node& node = g.nodes()[n];
    const ops::OpDef& d = ops::op(node.op);
    if (d.has(ops::kOverwrite)) node.op = std::string(plain_form(d).name);
    if (!ops::op(node.op).overwriting.empty() && !node.inputs.empty() && node.inputs[0] != ir::kNoValue)
      sites.push_back(n);
  }
  if (sites.empty()) return;
  const Liveness L = analyze_liveness(g);
  for (size_t n : sites) {
    ir::Node& node = g.nodes()[n];
    auto root = static_cast<size_t>(L.storage[static_cast<size_t>(node.inputs[0])]);
    if (L.def[root] >= 0 && L.storage_end[root] == static_cast<int32_t>(n))
      node.op = std::string(ops::op(node.op).overwriting);
  }
}

}  // namespace mutwo::analysis
