// What lowered a plan's peak, one decision at a time: the vocabulary loss in
// smaller chunks, activations recomputed, random nodes replayed, storages
// swapped to host memory, parameters updated early. Each is priced by the one
// simulator: the plan's predicted peak without that decision, the rest kept.
// Every report of a plan lists them (optimize's table, plan's summary,
// report.md, plan.json's `decisions`, mutwo.torch's report()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace mutwo::plan {

struct Decision {
  std::string kind;   // "chunks", "recompute", "replay", "swap", "update_early"
  int32_t count = 0;  // nodes chunked, activations dropped, random nodes replayed, storages swapped; 0 for update_early
  int64_t bytes = 0;  // activations dropped, storages swapped, generator states kept; 0 for chunks and update_early
  int64_t peak_without_bytes = 0;  // the plan's predicted peak without this decision
  int64_t lowered_bytes = 0;       // peak_without_bytes minus the plan's predicted peak (<= 0: not alone)
  std::string text;   // one line for a reader, without the peak ("the vocabulary loss in chunks of 64 rows ...")
};
// The decisions of `p`, a plan of `in` (the unchunked input the planner was
// given, as Planned::input holds), in the order above; empty for a plan that
// changes nothing. update_early is listed only where it lowers the peak (a
// step without optimizer nodes, mutwo.torch's, has no update to move).
std::vector<Decision> decisions(const PlanInput& in, const Plan& p);

// "the vocabulary loss in chunks ...: peak 18.6 MiB lower (124.0 MiB without it)".
std::string decision_line(const Decision& d);

}  // namespace mutwo::plan
