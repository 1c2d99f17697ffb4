// The optimal planner: the MILP of mu-TWO's decisions (optimal_model.h),
// solved with COIN-OR CBC (milp.h), to measure how far the greedy is from the
// optimum on small graphs.
//
// Every answer is re-simulated with the real rewrite (finish). If the
// simulated peak is over the budget while the MILP thought it fits (the
// model omits some clones within a stage), that drop set is excluded by a
// no-good cut and CBC runs again; the note says how often. A plan that fits in
// simulation and that CBC proves optimal is optimal among all drop sets. When
// no drop set fits, the plan shown has the lowest peak any drop set reaches,
// found by bisection on the budget.
#include <algorithm>
#include <chrono>
#include <string>

#include "plan/milp.h"
#include "plan/optimal.h"
#include "plan/optimal_model.h"
#include "support/error.h"
#include "support/units.h"

namespace mutwo::plan {

bool optimal_planner_built() { return milp::solver_built(); }

Plan plan_optimal(const PlanInput& in, int64_t budget) { return plan_optimal(in, budget, OptimalOptions{}); }

namespace {

using Clock = std::chrono::steady_clock;
// The share of the time limit that solving around the greedy's plan (the warm start) may take.
constexpr double kWarmStartShare = 0.25;
// optimal_model_fits' time limit: a fixed drop list leaves little to search.
constexpr double kModelCheckSeconds = 60;

enum class Outcome { fits, infeasible, unknown };

// The optimal plan at `budget`. When no drop set fits and `lowest` is set, the
// plan shown is the one with the lowest peak any drop set reaches, found by
// bisection on the budget, so that a smaller budget never shows a higher peak.
Plan optimal_at(const PlanInput& in, int64_t budget, const OptimalOptions& options, bool lowest, Outcome* outcome) {
  *outcome = Outcome::unknown;
  const auto t0 = Clock::now();
  auto left = [&] { return options.time_limit_s - std::chrono::duration<double>(Clock::now() - t0).count(); };
  Plan none = finish(in, "optimal", budget, {});
  if (none.feasible) {
    none.note = "fits without recomputation";
    *outcome = Outcome::fits;
    return none;
  }
  Plan greedy = plan_mutwo(in, budget);
  const double unit = bytes_per_unit(budget);
  // First without the same-stage clones behind a clone's inputs (a smaller
  // model, usually exact enough); with them from the first mismatch on.
  OptimalModel m = build_optimal_model(in, budget, unit, options, 0);
  std::vector<std::string> notes;
  std::vector<double> start;
  auto warm_start = [&] {  // the greedy's plan, the rest of the model solved around it
    start.clear();
    if (!options.warm_start || !greedy.feasible || m.lp.has_impossible_row) return;
    milp::Solution w = milp::solve(with_drops(m, in, greedy.drop), std::min(left(), kWarmStartShare * options.time_limit_s), nullptr);
    if (w.found) start = w.x;
    if (w.proven_infeasible) notes.push_back("warning: the model rejects the greedy's plan, which fits in simulation (a modelling bug)");
  };
  warm_start();

  // Solve; a drop set the model accepts but the simulator puts over budget is
  // excluded (a no-good cut on drop[]) and CBC runs again.
  Plan best;
  bool have = false;
  int excluded = 0;
  milp::Solution last;
  std::vector<milp::Lin> cuts;
  while (!m.lp.has_impossible_row) {
    last = milp::solve(m.lp, left(), start.empty() ? nullptr : &start);
    if (!last.found) break;
    Plan p = finish(in, "optimal", budget, drops_of(m, last.x));
    if (p.feasible) {
      best = std::move(p);
      have = true;
      break;
    }
    ++excluded;
    milp::Lin cut;  // drop[] columns come first, so cuts carry over to a rebuilt model
    for (size_t c = 0; c < m.cands.size(); ++c)
      cut += last.x[size_t(m.drop_col[c])] > 0.5 ? milp::Lin(1) - milp::Lin::var(m.drop_col[c]) : milp::Lin::var(m.drop_col[c]);
    cuts.push_back(cut);
    if (excluded == 1) {
      m = build_optimal_model(in, budget, unit, options, kMaxClonesBehind);
      warm_start();
      for (size_t k = 0; k + 1 < cuts.size(); ++k) m.lp.ge(cuts[k], milp::Lin(1));
    }
    m.lp.ge(cut, milp::Lin(1));
    if (left() <= 0) break;
  }
  const std::string size = fmt::format("{} variables, {} constraints, {} stages", m.lp.columns(), m.lp.rows.size(), m.stages());
  if (excluded)
    notes.push_back(fmt::format("{} MILP answer(s) fit the model but not the simulator (the model omits some clones "
                                "within a stage): excluded and solved again",
                                excluded));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string why_stopped = left() <= 0 ? fmt::format("stopped at the time limit ({:g} s)", options.time_limit_s)
                                              : std::string("CBC stopped without a proof");
  if (have) {
    if (last.proven_optimal)
      notes.insert(notes.begin(), fmt::format("proven optimal by CBC in {:.2f} s ({})", secs, size));
    else
      notes.insert(notes.begin(), fmt::format("{}, gap {:.1f}% ({})", why_stopped,
                                              last.objective > 1e-12 ? 100 * (last.objective - last.bound) / last.objective : 0.0, size));
    best.note = fmt::format("{}", fmt::join(notes, "; "));
    *outcome = Outcome::fits;
    return best;
  }
  // No plan that fits: proven by the model, or time ran out.
  Plan p = finish(in, "optimal", budget, greedy.drop);
  if (last.found) {  // the last answer fits the model, not the simulator, and time is up
    p = finish(in, "optimal", budget, drops_of(m, last.x));
    notes.insert(notes.begin(), fmt::format("the MILP thought its plan fits {} but it simulates to {} (over budget)",
                                            format_bytes(budget), format_bytes(p.predicted.peak_bytes)));
  } else if (m.lp.has_impossible_row || last.proven_infeasible) {
    *outcome = Outcome::infeasible;
    // Bisect between this budget (no drop set fits) and the lowest peak known;
    // each plan that fits lowers the upper end to its simulated peak. The
    // probes alternate between one byte under the lowest peak known (usually
    // the answer) and the middle.
    int64_t lo = budget;
    bool proven = lowest, first = true;
    while (lowest && p.predicted.peak_bytes - lo > 1) {
      OptimalOptions o = options;
      o.time_limit_s = left();
      Outcome at_mid = Outcome::unknown;
      const int64_t mid = first ? p.predicted.peak_bytes - 1 : lo + (p.predicted.peak_bytes - lo) / 2;
      first = !first;
      Plan q = o.time_limit_s > 0 ? optimal_at(in, mid, o, false, &at_mid) : Plan{};
      if (at_mid == Outcome::fits) p = finish(in, "optimal", budget, q.drop);
      else if (at_mid == Outcome::infeasible) lo = mid;
      else {
        proven = false;
        break;
      }
    }
    notes.insert(notes.begin(),
                 fmt::format("no drop set fits {}: the MILP is infeasible, so no recomputation plan fits (persistent "
                             "state alone is {}); shown: {}, {}",
                             format_bytes(budget), format_bytes(in.profile.persistent_bytes + in.start_extra_bytes),
                             proven ? "the lowest peak any drop set reaches"
                                    : lowest ? "the lowest peak found before the time limit" : "the greedy's lowest peak",
                             format_bytes(p.predicted.peak_bytes)));
  } else {
    notes.insert(notes.begin(), fmt::format("{} before CBC found a plan that fits; gap unknown; shown: the greedy's plan",
                                            why_stopped));
  }
  p.note = fmt::format("{} ({})", fmt::join(notes, "; "), size);
  return p;
}

}  // namespace

bool optimal_model_fits(const PlanInput& in, int64_t budget, const std::vector<ir::ValueId>& drop) {
  if (!milp::solver_built()) return false;
  OptimalModel m = build_optimal_model(in, budget, bytes_per_unit(budget), OptimalOptions{}, kMaxClonesBehind);
  return !m.lp.has_impossible_row && milp::solve(with_drops(m, in, drop), kModelCheckSeconds, nullptr).found;
}

Plan plan_optimal(const PlanInput& in, int64_t budget, const OptimalOptions& options) {
  milp::require_solver();
  Outcome outcome;
  return optimal_at(in, budget, options, true, &outcome);
}

}  // namespace mutwo::plan
