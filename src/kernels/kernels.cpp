// The kernel table itself: collects the kernels of every op family once,
// checks them against the op table's rows, and answers lookups by op name.
#include "kernels/kernels.h"

#include <unordered_map>

#include "ops/op.h"
#include "support/error.h"

namespace mutwo::kernels {

namespace {

struct Table {
  KernelRows rows;
  std::unordered_map<std::string_view, size_t> index;
  Table() {
    add_elementwise_kernels(rows);
    add_shape_kernels(rows);
    add_nn_kernels(rows);
    add_optim_kernels(rows);
    add_conv_kernels(rows);
    add_attention_kernels(rows);
    add_layout_kernels(rows);
    add_aten_kernels(rows);
    add_swap_kernels(rows);
    add_comm_kernels(rows);
    for (size_t i = 0; i < rows.size(); ++i) {
      MUTWO_ASSERT(rows[i].kernel.run, "the kernel of op {} is null", rows[i].op);
      MUTWO_ASSERT(ops::find_op(rows[i].op), "kernel {} has no row in the op table", rows[i].op);
      MUTWO_ASSERT(index.emplace(rows[i].op, i).second, "op {} has two kernels", rows[i].op);
    }
    for (const ops::OpDef& d : ops::all_ops()) MUTWO_ASSERT(index.count(d.name), "op {} has no kernel", d.name);
  }
};

const Table& table() {
  static const Table t;  // built on first use, not by static registration
  return t;
}

}  // namespace

const Kernel& kernel(std::string_view op) {
  const Table& t = table();
  auto it = t.index.find(op);
  if (it == t.index.end()) ops::op(op);  // an unknown op: the op table's UserError, listing the known ones
  MUTWO_ASSERT(it != t.index.end(), "op {} has no kernel", op);
  return t.rows[it->second].kernel;
}

}  // namespace mutwo::kernels
