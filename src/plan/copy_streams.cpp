// Copy streams under the compute (copy_streams.h).
#include "plan/copy_streams.h"

#include <algorithm>

#include "support/error.h"

namespace mutwo::plan {

CopyStreams::CopyStreams(std::vector<double> node_ms, double d2h_bytes_per_ms, double h2d_bytes_per_ms, bool overlap)
    : out_free_(node_ms), in_free_(std::move(node_ms)), d2h_(d2h_bytes_per_ms), h2d_(h2d_bytes_per_ms), overlap_(overlap) {
  sum();
}

void CopyStreams::sum() {
  for (auto* pair : {&out_free_, &in_free_}) {
    std::vector<double>& prefix = pair == &out_free_ ? out_sum_ : in_sum_;
    prefix.assign(pair->size() + 1, 0);
    for (size_t n = 0; n < pair->size(); ++n) prefix[n + 1] = prefix[n] + (*pair)[n];
  }
}

double CopyStreams::cost(int64_t bytes, const CopyGap& gap) const {
  MUTWO_ASSERT(d2h_ > 0 && h2d_ > 0, "CopyStreams: copy rates {} and {} bytes/ms", d2h_, h2d_);
  const double out_ms = static_cast<double>(bytes) / d2h_, in_ms = static_cast<double>(bytes) / h2d_;
  if (!overlap_) return out_ms + in_ms;
  const auto a = static_cast<size_t>(gap.before + 1), b = static_cast<size_t>(gap.after);
  MUTWO_ASSERT(a <= b && b < out_sum_.size(), "CopyStreams: gap ({}, {}) of {} nodes", gap.before,
               gap.after, out_free_.size());
  // Optimizer state (gap from the step's start) is written back after its
  // update, at the step's end: nothing hides that copy.
  const double out_hidden = gap.before < 0 ? 0 : out_sum_[b] - out_sum_[a];
  return std::max(0.0, out_ms - out_hidden) + std::max(0.0, in_ms - (in_sum_[b] - in_sum_[a]));
}

CopyPlaced CopyStreams::take(int64_t bytes, const CopyGap& gap) {
  double out_ms = static_cast<double>(bytes) / d2h_, in_ms = static_cast<double>(bytes) / h2d_;
  CopyPlaced at{gap.before + 1, gap.after - 1};
  if (!overlap_) return {gap.before, gap.after};  // serialised: out right after its last read, back right before its use
  for (int32_t n = gap.before + 1; gap.before >= 0 && n < gap.after && out_ms > 0; ++n) {
    const double used = std::min(out_ms, out_free_[static_cast<size_t>(n)]);
    out_free_[static_cast<size_t>(n)] -= used;
    out_ms -= used;
    at.out_done = n;
  }
  for (int32_t n = gap.after - 1; n > gap.before && in_ms > 0; --n) {
    const double used = std::min(in_ms, in_free_[static_cast<size_t>(n)]);
    in_free_[static_cast<size_t>(n)] -= used;
    in_ms -= used;
    at.in_start = n;
  }
  sum();
  return at;
}

double swap_ratio(int64_t bytes, double cost_ms) { return static_cast<double>(bytes) / std::max(cost_ms, 1e-3); }

}  // namespace mutwo::plan
