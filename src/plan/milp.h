// A mixed-integer linear program as the optimal planner writes it, and its
// solution by COIN-OR CBC: the solver wrapper. The model of mu-TWO's
// decisions (optimal_model.h) writes a program and reads a Solution, and
// never sees CBC; milp.cpp holds the only CBC includes.
#pragma once

#include <utility>
#include <vector>

namespace mutwo::plan::milp {

// Slack under which a row of constants alone (0 >= c) still counts as met.
inline constexpr double kConstantRowTolerance = 1e-9;
// A column bound standing for "no upper bound".
inline constexpr double kUnbounded = 1e30;

// A linear expression over the program's columns: sum of coefficient * column, plus a constant.
struct Lin {
  std::vector<std::pair<int, double>> t;  // (column, coefficient); a column may repeat
  double c = 0;                           // the constant
  Lin(double k = 0) : c(k) {}  // NOLINT: constants convert
  static Lin var(int col, double k = 1) {
    Lin l;
    l.t.emplace_back(col, k);
    return l;
  }
  Lin& operator+=(const Lin& o) {
    t.insert(t.end(), o.t.begin(), o.t.end());
    c += o.c;
    return *this;
  }
  Lin operator*(double k) const {
    Lin l = *this;
    for (auto& [col, v] : l.t) v *= k;
    l.c *= k;
    return l;
  }
  Lin operator+(const Lin& o) const { return Lin(*this) += o; }
  Lin operator-(const Lin& o) const { return Lin(*this) += o * -1; }
};

// The program: columns (bounds, objective cost, integer or not) and rows
// "sum of terms >= lower bound"; CBC gets the rows as a row-ordered matrix.
struct Lp {
  std::vector<double> lo, hi, cost;  // per column
  std::vector<char> integer;         // per column
  std::vector<std::vector<std::pair<int, double>>> rows;  // (column, coefficient), sorted, merged, no zeros
  std::vector<double> row_lo;        // per row
  // A row whose terms all cancelled and whose constant fails: no assignment meets it.
  bool has_impossible_row = false;

  int columns() const { return static_cast<int>(lo.size()); }
  int col(double l, double h, bool is_int) {
    lo.push_back(l), hi.push_back(h), cost.push_back(0), integer.push_back(is_int);
    return columns() - 1;
  }
  void ge(const Lin& lhs, const Lin& rhs);  // adds the row lhs >= rhs
};

// What CBC answered. A finished search is a proof (an infeasible relaxation
// under the incumbent's cutoff included), except when time ran out.
struct Solution {
  bool found = false;             // x holds an assignment meeting every row
  bool proven_optimal = false;    // and no better one exists
  bool proven_infeasible = false; // no assignment meets every row
  double objective = 0, bound = 0;  // x's cost, and the best cost still possible
  std::vector<double> x;          // per column
};

// True when mutwo was built with COIN-OR CBC (-DMUTWO_WITH_CBC=ON).
bool solver_built();
// UserError saying how to build with CBC, when mutwo was built without it.
void require_solver();

// CBC's standard driver (preprocessing, cuts, heuristics) for at most
// `seconds` of wall clock, from the assignment `start` when given. Without
// CBC: UserError saying how to build with it. `preprocess` false for a
// program whose decisions are fixed (a plan checked against the model):
// preprocessing shrinks it to a few rows, where CBC 2.10 can abort (milp.cpp).
Solution solve(const Lp& lp, double seconds, const std::vector<double>* start, bool preprocess = true);

}  // namespace mutwo::plan::milp
