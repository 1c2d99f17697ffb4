// An estimated profile (see profile.h): node times from the roofline of the
// device rate table (rates.h), memory from the liveness analysis and the workspaces ops declare. For mutwo.torch's
// profile="flops", where the unplanned step should not run first (it may not
// fit) or a quick plan is enough.
#include <algorithm>

#include "analysis/liveness.h"
#include "ops/op.h"
#include "profile/profile.h"
#include "profile/rates.h"

namespace mutwo::profile {

Profile estimate_profile(const ir::Graph& g, const std::string& device) {
  const DeviceRates& rates = device_rates(device);
  Profile p = describe(g);
  p.device = device;
  const analysis::Liveness L = analysis::analyze_liveness(g);
  for (size_t n = 0; n < p.nodes.size(); ++n) {
    NodeRecord& r = p.nodes[n];
    const ir::Node& node = g.nodes()[n];
    const int element = node.outputs.empty() ? 4 : static_cast<int>(ir::element_size(g.type(node.outputs[0]).dtype));
    r.ms = roofline_ms(rates, r.flops, static_cast<double>(r.bytes_moved), element) + rates.launch_ms;
    r.live_before = L.live_before[n];
    r.live_after = L.live_after[n];
    r.workspace_bytes = ops::workspace_bytes(g, g.nodes()[n]);  // where the op declares one
    r.peak_during = L.live_during[n] + r.workspace_bytes;
  }
  summarize(p);
  p.step_ms = p.node_ms_sum;
  p.h2d_gbps = p.d2h_gbps = rates.copy_gbps;
  return p;
}

}  // namespace mutwo::profile
