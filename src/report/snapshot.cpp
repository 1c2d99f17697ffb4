// mutwo's steps as PyTorch's memory snapshot (see snapshot.h).
#include "report/snapshot.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "analysis/liveness.h"
#include "ops/op.h"
#include "report/pickle.h"
#include "support/error.h"
#include "support/files.h"

namespace mutwo::report {

namespace {

using nlohmann::json;

// Collects a step's events, numbering its blocks.
class StepEvents {
 public:
  explicit StepEvents(std::string label) { step_.label = std::move(label); }

  int64_t alloc(int64_t bytes, std::string category, std::string scope, int32_t node, std::string what) {
    const int64_t block = next_++;
    if (bytes <= 0) return block;  // nothing to draw; its free is dropped too
    live_.emplace(block, bytes);
    step_.events.push_back({true, block, bytes, std::move(category), std::move(scope), node, std::move(what)});
    return block;
  }
  void free(int64_t block, std::string scope, int32_t node, std::string what) {
    auto it = live_.find(block);
    if (it == live_.end()) return;
    step_.events.push_back({false, block, it->second, "", std::move(scope), node, std::move(what)});
    live_.erase(it);
  }
  // Frees what is still live, last allocated first.
  StepMemory finish(int32_t node) {
    while (!live_.empty()) free(std::prev(live_.end())->first, "", node, "end of the step");
    return std::move(step_);
  }

