// PlanInputs for planner tests from graphs alone: node times from FLOPs, or
// drawn from a seeded generator where times should not follow sizes.
#pragma once

#include <cstdint>
#include <utility>

#include "plan/plan.h"
#include "profile/profile.h"

namespace mutwo::testing {

// Times from FLOPs (1 GFLOP = 1 ms) plus 1 us per node, so no node is free; no workspace.
inline plan::PlanInput input_of(ir::Graph g) {
  plan::PlanInput in;
  in.profile = profile::describe(g);
  in.graph = std::move(g);
  for (const auto& n : in.profile.nodes) {
    in.node_ms.push_back(n.flops * 1e-9 + 1e-3);
    in.workspace.push_back(0);
  }
  return in;
}

// The same graph with node times of 1 to 16 us drawn from a seeded generator:
// costs that do not follow sizes, where a bytes-per-ms greedy can be fooled.
inline plan::PlanInput with_random_times(plan::PlanInput in, uint32_t seed) {
  uint32_t r = seed * 2654435761u;
  for (double& ms : in.node_ms) {
    r = r * 1664525u + 1013904223u;
    ms = 1e-3 * (1 + (r >> 24) % 16);
  }
  return in;
}

}  // namespace mutwo::testing
