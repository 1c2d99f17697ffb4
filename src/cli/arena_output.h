// What run and optimize say of the arena (--arena): the workspaces it plans
// for, the refusal when it passes the device's cap, its line and its JSON keys.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/arena.h"
#include "plan/pipeline.h"
#include "runtime/executor.h"

namespace mutwo::cli {

// --arena's setup of `o` (o.arena set) for `g`, run's step or optimize's
// planned one: first the executor's refusals and an arena that with the
// persistent state passes --device-memory (then kExitInfeasible, the planned
// size on stderr), before any step; then each node's workspace (the most it
// holds while it runs beyond the storages live before it and its new outputs:
// kernel temporaries, library workspaces), measured by the profiler in steps
// of its own (one warm-up, one measured, in an executor of its own: the
// caller's parameters are untouched), into o.arena_workspace. 0: the step may run.
int prepare_arena(const ir::Graph& g, runtime::ExecutorOptions& o);

// prepare_arena for a search that tries steps (max-batch --arena): where the
// arena with the persistent state passes the cap, by how many bytes, without
// a word and nothing measured; else 0, the workspaces measured.
int64_t prepare_arena_within_cap(const ir::Graph& g, runtime::ExecutorOptions& o);

// optimize --arena: prepare_arena for the planned step p.rewritten, then one
// step of it measured from the arena. An arena is larger than the most bytes
// live in it at once (its blocks' gaps), and what it does not serve falls
// back to the allocator, so the step may peak above the plan's prediction.
// Where that passes the plan's budget, the planner plans again under that
// plan's own predicted peak less its measured excess (p.plan keeps the budget
// asked for, and a note says by how much it planned below it), the arena is
// prepared for the new plan and it is measured in turn: up to three new
// plans, until one fits or the planner gives the same plan again. A byte budget
// or a fraction alike; none, "lowest" and a saved plan (`replan` false) are
// left as they are.
int fit_plan_to_arena(plan::PlannedStep& p, const plan::PlanOptions& plan, const rewrite::PassOptions& passes,
                      bool replan, runtime::ExecutorOptions& o);

// Under --device-memory: by how many bytes the persistent state and the arena
// pass the cap (0: they fit, or there is no cap).
int64_t arena_over_cap_bytes(const runtime::Executor& ex, const c10::Device& device);

// Under --device-memory: when the persistent state and the arena pass the cap,
// says so on stderr with the planned size and returns kExitInfeasible; else 0.
int refuse_arena_over_cap(const runtime::Executor& ex, const c10::Device& device);

// "arena: 12.3 MiB (...)", and the keys arena_bytes, arena_live_peak_bytes,
// arena_order, arena_left_out, arena_fallback_allocations,
// arena_fallback_bytes, arena_moved_storages, arena_missed_storages.
std::string arena_line(const analysis::ArenaPlan& a, const runtime::ArenaUse& u);
void add_arena_json(nlohmann::json& j, const analysis::ArenaPlan& a, const runtime::ArenaUse& u);

}  // namespace mutwo::cli
