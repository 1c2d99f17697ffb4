// The compiled route's choice across a step's graphs (docs/compiled.md,
// "Several graphs"): one candidate per graph under one byte budget for the
// whole step, from plain data. The adapter (python/mutwo/compiled/_joint.py)
// reads each measured step into intervals (each compiled forward, each
// backward, the code between them) and gives, per graph and candidate, how
// that candidate moves each interval's measured peak; what is chosen, and how,
// is here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mutwo::plan::compiled {

// One graph's candidates: per candidate its modelled extra ms (already weighted
// by the graph's calls per step) and its change to each interval's measured
// peak (candidates × intervals, row-major); the candidates it may take.
struct StepGraph {
  std::vector<double> ms;
  std::vector<int64_t> delta;
  std::vector<int32_t> allowed;
};
struct StepProblem {
  std::vector<int64_t> base;  // each interval's measured peak above the step's start
  std::vector<StepGraph> graphs;
  int64_t budget = 0;
  // Every combination is tried where there are at most this many; else μ-TWO's greedy.
  int64_t exhaustive = 4096;
};
struct StepChoice {
  std::vector<int32_t> choice;        // a candidate per graph
  int64_t peak = 0;                   // the step's predicted peak under it (at least 0)
  double extra_ms = 0;
  bool feasible = false;              // every interval fits the budget
  int64_t floor = 0;                  // the lowest peak found, and its choice
  std::vector<int32_t> floor_choice;
  std::string method;                 // "exhaustive" or "greedy"
};
// The least extra time such that every interval fits the budget; where none
// fits, the lowest peak's choice. Exhaustive: ties go to the lower peak, then
// the first in order (the last graph varying fastest). Greedy: from each
// graph's fastest candidate, repeatedly the least time per byte taken off the
// worst interval that lowers it, then back to faster candidates where they
// still fit, the graphs of the slowest candidates first; its floor takes the
// most bytes off the worst interval until nothing lowers it.
StepChoice solve_step(const StepProblem& p);

}  // namespace mutwo::plan::compiled
