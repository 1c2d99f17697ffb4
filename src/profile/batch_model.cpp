// The profile at another batch, from measured ones (see batch_model.h).
#include "profile/batch_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "analysis/liveness.h"
#include "ops/op.h"
#include "support/error.h"

namespace mutwo::profile {

namespace {

bool same_nodes(const Profile& a, const Profile& b) {
  if (a.nodes.size() != b.nodes.size()) return false;
  for (size_t n = 0; n < a.nodes.size(); ++n)
    if (a.nodes[n].op != b.nodes[n].op || a.nodes[n].phase != b.nodes[n].phase) return false;
  return true;
}

// y at x on the line through (x0, y0) and (x1, y1); (x0 == x1: y0).
double line(double x, double x0, double y0, double x1, double y1) {
  return x1 == x0 ? y0 : y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}

}  // namespace

bool BatchModel::has(int64_t batch) const {
  return std::any_of(points_.begin(), points_.end(), [&](const Point& p) { return p.batch == batch; });
}

void BatchModel::add(const ir::Graph& g, const Profile& measured) {
  MUTWO_ASSERT(measured.batch > 0 && measured.nodes.size() == g.nodes().size(), "a profile of batch {} with {} nodes",
               measured.batch, measured.nodes.size());
  if (has(measured.batch)) return;
  const analysis::Liveness L = analysis::analyze_liveness(g);
  Point p{measured.batch, measured, {}, {}, {}, {}};
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const NodeRecord& r = measured.nodes[n];
    p.ms.push_back(r.ms);
    p.extra_workspace.push_back(std::max<int64_t>(0, r.workspace_bytes) - ops::workspace_bytes(g, g.nodes()[n]));
    p.beyond_before.push_back(r.live_before - L.live_before[n]);
    p.beyond_after.push_back(r.live_after - L.live_after[n]);
  }
  points_.push_back(std::move(p));
  std::sort(points_.begin(), points_.end(), [](const Point& a, const Point& b) { return a.batch < b.batch; });
}

Profile BatchModel::at(const ir::Graph& g, int64_t batch) const {
  Profile p = estimate_profile(g, points_.empty() ? device_ : points_.front().profile.device);
  p.batch = batch;
  if (points_.empty() || !same_nodes(p, points_.front().profile)) return p;
  // The two measured batches nearest `batch` (by distance; the lower first).
  std::vector<const Point*> near;
  for (const Point& q : points_) near.push_back(&q);
  std::stable_sort(near.begin(), near.end(), [&](const Point* a, const Point* b) {
    return std::llabs(a->batch - batch) < std::llabs(b->batch - batch);
  });
  const Point& a = *near[0];
  const Point& b = near.size() > 1 ? *near[1] : a;
  const auto x = static_cast<double>(batch), xa = static_cast<double>(a.batch), xb = static_cast<double>(b.batch);
  const analysis::Liveness L = analysis::analyze_liveness(g);
  for (size_t n = 0; n < p.nodes.size(); ++n) {
    NodeRecord& r = p.nodes[n];
    r.ms = &a == &b ? a.ms[n] * x / xa : std::max(0.0, line(x, xa, a.ms[n], xb, b.ms[n]));
    const double extra = line(x, xa, static_cast<double>(a.extra_workspace[n]), xb, static_cast<double>(b.extra_workspace[n]));
    r.workspace_bytes = std::max<int64_t>(0, ops::workspace_bytes(g, g.nodes()[n]) + std::llround(extra));
    r.live_before = L.live_before[n] + a.beyond_before[n];
    r.live_after = L.live_after[n] + a.beyond_after[n];
    r.peak_during = L.live_during[n] + r.workspace_bytes + a.beyond_before[n];
  }
  summarize(p);
  p.step_ms = p.node_ms_sum;
  p.model = a.profile.model;
  p.iters = p.warmup = 0;  // nothing ran at this batch
  p.h2d_gbps = a.profile.h2d_gbps;
  p.d2h_gbps = a.profile.d2h_gbps;
  p.device_peak_bytes = a.profile.device_peak_bytes ? p.peak_bytes + (a.profile.device_peak_bytes - a.profile.peak_bytes) : 0;
  return p;
}

}  // namespace mutwo::profile
