// The kernel table: one ATen kernel per row of the op table (ops::all_ops()),
// looked up by op name. This header is ATen-free (KernelCall is declared
// opaquely; kernel.h defines it); the kernels themselves are in the family
// files beside it (elementwise.cpp, nn.cpp, ...), one per family of src/ops.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace mutwo::kernels {

struct KernelCall;  // kernel.h: ATen tensors in and out
using KernelFn = void (*)(KernelCall&);
// Per-node kernel state built once before the first run (the generic op's
// resolved schema and argument template); passed as KernelCall::state.
using PrepareFn = std::shared_ptr<const void> (*)(const ir::Graph&, const ir::Node&);

struct Kernel {
  KernelFn run = nullptr;
  PrepareFn prepare = nullptr;  // kernel state per node, built by the executor
};

// The kernel of an op. Throws the op table's UserError for an unknown name.
// The table is built on first use and asserts that every op row has a kernel
// and every kernel a row.
const Kernel& kernel(std::string_view op);

// Kernel lists of the op families, collected once by the table (no static
// registration), each beside the family's row list in src/ops.
struct KernelRow {
  std::string_view op;
  Kernel kernel;
};
using KernelRows = std::vector<KernelRow>;
void add_elementwise_kernels(KernelRows& t);
void add_shape_kernels(KernelRows& t);
void add_nn_kernels(KernelRows& t);
void add_optim_kernels(KernelRows& t);
void add_conv_kernels(KernelRows& t);
void add_attention_kernels(KernelRows& t);
void add_layout_kernels(KernelRows& t);
void add_aten_kernels(KernelRows& t);  // aten.cpp: the generic op through the c10 dispatcher
void add_swap_kernels(KernelRows& t);  // swap.cpp: copies to host memory and back, on side streams on CUDA
void add_comm_kernels(KernelRows& t);  // comm.cpp: data-parallel buckets and collectives (collectives.h)

}  // namespace mutwo::kernels
