// The memory simulator (mu-TWO's Algorithm G for our executor): rewrite, then
// liveness, then the measured workspace and times of the nodes.
#include <unistd.h>

#include <algorithm>
#include <unordered_map>

#include "analysis/liveness.h"
#include "ir/text.h"
#include "profile/profile.h"
#include "ops/attrs.h"
#include "ops/op.h"
#include "plan/plan.h"
#include "rewrite/recompute.h"
#include "rewrite/swap.h"
#include "rewrite/update_early.h"
#include "support/error.h"

namespace mutwo::plan {

namespace {

// The step's time with copies: compute runs the nodes back to back; on CUDA a
// copy to the host starts once the compute before it is done and its stream
// is free, a copy back once its copy out is done and its stream is free, and
// swap_wait stalls compute until its copy has landed (swap_into, writing
// optimizer state back, is a copy to the host too); on the CPU every copy
// runs in line. A storage copied out stays on the device until its copy is
// done (the caching allocator's record_stream): `held` says until which node.
struct Timeline {
  std::vector<double> start;  // per node: when compute reaches it
  double step_ms = 0, swap_ms = 0;
  std::vector<std::pair<size_t, size_t>> held;  // (swap_out node, first node starting after its copy is done)
};

Timeline time_step(const PlanInput& in, const rewrite::Rewritten& r) {
  const auto& nodes = r.graph.nodes();
  Timeline t;
  t.start.resize(nodes.size());
  std::unordered_map<ir::ValueId, double> landed;  // copy's result -> when it is complete
  std::vector<std::pair<size_t, double>> outs;     // swap_out node, when its copy is done
  double c = 0, out_free = 0, in_free = 0;
  for (size_t n = 0; n < nodes.size(); ++n) {
    const ir::Node& node = nodes[n];
    t.start[n] = c;
    if (r.origin[n] >= 0) {
      c += in.node_ms[static_cast<size_t>(r.origin[n])] * r.share_of(n);
      continue;
    }
    if (node.inputs.empty()) continue;  // rng_save: no measured time, no copy
    const double bytes = static_cast<double>(r.graph.type(node.inputs[0]).bytes());
    if (node.op == "swap_out" || node.op == "swap_into") {
      const double ms = bytes / in.d2h_bytes_per_ms;
      if (!in.copies_overlap) {
        c += ms;
        t.swap_ms += ms;
      }
      out_free = std::max(out_free, c) + (in.copies_overlap ? ms : 0);
      const double done = in.copies_overlap ? out_free : c;
      if (!node.outputs.empty()) landed[node.outputs[0]] = done;
      outs.emplace_back(n, done);
    } else if (node.op == "swap_in") {
      const double ms = bytes / in.h2d_bytes_per_ms;
      auto filled = landed.find(node.inputs[0]);  // none: state kept in host memory since the last step
      const double ready = std::max({in.copies_overlap ? in_free : 0.0, c, filled == landed.end() ? 0.0 : filled->second});
      if (!in.copies_overlap) {
        t.swap_ms += ready - c + ms;
        c = ready + ms;
      }
      in_free = ready + ms;
      landed[node.outputs[0]] = in_free;
    } else if (node.op == "swap_wait") {
      const double ready = landed.at(node.inputs[0]);
      if (ready > c) {
        t.swap_ms += ready - c;
        c = ready;
      }
    }
  }
  t.step_ms = std::max({c, out_free, in_free});
  t.swap_ms += t.step_ms - c;  // copies still running when compute is done
  for (auto [n, done] : outs) {
    size_t k = n + 1;
    while (k < nodes.size() && t.start[k] < done) ++k;
    t.held.emplace_back(n, k);
  }
  return t;
}

// The storages copies hold past their last use (HeldCopy), from the copies' timing.
std::vector<HeldCopy> held_copies(const rewrite::Rewritten& r, const analysis::Liveness& L, const Timeline& time) {
  std::vector<HeldCopy> held;
  for (auto [n, until] : time.held) {
    const ir::ValueId x = L.storage[static_cast<size_t>(r.graph.nodes()[n].inputs[0])];
    if (L.storage_end[static_cast<size_t>(x)] == static_cast<int32_t>(n))
      held.push_back({x, static_cast<int32_t>(n), static_cast<int32_t>(until)});
  }
  return held;
}

}  // namespace

PredictedStep predicted_step(const PlanInput& in, const Plan& p) {
  PlanInput chunked = in;
  apply_chunks(chunked, p.chunks);
  PredictedStep s;
  s.rewritten = rewrite_step(chunked, chunked.graph, p.drop, p.swap, p.update_early, {});
  const analysis::Liveness L = analysis::analyze_liveness(s.rewritten.graph);
  s.held = held_copies(s.rewritten, L, time_step(chunked, s.rewritten));
  for (int32_t origin : s.rewritten.origin)
    s.workspace.push_back(origin >= 0 ? chunked.workspace[static_cast<size_t>(origin)] : 0);
  s.extra_bytes = chunked.start_extra_bytes;
  return s;
}

Simulation simulate(const PlanInput& in, const std::vector<ir::ValueId>& drop, const std::vector<ir::ValueId>& swap,
                    bool update_early) {
  // Unverified: a planner simulates thousands of candidate plans; the one it
  // returns is rewritten again, verified, by rewrite_plan.
  rewrite::Rewritten r = rewrite_step(in, in.graph, drop, swap, update_early, {/*verify=*/false, nullptr});
  analysis::Liveness L = analysis::analyze_liveness(r.graph);
  Simulation s;
  s.recompute_nodes = r.clones;
  s.swapped = r.swaps;
  s.host_peak_bytes = L.host_peak_bytes;
  const size_t nn = r.graph.nodes().size();
  const Timeline time = time_step(in, r);
  s.step_ms = time.step_ms;
  s.swap_ms = time.swap_ms;
  // A storage copied out is held until its copy is done: from its copy's node
  // (where liveness frees it, unless read later still) to the first node
  // starting after the copy.
  const std::vector<HeldCopy> held = held_copies(r, L, time);
  std::vector<int64_t> during = L.live_during, after = L.live_after;
  for (const HeldCopy& h : held) {
    const int64_t bytes = r.graph.type(h.storage).bytes();
    after[static_cast<size_t>(h.from)] += bytes;
    for (auto m = static_cast<size_t>(h.from) + 1; m < static_cast<size_t>(h.until); ++m) {
      during[m] += bytes;
      after[m] += bytes;
    }
  }
  s.live_after.resize(nn);
  s.peak_bytes = L.persistent_bytes + in.start_extra_bytes;
  for (size_t n = 0; n < nn; ++n) {
    const int32_t origin = r.origin[n];
    int64_t now = during[n] + (origin >= 0 ? in.workspace[static_cast<size_t>(origin)] : 0) + in.start_extra_bytes;
    s.live_after[n] = after[n] + in.start_extra_bytes;
    if (now > s.peak_bytes || s.peak_node < 0) {
      s.peak_bytes = std::max(s.peak_bytes, now);
      s.peak_node = static_cast<int32_t>(n);
    }
    if (r.graph.nodes()[n].phase == ir::Phase::recompute && origin >= 0)
      s.extra_ms += in.node_ms[static_cast<size_t>(origin)] * r.share_of(n);
  }
  s.extra_ms += s.swap_ms;
  // The peak's breakdown: storages live during the peak node, charged as the
  // profile charges them (analysis::charged_roles).
  s.idle_at_peak.assign(in.graph.num_values(), false);
  s.swap_idle_at_peak.assign(in.graph.num_values(), false);
  if (s.peak_node >= 0) {
    auto k = s.peak_node;
    // Per storage: its last read in the forward pass and its first read by the
    // backward pass or a recomputation. Dropping a value frees its storage
    // between the two, and only there.
    const auto& rn = r.graph.nodes();
    std::vector<int32_t> last_fwd(r.graph.num_values(), -1), first_bwd(r.graph.num_values(), INT32_MAX);
    for (size_t n = 0; n < nn; ++n) {
      const bool fwd = ir::is_forward(rn[n].phase);
      const bool bwd = ir::is_backward(rn[n].phase);
      for (ir::ValueId v : rn[n].inputs) {
        if (v == ir::kNoValue) continue;
        auto owner = static_cast<size_t>(L.storage[static_cast<size_t>(v)]);
        if (fwd) last_fwd[owner] = static_cast<int32_t>(n);
        if (bwd) first_bwd[owner] = std::min(first_bwd[owner], static_cast<int32_t>(n));
      }
    }
    for (size_t v = 0; v < in.graph.num_values(); ++v) {
      auto owner = static_cast<size_t>(L.storage[v]);
      s.idle_at_peak[v] = L.def[owner] >= 0 && L.def[owner] < k && last_fwd[owner] < k && first_bwd[owner] > k;
    }
    const std::vector<rewrite::Gap> gaps = rewrite::swap_gaps(r.graph, L);
    for (size_t v = 0; v < in.graph.num_values(); ++v) {
      if (!L.owns_storage(static_cast<ir::ValueId>(v))) continue;
      // Read at the peak by a multi-tensor optimizer node counts too: swapping
      // it splits that node (rewrite::insert_swaps), and its part reads it later.
      const bool splits = gaps[v].after == k && !ops::optimizer_lists(rn[static_cast<size_t>(k)]).empty();
      const bool state = L.def[v] < 0 && gaps[v].after >= 0 && r.graph.values()[v].role == ir::Role::optimizer_state;
      s.swap_idle_at_peak[v] = (L.def[v] >= 0 || state) && gaps[v].before < k && (gaps[v].after > k || splits) && !L.on_host[v];
    }
    std::vector<bool> held_at_peak(r.graph.num_values(), false);  // copied out, the copy not done at the peak
    for (const HeldCopy& h : held)
      if (h.from < k && h.until > k) held_at_peak[static_cast<size_t>(h.storage)] = true;
    const std::vector<ir::Role> storage_role = analysis::charged_roles(r.graph, L);
    for (const ir::Value& v : r.graph.values()) {
      auto id = static_cast<size_t>(v.id);
      if (!L.owns_storage(v.id) || L.on_host[id]) continue;
      bool live = L.def[id] < 0 ? ir::is_persistent(v.role) : (L.def[id] <= k && L.storage_end[id] >= k);
      live |= held_at_peak[id];
      if (live) s.peak_by_role[static_cast<size_t>(storage_role[id])] += v.type.bytes();
    }
    const int32_t peak_origin = r.origin[static_cast<size_t>(k)];
    const int64_t workspace = peak_origin >= 0 ? in.workspace[static_cast<size_t>(peak_origin)] : 0;
    s.peak_by_role[static_cast<size_t>(ir::Role::other)] += workspace + in.start_extra_bytes;
    // The peak node's working set: the storages it reads and writes, and its workspace.
    const ir::Node& peak = rn[static_cast<size_t>(k)];
    std::vector<size_t> touched;
    for (const auto* list : {&peak.inputs, &peak.outputs})
      for (ir::ValueId v : *list)
        if (v != ir::kNoValue) touched.push_back(static_cast<size_t>(L.storage[static_cast<size_t>(v)]));
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    s.peak_working_bytes = workspace;
    for (size_t owner : touched) s.peak_working_bytes += r.graph.values()[owner].type.bytes();
    s.peak_label = ops::node_label(peak);
  }
  return s;
}

Plan finish(const PlanInput& in, std::string planner, int64_t budget, std::vector<ir::ValueId> drop,
            std::vector<ir::ValueId> swap, bool update_early) {
  Plan p;
  p.planner = std::move(planner);
  p.budget_bytes = budget;
  p.drop = std::move(drop);
  p.swap = std::move(swap);
  p.update_early = update_early;
  p.predicted = simulate(in, p.drop, p.swap, p.update_early);
  p.feasible = p.predicted.peak_bytes <= budget;
  return p;
}

}  // namespace mutwo::plan