 private:
  StepMemory step_;
  std::map<int64_t, int64_t> live_;  // block -> bytes
  int64_t next_ = 0;
};

// "linear -> %h (fwd)"; "sgd (optim)" for a node without outputs.
std::string node_what(const ir::Graph& g, const ir::Node& n, ir::ValueId v) {
  if (v == ir::kNoValue) return fmt::format("{} ({})", ops::display_name(n), ir::to_string(n.phase));
  return fmt::format("{} -> %{} ({})", ops::display_name(n), g.value(v).name, ir::to_string(n.phase));
}

std::string category_of(const ir::Graph& g, const analysis::Liveness& L, const std::vector<ir::Role>& charged,
                        const StepExtras& x, ir::ValueId v) {
  const auto id = static_cast<size_t>(v);
  if (!x.dropped.empty() && x.dropped[id]) return "activation, dropped by the plan";
  if (L.def[id] >= 0 && g.nodes()[static_cast<size_t>(L.def[id])].phase == ir::Phase::recompute)
    return "activation, recomputed";
  return std::string(ir::to_string(charged[id]));
}

}  // namespace

StepMemory step_memory(const ir::Graph& g, const StepExtras& x, std::string label) {
  const analysis::Liveness L = analysis::analyze_liveness(g);
  const std::vector<ir::Role> charged = analysis::charged_roles(g, L);
  const auto& nodes = g.nodes();
  const size_t nn = nodes.size();
  MUTWO_ASSERT(x.workspace.size() == nn && (x.beyond.size() == 1 || x.beyond.size() == nn) &&
                   (x.dropped.empty() || x.dropped.size() == g.num_values()),
               "step extras of the wrong size for a step of {} nodes", nn);
  StepEvents ev(std::move(label));
  auto on_device = [&](size_t v) { return L.owns_storage(static_cast<ir::ValueId>(v)) && !L.on_host[v]; };

  int64_t beyond_block = ev.alloc(x.beyond[0], "unknown", "", -1, "held beyond the graph's tensors");
  for (const ir::Value& v : g.values())
    if (on_device(static_cast<size_t>(v.id)) && L.def[static_cast<size_t>(v.id)] < 0 && ir::is_persistent(v.role))
      ev.alloc(v.type.bytes(), category_of(g, L, charged, x, v.id), "", -1,
               fmt::format("%{} ({}, held across steps)", v.name, ir::to_string(v.role)));

  // Storages freed after each node, and the copies' held ones before it.
  std::vector<std::vector<ir::ValueId>> freed_after(nn), freed_before(nn + 1);
  std::set<ir::ValueId> held;
  for (const plan::HeldCopy& h : x.held) {
    held.insert(h.storage);
    freed_before[static_cast<size_t>(h.until)].push_back(h.storage);
  }
  for (size_t v = 0; v < g.num_values(); ++v)
    if (on_device(v) && L.def[v] >= 0 && L.storage_end[v] != analysis::kForever &&
        !held.count(static_cast<ir::ValueId>(v)))
      freed_after[static_cast<size_t>(L.storage_end[v])].push_back(static_cast<ir::ValueId>(v));

  std::vector<int64_t> block_of(g.num_values(), -1);
  for (size_t n = 0; n < nn; ++n) {
    const ir::Node& node = nodes[n];
    const auto rank = static_cast<int32_t>(n);
    const std::string what = node_what(g, node, node.outputs.empty() ? ir::kNoValue : node.outputs[0]);
    for (ir::ValueId v : freed_before[n]) ev.free(block_of[static_cast<size_t>(v)], node.scope, rank, "before " + what);
    if (x.beyond.size() == nn && n > 0 && x.beyond[n] != x.beyond[n - 1]) {
      ev.free(beyond_block, node.scope, rank, "before " + what);
      beyond_block = ev.alloc(x.beyond[n], "unknown", node.scope, rank, "held beyond the graph's tensors");
    }
    for (ir::ValueId v : node.outputs)
      if (on_device(static_cast<size_t>(v)))
        block_of[static_cast<size_t>(v)] =
            ev.alloc(g.type(v).bytes(), category_of(g, L, charged, x, v), node.scope, rank, node_what(g, node, v));
    const int64_t ws = ev.alloc(x.workspace[n], "workspace", node.scope, rank, "workspace of " + what);
    ev.free(ws, node.scope, rank, what);
    for (ir::ValueId v : freed_after[n]) ev.free(block_of[static_cast<size_t>(v)], node.scope, rank, "after " + what);
  }
  return ev.finish(static_cast<int32_t>(nn));
}

std::vector<StepMemory> plan_memory(const plan::PlanInput& in, const plan::Plan& p) {
  std::vector<StepMemory> out;
  const plan::PredictedStep before = plan::predicted_step(in, plan::Plan{});
  const plan::PredictedStep after = plan::predicted_step(in, p);
  std::vector<bool> dropped(before.rewritten.graph.num_values(), false);
  const analysis::Liveness L = analysis::analyze_liveness(before.rewritten.graph);
  for (ir::ValueId v : p.drop) dropped[static_cast<size_t>(L.storage[static_cast<size_t>(v)])] = true;
  out.push_back(step_memory(before.rewritten.graph, {before.workspace, {before.extra_bytes}, before.held, dropped},
                            "unplanned step (predicted)"));
  out.push_back(step_memory(after.rewritten.graph, {after.workspace, {after.extra_bytes}, after.held, {}},
                            fmt::format("planned step (predicted, {} planner)", p.planner)));
  return out;
}

std::vector<StepMemory> profile_memory(const profile::Profile& p) {
  const plan::PlanInput in = plan::make_input(p);
  const analysis::Liveness L = analysis::analyze_liveness(in.graph);
  StepExtras measured;
  for (size_t n = 0; n < p.nodes.size(); ++n) {
    measured.workspace.push_back(p.nodes[n].workspace_bytes);
    measured.beyond.push_back(p.nodes[n].live_before - L.live_before[n]);
  }
  if (measured.beyond.empty()) measured.beyond.push_back(0);
  std::vector<StepMemory> out;
  if (p.iters > 0) out.push_back(step_memory(in.graph, measured, "measured step"));  // not an estimate
  const plan::PredictedStep predicted = plan::predicted_step(in, plan::Plan{});
  out.push_back(step_memory(predicted.rewritten.graph, {predicted.workspace, {predicted.extra_bytes}, predicted.held, {}},
                            "unplanned step (predicted)"));
  return out;
}

namespace {

// Addresses for the blocks, first fit in one segment, aligned as the CUDA
// caching allocator aligns (512 bytes). Blocks are laid out again for each step.
class Arena {
 public:
  static constexpr int64_t kBase = int64_t{0x7f} << 40, kAlign = 512;

