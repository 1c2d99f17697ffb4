// The optimal planner's model of swapping (optimal_model.cpp says what it
// captures): where a swap frees its bytes, the time recomputation adds before
// each node, and CUDA's copy streams as queues. Internal to the model; plain
// data and milp columns, no CBC.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/milp.h"
#include "plan/optimal_model.h"
#include "plan/plan.h"
#include "rewrite/swap.h"

namespace mutwo::plan {

// Where swapping one storage frees its bytes (nodes of the model's schedule),
// its copies alone on their streams.
struct SwapWindow {
  int32_t freed = 0, back = 0;  // saved on [freed, back)
  int32_t freed_again = 0;      // optimizer state: saved again on [freed_again, nodes) after its write-back
  int32_t before = -1, read = -1;  // the gap (rewrite::Gap)
  double land_by = 0;  // when the copy back must be done: the read's start, or for a multi-tensor
                       // optimizer node (which the rewrite splits into buckets, each reading its
                       // own part) the node's end: a relaxation
  bool by_optimizer = false;  // read first by a multi-tensor optimizer node
  double out_ms = 0, in_ms = 0;
};

SwapWindow swap_window(const PlanInput& in, const std::vector<double>& start, const rewrite::Gap& gap, int64_t bytes,
                       bool read_by_optimizer);

// The node before which w's copy back starts to land by `land_by` for a read
// at node `read`: on CUDA rewrite::prefetch_point, the copy alone on its
// stream; in line (the CPU), the read itself.
int32_t back_point(const PlanInput& in, const std::vector<double>& start, const SwapWindow& w, double land_by,
                   int32_t read);

// Recomputation's time before each node: clones run right before their
// stage's node, so node n starts later by T[s] = the recomputed nodes' time
// at stages up to n's (a column per stage, equal to sum of ms_q A[s,q]).
// Copies on CUDA are timed against it; `most` is its bound with every
// recomputable node recomputed.
struct Shift {
  std::vector<int> col;      // per node: T's column for the last stage at or before it; -1: none
  std::vector<int> before;   // per node: T's column for the last stage before it (a stage node's clones start then)
  std::vector<double> most;  // per node
  static milp::Lin var(const std::vector<int>& c, int32_t n) {
    return c.empty() || c[size_t(n)] < 0 ? milp::Lin(0) : milp::Lin::var(c[size_t(n)]);
  }
  milp::Lin at(int32_t n) const { return var(col, n); }
  milp::Lin at_clones(int32_t n) const { return var(before, n); }
  double most_at(int32_t n) const { return most.empty() ? 0 : most[size_t(n)]; }
};
// The shift's columns, when `wanted` (CUDA copies to time), else none.
Shift recompute_shift(milp::Lp& lp, const OptimalModel& m, const PlanInput& in, bool wanted);

// The copy streams on CUDA as the model sees them: one queue each way, in
// the rewrite's order. To the host, copies in the order they are issued
// (after their gap's first part; optimizer state after its update), each
// done at D[e] >= max(D[e-1], its issue) + its time when swapped. Back to the
// device, copies from the last needed to the first, each starting at
// P[e] <= min(P[e-1], its read) - its time when swapped, except copies for
// the optimizer, each alone (optimal_model.cpp: a relaxation). Times are
// shifted by the recomputation before each node (Shift). A window's ends
// between the copy alone on its stream (SwapWindow) and every candidate
// swapped ahead of it are uncertain: there, saving at node r needs a binary
// column tied to D (done before r starts) or P (started after r ends). One
// stall column, the step's extra time: at least each swapped copy back's
// start before its copy out is done, the queue to the host's tail past the
// step's end, and the queue back's head before its start. In line (the CPU)
// nothing queues: the windows are exact.
struct CopyQueues {
  struct Ends {
    int done = -1, begin = -1;           // D and P columns
    double done_most = 0, begin_least = 0;  // with every candidate swapped
    int32_t freed_until = 0, back_from = 0;  // uncertain: [freed, freed_until) and [back_from, back)
    int32_t freed_again_until = 0;           // optimizer state: [freed_again, freed_again_until)
    int again_done = -1;                     // its write-back's D column
    double again_most = 0;
  };
  std::vector<Ends> ends;  // per swap candidate
  std::vector<double> start;
  std::vector<SwapWindow> windows;
  Shift shift;
  int stall = -1;  // the step's extra time: compute waiting for copies (a wait before r lets r's copies out finish)
  std::vector<int32_t> back_most;  // per swap: the latest its copy back may start before (recomputation's time included)

  milp::Lin at(int32_t n) const { return milp::Lin(start[size_t(n)]) + shift.at(n); }

  // The column saying swap k frees its bytes at node r (with `clones`: while
  // the clones of r's stage run, before it), given `col` (the window's column
  // there): `col` itself where r is certain, else a binary column at most
  // `col` tied to the queue's times.
  int saving(milp::Lp& lp, size_t k, int32_t r, int col, bool clones) const;
};

CopyQueues copy_queues(milp::Lp& lp, const OptimalModel& m, const std::vector<SwapWindow>& windows,
                       const std::vector<double>& start, bool overlap, Shift shift);

}  // namespace mutwo::plan
