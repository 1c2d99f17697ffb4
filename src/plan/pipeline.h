// One planning request and one pipeline: profile -> plan -> rewrite, the same
// for optimize, sweep, max-batch, train and plan on the command line and
// mutwo.torch's sessions. A front end states what it asks for once
// (PlanOptions: built from its flags, or read from its JSON form), profiles
// the step its own way, then calls plan_and_rewrite.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "plan/plan.h"
#include "rewrite/passes.h"
#include "support/units.h"

namespace mutwo::plan {

// What a budget covers (the one statement of it; docs/budgets.md points
// here): the step's peak as the simulator predicts it, that is every storage
// the step holds at once (parameters, gradients, optimizer state, inputs,
// buffers, activations, recomputed values and temporaries), the peak node's
// workspace and what the device held beyond the graph's tensors while it was
// profiled (PlanInput::start_extra_bytes: CUDA libraries' workspaces), less
// the bytes the request exempts. What the step is depends on the route: the
// CLI's whole training step; under mutwo.torch.wrap() the module's step
// (parameters, buffers, inputs, activations, gradients, the backward's
// temporaries; not the user's optimizer state, which the step does not
// hold). Never counted: the CUDA context, the allocator's reserve above its
// allocated bytes, anything else the process holds. A fraction is of the
// activation bytes at the unplanned peak, on top of the rest of that peak
// (support/units.h, Budget).
//
// The planning request. Its JSON form (mutwo.torch's options; the session's
// own keys beside it are ignored here), every key optional, its default the
// field's: {"planner": "mutwo", "budget": "60%" | null, "at_least_bytes": 0,
// "exempt_bytes": 0, "swap": true, "host_limit_bytes": N | null,
// "replay_random": true, "progress": false}.
struct PlanOptions {
  std::string planner = "mutwo";  // planner_names()
  Budget budget;                  // bytes, a fraction of the activation memory, lowest, or none (the default)
  int64_t exempt_bytes = 0;       // bytes of the step a byte budget leaves out (given to the step, counted elsewhere)
  // A fraction's bytes are at least these (mutwo.torch: the budget an earlier
  // input shape of the same module was planned under, so that a smaller
  // batch never fails where a larger one fitted).
  int64_t at_least_bytes = 0;
  bool swap = true;  // planners may swap to host memory (--no-swap: recomputation only)
  // Host memory the swapped copies may hold at once (--host-memory); empty:
  // make_input's default (half the machine's on CUDA, none on the CPU).
  std::optional<int64_t> host_limit_bytes;
  // Random nodes' outputs are candidates, recomputed by replaying their
  // generator state; false under --cuda-graph, whose capture cannot replay it.
  bool replay_random = true;
  bool python = false;    // refusals name budgets as Python writes them (budget="93%"), not as the CLI does
  bool progress = false;  // the optimal planner's progress on stderr (support/progress.h)
};
// The request from its JSON form (above): UserError naming `where` and the
// key for a mistyped value or a budget parse_budget refuses.
PlanOptions read_plan_options(const nlohmann::json& j, const std::string& where);

// A step on its way through the pipeline: prepared (input and the unplanned
// step simulated), then planned (plan), then rewritten (rewritten).
struct PlannedStep {
  PlanInput input;             // the profiled step (its graph is the baseline)
  int64_t unplanned_peak = 0;  // simulated, without recomputation
  // Of it, activations: what a plan can free. The rest (parameters,
  // gradients, optimizer state, inputs, workspaces) is the budget's 0%.
  int64_t unplanned_activation_bytes = 0;
  Plan plan;
  rewrite::Rewritten rewritten;  // the step the plan runs (rewrite_plan)
};
// The planners' input from `prof` with o's swap, host limit and replay, and
// the unplanned step simulated.
PlannedStep prepare(const profile::Profile& prof, const PlanOptions& o);
// The same from a plan input as it is (its swap, host limit and replay already set):
// the unplanned step simulated (mutwo many's orders, plan/orders.h).
PlannedStep prepare(PlanInput in);
// The same from a profile.json (`mutwo plan --profile PATH`): UserError naming the file.
PlannedStep prepare_file(const std::string& profile_path, const PlanOptions& o);
// The bytes o.budget stands for on p's step: a byte budget plus what it
// exempts, a fraction's budget_of_fraction over p's unplanned peak (at least
// o.at_least_bytes), no budget's the unplanned peak. Not for lowest.
int64_t budget_bytes(const PlannedStep& p, const PlanOptions& o);
// Sets p.plan: o.planner's plan under o.budget. Under lowest, the cheapest
// plan at the lowest peak the planner reaches; under lowest and none, always
// feasible. Rewrites nothing (mutwo plan writes the plan alone).
void choose_plan(PlannedStep& p, const PlanOptions& o);
// The pipeline past profiling, on a prepared step: choose_plan, then the
// plan's step made (p.rewritten: rewrite_plan, each pass verified and shown
// to `passes.after`), whether or not the plan fits; the caller judges
// p.plan.feasible (exit code 3 on the CLI, BudgetError in mutwo.torch).
void plan_and_rewrite(PlannedStep& p, const PlanOptions& o, const rewrite::PassOptions& passes = {});
// The whole pipeline from a profile: prepare, then the above.
PlannedStep plan_and_rewrite(const profile::Profile& prof, const PlanOptions& o, const rewrite::PassOptions& passes = {});

// No plan reaches the budget: what() is infeasible_text's line. mutwo.torch
// raises it as mutwo.torch.BudgetError; the CLI prints the line and exits 3.
class BudgetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Why p.plan does not fit, as one line: "no plan fits the budget ...: the
// lowest peak o.planner reaches" in bytes, what it holds, the same as a
// percentage of the activation memory, and the budget to ask for instead.
// The only place that says "no plan fits".
std::string infeasible_text(const PlannedStep& p, const PlanOptions& o);

}  // namespace mutwo::plan
