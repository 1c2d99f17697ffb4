// The optimal planner: the MILP of mu-TWO's decisions (optimal_model.h),
// solved with COIN-OR CBC (milp.h), to measure how far the greedy is from the
// optimum on small graphs.
//
// Early updates are decided first, by the greedy's rule (taken unless they
// raise the unplanned peak; they cost no time), and the model plans the
// schedule they make (model_input). Every answer is re-simulated with the
// real rewrite (finish). If the simulated peak is over the budget while the
// MILP thought it fits (the model omits some clones within a stage, and sees
// copies alone on their streams), that choice of drops and swaps is excluded
// by a no-good cut and CBC runs again; the note says how often. Without swaps,
// a plan that fits in simulation and that CBC proves optimal is optimal among
// all drop sets. With swaps on CUDA the model's copy time is an estimate, so
// the greedy's plan is returned instead where it simulates faster, and the
// note says so. When nothing fits, the plan shown has the lowest peak any
// choice reaches, found by bisection on the budget.
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

Plan optimal_at(const PlanInput& in, int64_t budget, const OptimalOptions& options, bool lowest, Outcome* outcome);

Plan as_optimal(Plan p) {
  p.planner = "optimal";
  p.order.clear();
  return p;
}

// One search at one budget, past the plans that need no MILP: the model built
// for the greedy's schedule, solved (with no-good cuts) and the answer noted.
class Search {
 public:
  Search(const PlanInput& in, int64_t budget, const OptimalOptions& options, Clock::time_point t0, const Plan& greedy)
      : in(in), budget(budget), options(options), t0(t0), greedy(greedy), early(greedy.update_early),
        model_in(model_input(in, early)), unit(bytes_per_unit(budget)),
        // First without the same-stage clones behind a clone's inputs (a smaller
        // model, usually exact enough); with them from the first mismatch on.
        m(build_optimal_model(model_in, budget, unit, options, 0)) {}

  Plan run(bool lowest, Outcome* outcome);

 private:
  double left() const { return options.time_limit_s - std::chrono::duration<double>(Clock::now() - t0).count(); }
  // Progress: what is being solved, and the time left to the limit.
  void say(const std::string& what) const {
    if (options.progress)
      options.progress->step(fmt::format("{} (budget {}), at most {:.0f} s left by the time limit", what,
                                         format_bytes(budget), std::max(0.0, left())));
  }
  Plan plan_of(const std::vector<double>& x) const {
    return finish(in, "optimal", budget, drops_of(m, x), swaps_of(m, x), early);
  }
  void warm_start();
  bool solve();
  Plan fitting(double secs, const std::string& size, const std::string& why_stopped);
  Plan not_fitting(const std::string& size, const std::string& why_stopped, bool lowest, Outcome* outcome);
  void lowest_peak(Plan& p, bool lowest);

  const PlanInput& in;
  const int64_t budget;
  const OptimalOptions& options;
  const Clock::time_point t0;
  const Plan& greedy;
  const bool early;
  const PlanInput model_in;
  const double unit;
  OptimalModel m;
  std::vector<std::string> notes;
  std::vector<double> start;
  Plan best;
  int excluded = 0;
  milp::Solution last;
};

// The greedy's plan, the rest of the model solved around it: CBC's start.
void Search::warm_start() {
  start.clear();
  if (!options.warm_start || !greedy.feasible || m.lp.has_impossible_row) return;
  say(fmt::format("CBC around the greedy's plan on {} variables (warm start)", m.lp.columns()));
  milp::Solution w = milp::solve(with_plan(m, model_in, greedy.drop, greedy.swap),
                                 std::min(left(), kWarmStartShare * options.time_limit_s), nullptr, false);
  if (w.found) start = w.x;
  if (w.proven_infeasible)
    notes.push_back(greedy.swap.empty() ? "warning: the model rejects the greedy's plan, which fits in simulation (a modelling bug)"
                                        : "the model rejects the greedy's plan, which fits in simulation (its prefetch "
                                          "points do not see recomputation's time)");
}

