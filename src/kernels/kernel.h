// What a kernel sees: ATen tensors for its inputs and slots for its outputs.
// Included only by the kernel family files (src/kernels/*.cpp), the runtime
// and tests that run kernels; the op table (src/ops) never sees ATen.
#pragma once

#include <ATen/ATen.h>

#include "ir/graph.h"

namespace mutwo::kernels {

class Collectives;  // collectives.h: the other ranks, for the data-parallel kernels

struct KernelCall {
  const ir::Node& node;
  const at::Tensor* const* in;  // one per node input; an undefined tensor for an absent optional
  at::Tensor* const* out;       // one per node output, to be assigned
  at::TensorOptions options;    // device of the step (for ops without inputs)
  int64_t step = 1;             // 1-based optimizer step (bias correction, first momentum step)
  at::Generator generator;      // the executor's, for random ops
  const void* state = nullptr;  // what the op's Kernel::prepare built for this node, if it has one
  Collectives* comm = nullptr;  // the process group (data-parallel steps only)

  const at::Tensor& input(size_t i) const { return *in[i]; }
  at::Tensor& output(size_t i) const { return *out[i]; }
};

// A copy of `t` in host memory as the swap kernels keep it (swap.cpp): pinned
// where CUDA is present, else outside the CPU allocator's counting. For state
// kept in host memory between steps (the executor's initial values).
at::Tensor host_tensor(const at::Tensor& t);

// The end of a step with swap nodes: the compute stream waits for both copy
// streams (swap.cpp), so the step's last copies (optimizer state written
// back) are done when it is, and a captured CUDA graph joins every stream it
// forked. No-op on the CPU.
void join_copies(const c10::Device& device);

inline at::ScalarType to_aten(ir::DType t) {
  switch (t) {
    case ir::DType::f32: return at::kFloat;
    case ir::DType::f64: return at::kDouble;
    case ir::DType::f16: return at::kHalf;
    case ir::DType::bf16: return at::kBFloat16;
    case ir::DType::i64: return at::kLong;
    case ir::DType::i32: return at::kInt;
    case ir::DType::boolean: return at::kBool;
    case ir::DType::u8: return at::kByte;
  }
  return at::kFloat;
}

}  // namespace mutwo::kernels