  int64_t place(int64_t bytes) {
    const int64_t need = (bytes + kAlign - 1) / kAlign * kAlign;
    int64_t at = 0;
    for (const auto& [start, size] : used_) {
      if (start - at >= need) break;
      at = start + size;
    }
    used_.emplace(at, need);
    size_ = std::max(size_, at + need);
    return kBase + at;
  }
  void release(int64_t addr) { used_.erase(addr - kBase); }
  int64_t size() const { return size_; }
  bool empty() const { return used_.empty(); }

 private:
  std::map<int64_t, int64_t> used_;  // offset -> rounded size
  int64_t size_ = 0;
};

json frames(const MemoryEvent& e, const std::string& label) {
  return json::array({json{{"filename", e.scope.empty() ? "(no scope)" : e.scope}, {"line", e.node}, {"name", e.what}},
                      json{{"filename", "mutwo"}, {"line", 0}, {"name", label}}});
}

}  // namespace

std::string memory_snapshot(const std::vector<StepMemory>& steps) {
  Arena arena;
  json trace = json::array(), labels = json::array();
  // PyTorch's viewer (MemoryViz.js) needs "unknown" among the categories as
  // soon as any event has one, and stops when it is missing: the segment
  // the blocks live in is of unknown kind, and its segment_alloc comes first.
  trace.push_back(json{{"action", "segment_alloc"}, {"addr", Arena::kBase}, {"size", 0}, {"stream", 0},
                       {"frames", json::array()}, {"category", "unknown"}});
  for (const StepMemory& s : steps) {
    const size_t first = trace.size();
    std::map<int64_t, int64_t> addr_of;  // block -> address
    for (const MemoryEvent& e : s.events) {
      if (e.alloc) {
        const int64_t addr = arena.place(e.bytes);
        addr_of[e.block] = addr;
        trace.push_back(json{{"action", "alloc"}, {"addr", addr}, {"size", e.bytes}, {"stream", 0},
                             {"frames", frames(e, s.label)}, {"category", e.category}});
        continue;
      }
      const int64_t addr = addr_of.at(e.block);
      for (const char* action : {"free_requested", "free_completed"})
        trace.push_back(json{{"action", action}, {"addr", addr}, {"size", e.bytes}, {"stream", 0},
                             {"frames", frames(e, s.label)}});
      arena.release(addr);
    }
    MUTWO_ASSERT(arena.empty(), "step '{}' leaves blocks allocated", s.label);
    labels.push_back(json{{"label", s.label}, {"first_event", first}, {"events", trace.size() - first}});
  }
  trace[0]["size"] = arena.size();
  // The state after the trace: the segment, every block freed.
  json segment{{"device", 0},
               {"address", Arena::kBase},
               {"total_size", arena.size()},
               {"allocated_size", 0},
               {"active_size", 0},
               {"requested_size", 0},
               {"stream", 0},
               {"segment_type", "large"},
               {"frames", json::array()},
               {"blocks", json::array({json{{"address", Arena::kBase},
                                            {"size", arena.size()},
                                            {"requested_size", 0},
                                            {"state", "inactive"},
                                            {"frames", json::array()}}})}};
  json snapshot{{"segments", json::array({segment})},
                {"device_traces", json::array({trace})},
                {"mutwo", {{"steps", labels}}}};
  return to_pickle(snapshot);
}

void write_memory_snapshot(const std::vector<StepMemory>& steps, const std::string& path) {
  write_file(path, memory_snapshot(steps));
}

}  // namespace mutwo::report
