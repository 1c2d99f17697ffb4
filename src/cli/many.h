// mutwo many's pieces, shared by its run of --copies N copies (many_cmd.cpp)
// and its search under --memory for the most copies that train
// (many_memory.cpp): n copies composed and arranged in the order the scheduler
// chooses, then trained and reported.
#pragma once

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

#include "cli/commands.h"
#include "ir/graph.h"
#include "models/copies.h"
#include "plan/orders.h"

namespace mutwo::cli {

// The learning rate of each of c.copies copies: --lrs (one for all, or one per
// copy; else UserError), or --lr.
std::vector<double> copy_rates(const ManyCommand& c);

// n copies of the command's model as one step, arranged: each order planned
// under --budget from one profile of the composed step (phase by phase), or,
// without --budget, each as it is from an estimated profile (nothing runs);
// the scheduler's choice, and where it fits, the step that runs.
struct ArrangedCopies {
  std::vector<double> rates;      // copy i's learning rate
  std::vector<ir::Graph> alone;   // copy i's own step
  models::Copies copies;          // them composed (phase by phase)
  plan::OrderChoice choice;       // the orders weighed and the chosen one
  bool planned = false;           // under --budget: profiled, planned and (where it fits) rewritten
  ir::Graph graph;                // the step that runs: the chosen order (rewritten where planned); empty where it does not fit
  const plan::OrderCandidate& chosen() const { return choice.best(); }
  bool fits_budget() const { return chosen().step.plan.feasible; }
  int64_t predicted_peak() const { return chosen().step.plan.predicted.peak_bytes; }
};
// `rates`: c's copy_rates; the first n are the copies'.
ArrangedCopies arrange_copies(const ManyCommand& c, int64_t n, const std::vector<double>& rates,
                              const c10::Device& dev);

// One line per order weighed ("order sequential predicted peak 2.1 MiB, ... (chosen)").
void print_orders(const ArrangedCopies& a);

// Trains a's step (it fits its budget) for c.steps steps, each copy from its
// own seed, with the lines plain mutwo many prints; its --json object.
nlohmann::json train_arranged(const ManyCommand& c, const ArrangedCopies& a, const c10::Device& dev);

}  // namespace mutwo::cli