// Solve; a drop set the model accepts but the simulator puts over budget is
// excluded (a no-good cut on drop[]) and CBC runs again. True with `best` set
// when a plan fits.
bool Search::solve() {
  warm_start();
  std::vector<milp::Lin> cuts;
  while (!m.lp.has_impossible_row) {
    say(fmt::format("CBC on {} variables, {} constraints{}", m.lp.columns(), m.lp.rows.size(),
                    excluded ? fmt::format(", {} answer(s) excluded", excluded) : std::string()));
    last = milp::solve(m.lp, left(), start.empty() ? nullptr : &start);
    if (!last.found) break;
    Plan p = plan_of(last.x);
    if (p.feasible) {
      best = std::move(p);
      return true;
    }
    ++excluded;
    milp::Lin cut;  // drop[] and swap[] columns come first, so cuts carry over to a rebuilt model
    for (const std::vector<int>* cols : {&m.drop_col, &m.swap_col})
      for (int col : *cols) cut += last.x[size_t(col)] > 0.5 ? milp::Lin(1) - milp::Lin::var(col) : milp::Lin::var(col);
    cuts.push_back(cut);
    if (excluded == 1) {
      m = build_optimal_model(model_in, budget, unit, options, kMaxClonesBehind);
      warm_start();
      for (size_t k = 0; k + 1 < cuts.size(); ++k) m.lp.ge(cuts[k], milp::Lin(1));
    }
    m.lp.ge(cut, milp::Lin(1));
    if (left() <= 0) break;
  }
  return false;
}

Plan Search::run(bool lowest, Outcome* outcome) {
  const bool have = solve();
  std::string size = fmt::format("{} variables, {} constraints, {} stages", m.lp.columns(), m.lp.rows.size(), m.stages());
  if (!m.swaps.empty()) size += fmt::format(", {} swappable storages", m.swaps.size());
  if (excluded)
    notes.push_back(fmt::format("{} MILP answer(s) fit the model but not the simulator (the model omits some clones "
                                "within a stage{}): excluded and solved again",
                                excluded, m.swaps.empty() ? "" : ", and sees each copy alone on its stream"));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string why_stopped = left() <= 0 ? fmt::format("stopped at the time limit ({:g} s)", options.time_limit_s)
                                              : std::string("CBC stopped without a proof");
  if (have) {
    *outcome = Outcome::fits;
    return fitting(secs, size, why_stopped);
  }
  return not_fitting(size, why_stopped, lowest, outcome);
}

// A plan that fits: how CBC stopped, and the greedy's plan where it simulates faster.
Plan Search::fitting(double secs, const std::string& size, const std::string& why_stopped) {
  if (last.proven_optimal)
    notes.insert(notes.begin(), fmt::format("proven optimal by CBC in {:.2f} s ({})", secs, size));
  else
    notes.insert(notes.begin(), fmt::format("{}, gap {:.1f}% ({})", why_stopped,
                                            last.objective > 1e-12 ? 100 * (last.objective - last.bound) / last.objective : 0.0, size));
  if (greedy.feasible && greedy.predicted.extra_ms < best.predicted.extra_ms - 1e-9) {
    // Only where the model's copy time is an estimate (swaps on CUDA).
    notes.push_back(fmt::format("shown: the greedy's plan, which simulates faster ({:.3f} ms extra against the MILP "
                                "answer's {:.3f} ms: the model's copy times are estimates)",
                                greedy.predicted.extra_ms, best.predicted.extra_ms));
    best = as_optimal(greedy);
  }
  best.note = fmt::format("{}", fmt::join(notes, "; "));
  return best;
}

// No plan that fits: proven by the model, or time ran out.
Plan Search::not_fitting(const std::string& size, const std::string& why_stopped, bool lowest, Outcome* outcome) {
  Plan p = as_optimal(greedy);
  if (last.found) {  // the last answer fits the model, not the simulator, and time is up
    p = plan_of(last.x);
    notes.insert(notes.begin(), fmt::format("the MILP thought its plan fits {} but it simulates to {} (over budget)",
                                            format_bytes(budget), format_bytes(p.predicted.peak_bytes)));
  } else if ((m.lp.has_impossible_row || last.proven_infeasible) && greedy.feasible) {
    // The model is a relaxation (tests/core/test_plan_optimal.cpp), so this is a
    // modelling bug; shown rather than a false claim that nothing fits.
    notes.insert(notes.begin(), "warning: the model rejects every plan at this budget, though the greedy's fits in "
                                "simulation (a modelling bug); shown: the greedy's plan");
  } else if (m.lp.has_impossible_row || last.proven_infeasible) {
    *outcome = Outcome::infeasible;
    lowest_peak(p, lowest);
  } else {
    notes.insert(notes.begin(), fmt::format("{} before CBC found a plan that fits; gap unknown; shown: the greedy's plan",
                                            why_stopped));
  }
  p.note = fmt::format("{} ({})", fmt::join(notes, "; "), size);
  return p;
}

