// Swap ops: a storage copied to host memory and back, so the device need not
// hold it across a gap in the step (where recomputation alone cannot fit). The swap
// rewrite (src/rewrite/swap.cpp) emits them; the kernels
// (src/kernels/swap.cpp) run the copies on side streams on CUDA.
//
//   %x.host  = swap_out(%x)         after the last read before the gap; output in host memory (kHost)
//   %x.back  = swap_in(%x.host)     at the prefetch point: a device tensor, being copied into
//   %x.ready = swap_wait(%x.back)   before the first read after the gap: a view of %x.back,
//                                   after which the copy has landed
//
//   swap_into(%m.ready, %m)         optimizer state kept in host memory between steps
//                                   (%m's readers are swap_in and swap_into alone):
//                                   its updated device copy written back into it
//
// Any type, of any dtype; the output is the input's type. Never differentiated.
#include "ops/op.h"
#include "support/error.h"

namespace mutwo::ops {

namespace {

Types same_type(const InferArgs& a) { return {a.input(0)}; }

// A copy moves its bytes once, across the bus: no arithmetic.
double no_flops(const FlopArgs&) { return 0; }

// swap_into: both of one type; no outputs (it writes input 1 in place).
Types into_infer(const InferArgs& a) {
  MUTWO_CHECK(a.input(0) == a.input(1), "swap_into: {} is {}, but {} is {}", a.name(0), ir::to_string(a.input(0)), a.name(1),
              ir::to_string(a.input(1)));
  return {};
}

}  // namespace

void add_swap_ops(std::vector<OpDef>& t) {
  t.push_back({"swap_out", kHost, 1, 1, same_type, nullptr, no_flops});
  t.push_back({"swap_in", 0, 1, 1, same_type, nullptr, no_flops});
  t.push_back({"swap_wait", kView, 1, 1, same_type, nullptr, no_flops});
  t.push_back({"swap_into", kInplace, 2, 2, into_infer, nullptr, no_flops, {}, {1}});
}

}  // namespace mutwo::ops
