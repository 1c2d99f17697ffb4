// The Profile: one measured training step as plain data (no ATen), the input
// of the planners and of every report. Written as profile.json (versioned).
//
// Ranks are node indices in the schedule. A value's uses are split by phase:
// last_fwd is its last use in fwd/loss, first_bwd/last_bwd its first and last
// use in bwd/recompute (-1 where there is none). idle_ms is the measured time
// between the end of last_fwd and the start of first_bwd.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace mutwo::profile {

inline constexpr int kProfileVersion = 1;

struct NodeRecord {
  int32_t rank = 0;
  std::string name;   // the first output's name, or "<op>@<rank>" for nodes without outputs
  std::string op;     // ops::display_name: the table's op, or the ATen schema of a generic node
  ir::Phase phase = ir::Phase::forward;
  std::string scope;
  double ms = 0;                  // in the measured iteration whose step time is the median
  int64_t live_before = 0;        // measured allocated bytes before the node
  int64_t live_after = 0;         // ... after the node and its releases
  int64_t peak_during = 0;        // measured high-water mark while it ran
  int64_t workspace_bytes = 0;    // peak_during - (live_before + its new storages)
  int64_t predicted_live_after = 0;  // what the liveness analysis says
  std::array<int64_t, ir::kNumRoles> live_by_role{};  // predicted live bytes while it runs, by role
  double flops = 0;
  int64_t bytes_moved = 0;  // inputs read and outputs written (ops::bytes_moved)
  std::vector<ir::Role> input_roles, output_roles;
};

struct ValueRecord {
  std::string name;
  int64_t bytes = 0;
  ir::Role role = ir::Role::other;
  int32_t def = -1;  // producing rank, -1 for persistent values
  int32_t last_fwd = -1, first_bwd = -1, last_bwd = -1;
  double idle_ms = 0;
  bool random = false;  // made by a random op (recomputed by replaying its generator state)
  bool view = false;    // shares the storage of another value
};

struct Profile {
  // "bert-base batch 32 on cuda", or "UNet on cpu" for a captured step: for titles.
  std::string label() const;

  int version = kProfileVersion;
  std::string model;
  int64_t batch = 0;  // 0: set by a captured step (--graph), not by mutwo
  std::string device;
  int iters = 0, warmup = 0;
  std::string graph_text;  // the profiled training step in the IR's text form
  std::vector<NodeRecord> nodes;
  std::vector<ValueRecord> values;  // indexed like the graph's values
  int64_t persistent_bytes = 0;
  int64_t peak_bytes = 0;  // measured
  int32_t peak_node = -1;
  std::array<int64_t, ir::kNumRoles> peak_by_role{};  // live storages at the peak node, by role
  int64_t peak_workspace_bytes = 0;                   // the peak node's own workspace
  // What the device held for the process at its highest while profiling: the
  // allocator's reserved peak plus the CUDA context and libraries (0: not
  // measured, as for an estimate). Under profile_step_under it is the
  // recomputing run's, not the unplanned step's.
  int64_t device_peak_bytes = 0;
  // Copy bandwidth between host memory and the device, GB/s, measured when
  // profiling (runtime::measure_copy_bandwidth; nominal in an estimate); 0:
  // not known, and the planners do not swap.
  double h2d_gbps = 0, d2h_gbps = 0;
  double step_ms = 0;      // median wall time of the whole step (that iteration's)
  // The fastest and slowest of the measured iterations (their spread is the
  // step time's noise); both 0 where no step was timed (an estimate, a model).
  double step_ms_min = 0, step_ms_max = 0;
  double node_ms_sum = 0;  // sum of the nodes' median times

  int64_t activation_bytes_at_peak() const { return peak_by_role[static_cast<size_t>(ir::Role::activation)]; }
  int32_t first_backward_rank() const;  // -1 if the step has no backward pass
};

// JSON I/O. read_profile throws UserError naming the file and what is wrong
// (missing, not JSON, truncated, unknown version, missing field).
std::string to_json_text(const Profile& p);
Profile from_json_text(const std::string& text, const std::string& source);
void write_profile(const Profile& p, const std::string& path);
Profile read_profile(const std::string& path);

// Live bytes during and after every node, split by role, from the graph's
// liveness (a storage counts as activation when any value sharing it is one).
struct LiveByRole {
  std::vector<std::array<int64_t, ir::kNumRoles>> during, after;  // [node][role]
};
LiveByRole live_by_role(const ir::Graph& g);

// The records that come from the graph alone (names, roles, lifetimes, flops,
// predicted live bytes); profile_step (profiler.h) fills in the measured fields.
Profile describe(const ir::Graph& g);

// The records that follow from the nodes' measured (or estimated) fields:
// node_ms_sum, the peak (bytes, node, its live bytes by role, its workspace)
// and each value's idle time (the nodes strictly between its last forward use
// and its first backward use). Every profile source ends with it.
void summarize(Profile& p);

// A profile without running the step (estimate.cpp): node times from FLOPs and
// bytes moved at nominal speeds of `device` ("cpu", "cuda..."), memory as the
// liveness analysis predicts it, workspaces only where an op declares one
// (OpDef::workspace: linear_cross_entropy's chunk of logits). For planning a step that
// should not run unplanned first.
Profile estimate_profile(const ir::Graph& g, const std::string& device);

}  // namespace mutwo::profile