// Nothing fits `budget`: with `lowest`, bisect between this budget (no drop set
// fits) and the lowest peak known; each plan that fits lowers the upper end to
// its simulated peak. The probes alternate between one byte under the lowest
// peak known (usually the answer) and the middle. `p` becomes the plan found.
void Search::lowest_peak(Plan& p, bool lowest) {
  int64_t lo = budget;
  bool proven = lowest, first = true;
  while (lowest && p.predicted.peak_bytes - lo > 1) {
    OptimalOptions o = options;
    o.time_limit_s = left();
    Outcome at_mid = Outcome::unknown;
    const int64_t mid = first ? p.predicted.peak_bytes - 1 : lo + (p.predicted.peak_bytes - lo) / 2;
    first = !first;
    say(fmt::format("nothing fits: the lowest peak, between {} and {}", format_bytes(lo), format_bytes(p.predicted.peak_bytes)));
    Plan q = o.time_limit_s > 0 ? optimal_at(in, mid, o, false, &at_mid) : Plan{};
    if (at_mid == Outcome::fits) p = finish(in, "optimal", budget, q.drop, q.swap, q.update_early);
    else if (at_mid == Outcome::infeasible) lo = mid;
    else {
      proven = false;
      break;
    }
  }
  notes.insert(notes.begin(),
               fmt::format("no {} fits {}: the MILP is infeasible, so no {} plan fits (persistent "
                           "state alone is {}); shown: {}, {}",
                           m.swaps.empty() ? "drop set" : "choice of drops and swaps", format_bytes(budget),
                           m.swaps.empty() ? "recomputation" : "recomputation or swapping",
                           format_bytes(in.profile.persistent_bytes + in.start_extra_bytes),
                           proven ? "the lowest peak any choice reaches"
                                  : lowest ? "the lowest peak found before the time limit" : "the greedy's lowest peak",
                           format_bytes(p.predicted.peak_bytes)));
}

// The optimal plan at `budget`. When no drop set fits and `lowest` is set, the
// plan shown is the one with the lowest peak any choice reaches, found by
// bisection on the budget, so that a smaller budget never shows a higher peak.
Plan optimal_at(const PlanInput& in, int64_t budget, const OptimalOptions& options, bool lowest, Outcome* outcome) {
  *outcome = Outcome::unknown;
  const auto t0 = Clock::now();
  Plan none = finish(in, "optimal", budget, {});
  if (none.feasible) {
    none.note = "fits without recomputation";
    *outcome = Outcome::fits;
    return none;
  }
  // The greedy's plan: the warm start, and its early-update decision (its
  // rule, taken unless it raises the unplanned peak), so both plan one schedule.
  const Plan greedy = plan_mutwo(in, budget);
  if (greedy.update_early && greedy.feasible && greedy.drop.empty() && greedy.swap.empty()) {
    Plan p = as_optimal(greedy);
    p.note = "fits without recomputation or swapping, its parameters updated in the backward pass";
    *outcome = Outcome::fits;
    return p;
  }
  return Search(in, budget, options, t0, greedy).run(lowest, outcome);
}

}  // namespace

bool optimal_model_fits(const PlanInput& in, int64_t budget, const std::vector<ir::ValueId>& drop,
                        const std::vector<ir::ValueId>& swap, bool update_early) {
  if (!milp::solver_built()) return false;
  const PlanInput model_in = model_input(in, update_early);
  OptimalModel m = build_optimal_model(model_in, budget, bytes_per_unit(budget), OptimalOptions{}, kMaxClonesBehind);
  return !m.lp.has_impossible_row && milp::solve(with_plan(m, model_in, drop, swap), kModelCheckSeconds, nullptr, false).found;
}

Plan plan_optimal(const PlanInput& in, int64_t budget, const OptimalOptions& options) {
  milp::require_solver();
  Outcome outcome;
  return optimal_at(in, budget, options, true, &outcome);
}

}  // namespace mutwo::plan
