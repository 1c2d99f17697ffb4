// The pass manager every plan's step goes through: the rewrite passes
// (recomputation, early updates, swaps) run in order, each one's output
// verified (ops::verify) and handed to the caller's `after` hook (the CLI's
// --dump-ir-after), so no rewritten graph reaches the executor unverified.
// plan::rewrite_plan builds the pass list from a plan; the simulator, which
// rewrites every candidate plan a planner weighs, runs the same list without
// the verifier (its chosen plan is rewritten again, verified, to be run).
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "rewrite/recompute.h"

namespace mutwo::rewrite {

struct Pass {
  std::string_view name;  // as --dump-ir-after names it: recompute, update-early, swap
  std::function<Rewritten(const Rewritten&)> run;
};

struct PassOptions {
  bool verify = true;  // ops::verify after each pass
  std::function<void(std::string_view pass, const ir::Graph&)> after;  // each pass's output, verified
};

// Runs `passes` in order from `start`. A pass whose output does not verify is
// a bug in it: InternalError naming the pass and what the verifier found.
Rewritten run_passes(Rewritten start, const std::vector<Pass>& passes, const PassOptions& o = {});

}  // namespace mutwo::rewrite
