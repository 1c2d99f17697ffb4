// The optimal planner's solver wrapper (see milp.h): rows kept merged, and
// COIN-OR CBC's driver run on the program.
#include "plan/milp.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <string>

#include "support/error.h"

#if MUTWO_WITH_CBC
#include <CbcModel.hpp>
#include <CoinPackedMatrix.hpp>
#include <OsiClpSolverInterface.hpp>
#endif

namespace mutwo::plan::milp {

void Lp::ge(const Lin& lhs, const Lin& rhs) {
  Lin e = lhs - rhs;
  std::sort(e.t.begin(), e.t.end());
  std::vector<std::pair<int, double>> merged;
  for (const auto& [col, v] : e.t) {
    if (!merged.empty() && merged.back().first == col) merged.back().second += v;
    else merged.emplace_back(col, v);
  }
  merged.erase(std::remove_if(merged.begin(), merged.end(), [](const auto& p) { return p.second == 0; }),
               merged.end());
  if (merged.empty()) {
    if (e.c < -kConstantRowTolerance) has_impossible_row = true;  // 0 >= -c fails: no plan meets this row
    return;
  }
  rows.push_back(std::move(merged));
  row_lo.push_back(-e.c);
}

#if !MUTWO_WITH_CBC

bool solver_built() { return false; }

void require_solver() {
  MUTWO_FAIL(
      "the optimal planner was built without COIN-OR CBC: install coinor-libcbc-dev (scripts/install-deps.sh) and "
      "configure with -DMUTWO_WITH_CBC=ON, or use --planner mutwo");
}

Solution solve(const Lp&, double, const std::vector<double>*, bool) {
  require_solver();
  return {};
}

#else

namespace {

// CBC's status 0 means a finished search, but CBC stopped inside
// preprocessing by the time limit reports it too: a search counts as
// finished only when it ended before this share of its time.
constexpr double kFinishedWithin = 0.95;
// CBC's time limit is given in seconds with three decimals; never ask for less than this.
constexpr double kLeastSeconds = 0.01;

}  // namespace

bool solver_built() { return true; }

void require_solver() {}

Solution solve(const Lp& lp, double seconds, const std::vector<double>* start, bool preprocess) {
  const int nc = lp.columns(), nr = static_cast<int>(lp.rows.size());
  std::vector<CoinBigIndex> starts{0};
  std::vector<int> cols, lens;
  std::vector<double> vals, row_hi(size_t(nr), COIN_DBL_MAX);
  for (const auto& r : lp.rows) {
    for (const auto& [c, v] : r) cols.push_back(c), vals.push_back(v);
    lens.push_back(static_cast<int>(r.size()));
    starts.push_back(static_cast<CoinBigIndex>(cols.size()));
  }
  CoinPackedMatrix matrix(false, nc, nr, static_cast<CoinBigIndex>(vals.size()), vals.data(), cols.data(),
                          starts.data(), lens.data());
  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  solver.loadProblem(matrix, lp.lo.data(), lp.hi.data(), lp.cost.data(), lp.row_lo.data(), row_hi.data());
  for (int c = 0; c < nc; ++c)
    if (lp.integer[size_t(c)]) solver.setInteger(c);
  CbcModel model(solver);
  model.setLogLevel(0);
  if (start) {
    double obj = 0;
    for (int c = 0; c < nc; ++c) obj += lp.cost[size_t(c)] * (*start)[size_t(c)];
    model.setBestSolution(start->data(), nc, obj, true);
  }
  CbcMain0(model);
  const std::string secs = fmt::format("{:.3f}", std::max(kLeastSeconds, seconds));
  // Preprocessing off where asked: CBC 2.10's preprocessing can leave a
  // program of under three rows, on which OsiClpSolverInterface::crunch
  // asserts and aborts the process (coin-or/Cbc#684, coin-or/Clp#288); a
  // program with its integer columns fixed (a plan checked against the
  // optimal planner's model) is the usual case.
  std::vector<const char*> argv = {"mutwo", "-log", "0", "-timeMode", "elapsed", "-seconds", secs.c_str()};
  if (!preprocess) argv.insert(argv.end(), {"-preprocess", "off"});
  argv.insert(argv.end(), {"-solve", "-quit"});
  const auto t0 = std::chrono::steady_clock::now();
  CbcMain1(static_cast<int>(argv.size()), argv.data(), model);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // A finished search is a proof (an infeasible relaxation under the incumbent's
  // cutoff included), except when time ran out: CBC stopped inside
  // preprocessing can report a finished search.
  const bool finished = model.status() == 0 && took < kFinishedWithin * seconds;
  Solution out;
  out.proven_infeasible = finished && !model.bestSolution();
  if (model.bestSolution()) {
    out.found = true;
    out.x.assign(model.bestSolution(), model.bestSolution() + nc);
    out.objective = model.getObjValue();
    out.proven_optimal = finished;
    out.bound = finished ? out.objective : std::min(out.objective, model.getBestPossibleObjValue());
  }
  return out;
}

#endif  // MUTWO_WITH_CBC

}  // namespace mutwo::plan::milp
