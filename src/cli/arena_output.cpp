// What run and optimize say of the arena (see arena_output.h).
#include "cli/arena_output.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "cli/pipeline.h"
#include "plan/plan.h"
#include "profile/profiler.h"
#include "runtime/memory.h"
#include "support/error.h"
#include "support/units.h"

namespace mutwo::cli {

constexpr int kArenaReplans = 3;  // plans made again, each measured from its arena

namespace {

// Each node's workspace of `g`, measured by the profiler, into o.arena_workspace.
void measure_workspaces(const ir::Graph& g, runtime::ExecutorOptions& o) {
  profile::ProfileOptions po;
  po.device = o.device.str();
  po.warmup = 1;
  po.iters = 1;
  po.seed = o.seed;
  po.progress = false;
  const profile::Profile p = profile::profile_step(g, po);
  MUTWO_ASSERT(p.nodes.size() == g.nodes().size(), "profile of {} nodes for a graph of {}", p.nodes.size(),
               g.nodes().size());
  for (const profile::NodeRecord& n : p.nodes) o.arena_workspace.push_back(std::max<int64_t>(n.workspace_bytes, 0));
  runtime::release_cached_memory(o.device);
}

}  // namespace

int64_t prepare_arena_within_cap(const ir::Graph& g, runtime::ExecutorOptions& o) {
  MUTWO_ASSERT(o.arena, "prepare_arena without an arena");
  o.arena_workspace.clear();  // an earlier plan's, of another graph
  if (const int64_t over = arena_over_cap_bytes(runtime::Executor(g, o), o.device); over > 0) return over;
  measure_workspaces(g, o);
  return 0;
}

int prepare_arena(const ir::Graph& g, runtime::ExecutorOptions& o) {
  if (prepare_arena_within_cap(g, o) == 0) return 0;
  return refuse_arena_over_cap(runtime::Executor(g, o), o.device);  // says by how much, exit 3
}

int fit_plan_to_arena(plan::PlannedStep& p, const plan::PlanOptions& plan, const rewrite::PassOptions& passes,
                      bool replan, runtime::ExecutorOptions& o) {
  if (int rc = prepare_arena(p.rewritten.graph, o); rc != 0) return rc;
  const bool bounded = plan.budget.kind == Budget::Kind::bytes || plan.budget.kind == Budget::Kind::fraction;
  if (!replan || !bounded || !p.plan.feasible) return 0;
  const int64_t budget = p.plan.budget_bytes;
  int64_t target = budget;  // what the planner is asked for: the budget less what the arena took beyond plans
  for (int round = 0;; ++round) {
    const Measured m = measure(p.rewritten.graph, o.device, o.seed, {1, false, o.arena_workspace});
    if (m.peak_bytes <= budget || round == kArenaReplans) return 0;  // the last plan stands, measured
    // This plan's prediction less its own excess: lowering only the budget can
    // give the same plan again, where its prediction had room under it.
    target = std::min(target, p.plan.predicted.peak_bytes - (m.peak_bytes - budget));
    plan::Plan again = plan::run_planner(p.plan.planner, p.input, target, plan.progress);
    if (!again.feasible || (again.drop == p.plan.drop && again.swap == p.plan.swap)) return 0;
    again.note = fmt::format("planned under {} less {}, what steps from the arena took beyond it (the arena's "
                             "gaps, allocations it did not serve){}",
                             format_bytes(budget), format_bytes(budget - target),
                             again.note.empty() ? "" : "; " + again.note);
    again.budget_bytes = budget;
    p.plan = std::move(again);
    p.rewritten = plan::rewrite_plan(p.input, p.plan, passes);
    if (int rc = prepare_arena(p.rewritten.graph, o); rc != 0) return rc;
  }
}

int64_t arena_over_cap_bytes(const runtime::Executor& ex, const c10::Device& device) {
  const analysis::ArenaPlan* a = ex.arena_plan();
  const int64_t cap = runtime::memory_limit(device);
  if (!a || cap <= 0) return 0;
  return std::max<int64_t>(ex.liveness().persistent_bytes + a->bytes - cap, 0);
}

int refuse_arena_over_cap(const runtime::Executor& ex, const c10::Device& device) {
  if (arena_over_cap_bytes(ex, device) == 0) return 0;
  const analysis::ArenaPlan* a = ex.arena_plan();
  const int64_t cap = runtime::memory_limit(device);
  const int64_t persistent = ex.liveness().persistent_bytes;
  fmt::print(stderr,
             "--arena: the planned arena of {} ({} bytes) and the persistent state of {} pass --device-memory {}; "
             "give --device-memory at least {} or plan the step under a lower budget (mutwo optimize)\n",
             format_bytes(a->bytes), a->bytes, format_bytes(persistent), format_bytes(cap), format_bytes(persistent + a->bytes));
  return kExitInfeasible;
}

std::string arena_line(const analysis::ArenaPlan& a, const runtime::ArenaUse& u) {
  return fmt::format(
      "arena: {} planned ({} live at most, best fit by {}); per step at most {} allocation(s) of {} fell back to the "
      "allocator, {} output(s) moved to their offset, {} missed it (copied out to the allocator){}",
      format_bytes(a.bytes), format_bytes(a.live_peak_bytes), a.order, u.fallback_allocations,
      format_bytes(u.fallback_bytes), u.moved_storages, u.missed_storages,
      a.left_out ? fmt::format(", {} storage(s) swap_out copies from left to the allocator", a.left_out) : "");
}

void add_arena_json(nlohmann::json& j, const analysis::ArenaPlan& a, const runtime::ArenaUse& u) {
  j["arena_bytes"] = a.bytes;
  j["arena_live_peak_bytes"] = a.live_peak_bytes;
  j["arena_order"] = a.order;
  j["arena_left_out"] = a.left_out;
  j["arena_fallback_allocations"] = u.fallback_allocations;
  j["arena_fallback_bytes"] = u.fallback_bytes;
  j["arena_moved_storages"] = u.moved_storages;
  j["arena_missed_storages"] = u.missed_storages;
}

}  // namespace mutwo::cli
