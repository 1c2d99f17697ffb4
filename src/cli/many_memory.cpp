// mutwo many --memory CAP: the most copies, up to --copies, that train under
// CAP (what the process holds, allocated and on the device, as max-batch's
// --memory), then that many trained as mutwo many trains them. Each count n is
// arranged as many arranges it (its orders planned under --budget, or as they
// are without one) and predicted to fit where its plan fits the budget and its
// predicted peak, with what the device holds outside the allocator, is at most
// CAP. The predicted answer is where the search on real runs starts
// (search_batches: each count run in this process and measured, the count
// above the answer too); that answer is trained in a fresh process and
// stepped down where it does not fit there (max_batch_fresh.h's
// confirm_fresh), as max-batch confirms its batches.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "cli/batch_search.h"
#include "cli/commands.h"
#include "cli/fresh_run.h"
#include "cli/many.h"
#include "cli/max_batch_fresh.h"
#include "cli/pipeline.h"
#include "ir/text.h"
#include "runtime/memory.h"
#include "support/error.h"
#include "support/progress.h"
#include "support/units.h"

namespace mutwo::cli {

namespace {

using nlohmann::json;

// Steps a count is measured for in this process, after one warm-up.
constexpr int kMeasuredSteps = 2;

std::string copies_text(int64_t n) { return fmt::format("{} cop{}", n, n == 1 ? "y" : "ies"); }

// The counts tried, each arranged once, predicted, and run here where predicted to fit.
class CopiesSearch {
 public:
  CopiesSearch(const ManyCommand& c, const c10::Device& dev, int64_t cap, Progress& progress)
      : c_(c), dev_(dev), cap_(cap), rates_(copy_rates(c)), progress_(progress) {}

  // n copies' plan fits --budget, and its predicted peak the cap.
  bool predicted_fits(int64_t n) { return at(n).predicted_fits; }
  // ... and run here, their measured peaks are within the cap.
  bool fits(int64_t n);
  // n copies, which fit here, trained in a fresh process.
  FreshRun train_fresh(int64_t n);
  const ArrangedCopies& arranged(int64_t n) { return at(n).a; }
  // Per count, in the order tried: copies, order, fits_budget,
  // predicted_peak_bytes, predicted_fits, peak_bytes and device_peak_bytes
  // (null: not run), out_of_memory, fits (null: predicted to fit, not run).
  json tries() const;
  // Why not even one copy fits, and what would: one line.
  std::string none_fits();

 private:
  struct Try {
    ArrangedCopies a;
    bool predicted_fits = false;
    bool measured = false, out_of_memory = false, fits = false;
    int64_t peak = 0, device_peak = 0;
  };
  Try& at(int64_t n);

