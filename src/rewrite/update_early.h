// The early-update rewrite: each parameter's optimizer update moved from the
// end of the step to right after the backward pass is done with it (its
// gradient complete, its last read past), in buckets, so a gradient is freed
// as soon as it is used rather than held to the end of the backward pass
// (PyTorch's optimizer-in-backward, by post-accumulate-grad hooks). The
// arithmetic per parameter is unchanged (the multi-tensor kernels work tensor
// by tensor): losses and parameters stay bit for bit.
//
// Contract:
//   before: a verified training step, recomputation inserted (its clones'
//           reads of parameters count); no collective nodes (data-parallel
//           steps keep their optimizer where the collectives put it: the
//           graph is returned unchanged).
//   after:  a verified graph, value ids unchanged; each multi-tensor optimizer
//           node (sgd_step, adam_step) replaced by nodes of phase bwd (scope
//           "optimizer"), one per bucket of about kUpdateBucket bytes of
//           parameters ordered by when they are ready, each placed right after
//           the last node its parameters wait for. Split nodes take their
//           parameters' share of the original node's time (Rewritten::share).
#pragma once

#include <cstdint>

#include "rewrite/recompute.h"

namespace mutwo::rewrite {

inline constexpr int64_t kUpdateBucket = int64_t{32} << 20;

Rewritten update_early(const Rewritten& r);

}  // namespace mutwo::rewrite
