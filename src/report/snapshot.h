// mutwo's steps as PyTorch's memory snapshot: the dictionary that
// torch.cuda.memory._snapshot() returns and _dump_snapshot() pickles
// ("segments", and "device_traces" of alloc, free_requested and
// free_completed events with addr, size, stream, frames and category), so
// that PyTorch's own viewer draws them:
//   python -m torch.cuda._memory_viz trace_plot FILE -o page.html
// (or the file dropped on PyTorch's memory_viz page).
//
// Every allocation and free of a step, in schedule order, as the liveness
// analysis that the executor frees by and the simulator predicts from says
// (analysis/liveness.h), plus what the simulator adds to it: each node's
// workspace, the bytes held beyond the graph's tensors, and storages held
// until their copy to host memory is done. Each event's frame is the node
// that made or freed it: its scope as the frame's file, its rank as the line,
// "op -> %value (phase)" as the name; a second frame names the step. Several
// steps go one after another into one trace, each starting from nothing
// (its persistent values allocated first) and ending with everything freed,
// so the viewer draws them side by side on one scale. Host memory (swapped
// copies) is left out, as the simulator's device peak leaves it out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "profile/profile.h"

namespace mutwo::report {

// One allocation or free.
struct MemoryEvent {
  bool alloc = true;
  int64_t block = 0;      // which allocation: a free names its alloc's block
  int64_t bytes = 0;
  std::string category;   // an alloc's (the viewer colours by it): a role (ir::to_string), "workspace",
                          // "activation, dropped by the plan", "activation, recomputed", or "unknown"
                          // (the bytes held beyond the graph's tensors)
  std::string scope;      // the node's module scope; empty outside one
  int32_t node = -1;      // rank of the node that made or freed it in its step; -1 before the first
  std::string what;       // "linear -> %h (fwd)", "%w1 (parameter)"
};

struct StepMemory {
  std::string label;  // "unplanned step (predicted)", "planned step (predicted)", "measured step"
  std::vector<MemoryEvent> events;
};

// What a step holds beyond its graph's storages, and which storages a plan drops.
struct StepExtras {
  std::vector<int64_t> workspace;  // per node: bytes held while it runs, beyond its outputs (negative: none)
  // Bytes the device holds beyond the graph's tensors: one entry for the
  // whole step, or one per node from that node on (negative: none).
  std::vector<int64_t> beyond;
  std::vector<plan::HeldCopy> held;  // storages held past their last use until a copy is done
  std::vector<bool> dropped;         // per value (empty: none): storages the plan drops (this is the unplanned step)
};

// A step's events, from the liveness of `g` and `x`. The largest sum of
// live bytes over them is the simulator's peak for the same inputs.
StepMemory step_memory(const ir::Graph& g, const StepExtras& x, std::string label);

// The unplanned step and the plan's step, both as the simulator predicts
// them (plan::predicted_step): "before" with the activations the plan drops
// in their own category, "after" with its recomputed ones in theirs.
std::vector<StepMemory> plan_memory(const plan::PlanInput& in, const plan::Plan& p);
// A profile's step as measured (each node's workspace, and the bytes beyond
// the graph's tensors before it, as the profiler saw them; none below zero;
// left out for an estimate), then as predicted for planning.
std::vector<StepMemory> profile_memory(const profile::Profile& p);

// The snapshot (pickle bytes) of `steps`, one after another on device 0.
// Besides PyTorch's keys, "mutwo" lists each step's label and its events'
// range in the trace.
std::string memory_snapshot(const std::vector<StepMemory>& steps);
// Written whole or not at all (support/files.h).
void write_memory_snapshot(const std::vector<StepMemory>& steps, const std::string& path);

}  // namespace mutwo::report
