// An estimated profile (see profile.h): node times from a roofline of nominal
// device speeds, memory from the liveness analysis and the workspaces ops declare. For mutwo.torch's
// profile="flops", where the unplanned step should not run first (it may not
// fit) or a quick plan is enough.
#include <algorithm>

#include "analysis/liveness.h"
#include "ops/op.h"
#include "profile/profile.h"

namespace mutwo::profile {

namespace {

// Nominal speeds: what matters to the planners is the ratio of one node's
// cost to another's, which a roofline gets roughly right.
struct Roofline {
  double flops_per_ms, bytes_per_ms, launch_ms;
};
constexpr Roofline kCpu{50e9 / 1e3, 10e9 / 1e3, 2e-3};
constexpr Roofline kCuda{200e12 / 1e3, 2e12 / 1e3, 5e-3};

}  // namespace

Profile estimate_profile(const ir::Graph& g, const std::string& device) {
  const Roofline& speed = device.rfind("cuda", 0) == 0 ? kCuda : kCpu;
  Profile p = describe(g);
  p.device = device;
  const analysis::Liveness L = analysis::analyze_liveness(g);
  for (size_t n = 0; n < p.nodes.size(); ++n) {
    NodeRecord& r = p.nodes[n];
    r.ms = std::max(r.flops / speed.flops_per_ms, static_cast<double>(r.bytes_moved) / speed.bytes_per_ms) + speed.launch_ms;
    r.live_before = L.live_before[n];
    r.live_after = L.live_after[n];
    r.workspace_bytes = ops::workspace_bytes(g, g.nodes()[n]);  // where the op declares one
    r.peak_during = L.live_during[n] + r.workspace_bytes;
  }
  summarize(p);
  p.step_ms = p.node_ms_sum;
  // Nominal copy speeds: pinned PCIe 4 x16 on CUDA, memcpy on the CPU.
  p.h2d_gbps = p.d2h_gbps = &speed == &kCuda ? 20.0 : 10.0;
  return p;
}

}  // namespace mutwo::profile