  const ManyCommand& c_;
  const c10::Device dev_;
  const int64_t cap_;
  const std::vector<double> rates_;
  Progress& progress_;
  std::map<int64_t, Try> tries_;
  std::vector<int64_t> order_;  // the counts, as first tried
};

CopiesSearch::Try& CopiesSearch::at(int64_t n) {
  if (auto it = tries_.find(n); it != tries_.end()) return it->second;
  progress_.step(fmt::format("{}: {}", copies_text(n), c_.planning.budget.empty() ? "arranging" : "profiling"), 0);
  Try t;
  t.a = arrange_copies(c_, n, rates_, dev_);
  t.predicted_fits = t.a.fits_budget() && t.a.predicted_peak() + runtime::outside_allocator_bytes(dev_) <= cap_;
  order_.push_back(n);
  return tries_.emplace(n, std::move(t)).first->second;
}

bool CopiesSearch::fits(int64_t n) {
  Try& t = at(n);
  if (!t.predicted_fits || t.measured) return t.fits;
  progress_.step(fmt::format("{}: running", copies_text(n)), 0);
  t.measured = true;
  try {
    const Measured m = measure(t.a.graph, dev_, c_.device.seed, {kMeasuredSteps});
    t.peak = m.peak_bytes;
    t.device_peak = m.device_peak_bytes;
    t.fits = t.peak <= cap_ && t.device_peak <= cap_;
  } catch (const std::exception& e) {
    if (!runtime::is_out_of_memory(e)) throw;  // any other failure is an error, not fewer copies
    runtime::release_cached_memory(dev_);
    t.out_of_memory = true;
  }
  return t.fits;
}

FreshRun CopiesSearch::train_fresh(int64_t n) {
  MUTWO_ASSERT(fits(n), "{}: no fitting step to train in a fresh process", copies_text(n));
  progress_.step(fmt::format("{} in a fresh process", copies_text(n)), 0);
  runtime::release_cached_memory(dev_);  // the device for the child (this process keeps its context)
  FreshOptions o{c_.device, dev_};
  o.command = "many";
  o.skip_flag = nullptr;
  return run_fresh(ir::print(at(n).a.graph), fmt::format("{} of {}", copies_text(n), c_.step.what()), o);
}

json CopiesSearch::tries() const {
  json out = json::array();
  for (int64_t n : order_) {
    const Try& t = tries_.at(n);
    out.push_back({{"copies", n},
                   {"order", plan::to_string(t.a.chosen().order)},
                   {"fits_budget", t.a.fits_budget()},
                   {"predicted_peak_bytes", t.a.predicted_peak()},
                   {"predicted_fits", t.predicted_fits},
                   {"peak_bytes", t.measured && !t.out_of_memory ? json(t.peak) : json()},
                   {"device_peak_bytes", t.measured && !t.out_of_memory ? json(t.device_peak) : json()},
                   {"out_of_memory", t.out_of_memory},
                   {"fits", t.measured || !t.predicted_fits ? json(t.fits) : json()}});
  }
  return out;
}

std::string CopiesSearch::none_fits() {
  const Try& t = at(1);
  const plan::PlannedStep& step = t.a.chosen().step;
  if (!t.a.fits_budget()) {
    plan::PlanOptions in_bytes = c_.planning.plan_options(false);  // the budget as the orders were planned under it
    in_bytes.budget = Budget::of_bytes(step.plan.budget_bytes);
    return fmt::format("many: not even 1 copy fits --budget: {}", plan::infeasible_text(step, in_bytes));
  }
  const int64_t outside = runtime::outside_allocator_bytes(dev_);
  const int64_t need = std::max({t.a.predicted_peak() + outside, t.peak, t.device_peak});
  std::string lower;  // what the planner's lowest peak would need, where --budget did not ask for it
  const bool lowest = !c_.planning.budget.empty() && parse_budget(c_.planning.budget).kind == Budget::Kind::lowest;
  if (const int64_t floor = plan::plan_floor(c_.planning.planner, step.input).predicted.peak_bytes + outside;
      !lowest && floor < need)
    lower = fmt::format(", or --budget lowest, under which 1 copy is predicted to need {}", format_bytes(floor));
  return fmt::format("many: not even 1 copy of {} fits --memory {}: it needs {} ({}{}); give --memory at least {}{}",
                     c_.step.what(), format_bytes(cap_), format_bytes(need),
                     c_.planning.budget.empty() ? "unplanned, its predicted peak"
                                                : fmt::format("its predicted peak under --budget {}", c_.planning.budget),
                     t.measured && !t.out_of_memory ? fmt::format("; measured {}", format_bytes(std::max(t.peak, t.device_peak)))
                                                    : std::string(),
                     bytes_at_least(need), lower);
}

}  // namespace

int ManyCommand::most_copies(json& result) const {
  c10::Device dev = device.open();
  MUTWO_CHECK(memory != "free" || dev.is_cuda(), "--memory free means what is free on a CUDA card: add --device cuda, "
                                                 "or give a size (e.g. 2GiB)");
  const int64_t cap = device_memory_bytes(dev, memory);
  result["memory_bytes"] = cap;
  Progress progress("many", {!output.quiet});
  CopiesSearch s(*this, dev, cap, progress);
  const int64_t predicted = largest_fitting(1, copies, [&](int64_t n) { return s.predicted_fits(n); });
  progress.note(fmt::format("many: predicted: {} under --memory {}; confirming with real runs", copies_text(predicted),
                            format_bytes(cap)));
  const BatchSearch bs = search_batches(std::max<int64_t>(predicted, 1), copies, [&](int64_t n) { return s.fits(n); });
  FreshCheck check{cap, false, "copies"};
  check.train = [&](int64_t n) { return s.train_fresh(n); };
  check.subject = [](int64_t n) { return "many: " + copies_text(n); };
  check.below = [&](int64_t next) { return largest_fitting(next, next, [&](int64_t n) { return s.fits(n); }); };
  const FreshAnswer fresh = bs.answer > 0 ? confirm_fresh(bs.answer, check, progress) : FreshAnswer{};
  result.update({{"predicted_copies", predicted},
                 {"searched_copies", bs.answer},
                 {"monotone", bs.monotone},
                 {"tries", s.tries()},
                 {"fresh_process", fresh.row}});
  progress.done();
  std::string error;
  if (fresh.n == 0)  // no count fits, even in this process
    error = s.none_fits();
  else if (!fresh.fits)
    error = fmt::format("many: {} fitted in this process but not in a fresh one, nor did fewer down to {}, after {} "
                        "tries (fresh_process says what each measured); lower --memory by the overshoot, or run again",
                        copies_text(bs.answer), fresh.n, kFreshTries);
  if (!error.empty()) {
    result["error"] = error;
    if (output.json) std::cout << result.dump() << std::endl;
    fmt::print(stderr, "mutwo: {}\n", error);
    return fresh.n == 0 ? kExitInfeasible : 1;
  }
  const ArrangedCopies& a = s.arranged(fresh.n);
  fmt::print("mutwo many: the most copies under --memory {}, of at most {}: {} (predicted {}), confirmed in a fresh "
             "process: peak {}, {} under it\n",
             format_bytes(cap), copies, fresh.n, predicted, format_bytes(fresh.row["device_peak_bytes"].get<int64_t>()),
             format_bytes(fresh.row["margin_bytes"].get<int64_t>()));
  if (!output.quiet) print_orders(a);
  json j = train_arranged(*this, a, dev);
  j.update(result);
  j["copies"] = fresh.n;
  if (output.json) std::cout << j.dump() << std::endl;
  return 0;
}

}  // namespace mutwo::cli
