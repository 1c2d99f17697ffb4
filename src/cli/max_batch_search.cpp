// max-batch's search in this process (see max_batch_search.h): the model's
// predictions, real runs around them, each answer trained in a fresh process.
#include "cli/max_batch_search.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "cli/arena_output.h"
#include "cli/batch_search.h"
#include "cli/fresh_run.h"
#include "cli/max_batch_fresh.h"
#include "ir/text.h"
#include "runtime/memory.h"
#include "support/error.h"
#include "support/files.h"
#include "support/progress.h"
#include "support/units.h"

namespace mutwo::cli {

namespace {

using Clock = std::chrono::steady_clock;

// The first batch the model profiles: small, so cheap, yet past the sizes
// where fixed costs hide how node times grow.
constexpr int64_t kFirstModelBatch = 8;
// Plain steps a profile for the model runs (1 warm-up, 3 measured) and a run
// measures (1 warm-up, 2 measured): the progress estimate's cost of each,
// times the batch.
constexpr double kProfileSteps = 4, kRunSteps = 3;

// Whether a planner reads node times (the others' plans follow from bytes alone).
bool timed(const std::string& planner) { return planner == "mutwo" || planner == "optimal"; }

}  // namespace

using nlohmann::json;

std::string MaxBatchSearch::Need::text() const {
  return fmt::format("batch 1 needs {} (persistent state {})", format_bytes(bytes), format_bytes(persistent));
}

ProfilingOptions MaxBatchSearch::profiling(int64_t b) const {
  return ProfilingOptions::of(dev_, c_.device, false, c_.step.model, b);
}

plan::PlanOptions MaxBatchSearch::request() const {
  plan::PlanOptions o;
  c_.swap.apply_to(o);
  o.progress = !c_.output.quiet;
  return o;
}

const ir::Graph& MaxBatchSearch::step_at(int64_t b) {
  auto it = steps_.find(b);
  if (it != steps_.end()) return it->second;
  StepOptions s = c_.step;
  s.batch = b;
  return steps_.emplace(b, s.build()).first->second;
}

const PlannedOnDevice& MaxBatchSearch::modelled(int64_t b) {
  auto it = modelled_.find(b);
  if (it != modelled_.end()) return it->second;
  const auto t0 = Clock::now();
  PlannedOnDevice p;
  static_cast<plan::PlannedStep&>(p) = plan::prepare(model_.at(step_at(b), b), request());
  spent_.plan_s += std::chrono::duration<double>(Clock::now() - t0).count();
  return modelled_.emplace(b, std::move(p)).first->second;
}

const PlannedOnDevice& MaxBatchSearch::profiled(int64_t b) {
  auto it = profiled_.find(b);
  if (it != profiled_.end()) return it->second;
  progress_.step(fmt::format("profiling batch {}", b), kProfileSteps * static_cast<double>(b));
  const auto t0 = Clock::now();
  PlannedOnDevice p = profile_for_plan(step_at(b), profiling(b), request());
  spent_.profile_s += std::chrono::duration<double>(Clock::now() - t0).count();
  ++spent_.profiles;
  return profiled_.emplace(b, std::move(p)).first->second;
}

// Profiles the step at batch b for the model; false where it ran out of memory.
bool MaxBatchSearch::add_point(int64_t b) {
  if (model_.has(b)) return true;
  progress_.step(fmt::format("profiling batch {} for the model", b), kProfileSteps * static_cast<double>(b));
  const auto t0 = Clock::now();
  try {
    PlannedOnDevice p = profile_for_plan(step_at(b), profiling(b), request());
    model_.add(step_at(b), p.input.profile);
    profiled_.emplace(b, std::move(p));  // real runs at b plan from it too
  } catch (const std::exception& e) {
    if (!runtime::is_out_of_memory(e)) throw;
    runtime::release_cached_memory(dev_);
    return false;
  }
  spent_.profile_s += std::chrono::duration<double>(Clock::now() - t0).count();
  ++spent_.profiles;
  model_batches_.push_back(b);
  modelled_.clear();  // the model as it was
  return true;
}

// Where the predicted search starts: the batch at which the lowest peak the
// planner reaches on the model meets the budget, by the secant method from
// the first two batches the model measured (or the first and its double):
// the peak is close to linear in the batch, so a few steps land near it.
int64_t MaxBatchSearch::guess(const std::string& planner) {
  const auto budget = static_cast<double>(cap_ - runtime::outside_allocator_bytes(dev_));
  // The optimal planner's lowest peak is a MILP bisection: the greedy's is close, and quick.
  const std::string by = planner == "optimal" ? "mutwo" : planner;
  auto lowest = [&](int64_t b) {
    const auto t0 = Clock::now();
    const double peak = static_cast<double>(plan::run_planner(by, modelled(b).input, 0).predicted.peak_bytes);
    spent_.plan_s += std::chrono::duration<double>(Clock::now() - t0).count();
    ++spent_.plans;
    return peak;
  };
  int64_t xa = model_batches_.empty() ? std::min(c_.limit, kFirstModelBatch) : model_batches_.front();
  int64_t xb = model_batches_.size() > 1 ? model_batches_.back() : 2 * xa;
  double ya = lowest(xa), yb = lowest(xb);
  // Where the lowest peak is flat at small batches (held by persistent state
  // and fixed workspaces), look further out.
  for (int widen = 0; widen < 4 && yb <= ya && xb < c_.limit; ++widen) {
    xb = std::min(c_.limit, 4 * xb);
    yb = lowest(xb);
  }
  for (int i = 0; i < 3; ++i) {
    const double slope = (yb - ya) / static_cast<double>(xb - xa);
    if (!(slope > 0)) return i == 0 ? c_.limit : xb;  // not growing with the batch (as far as seen)
    const int64_t next = std::clamp<int64_t>(std::llround(static_cast<double>(xb) + (budget - yb) / slope), 1, c_.limit);
    if (next == xb || next == xa) return next;
    xa = xb, ya = yb;
    xb = next, yb = lowest(next);
  }
  return xb;
}

// The lowest peak planner reaches at batch 1 (the greedy's for optimal, as in
// guess(): its MILP floor is slow), on the step's own bytes, with what the
// device holds outside the allocator.
MaxBatchSearch::Need MaxBatchSearch::batch_one_needs(const std::string& planner) {
  const PlannedOnDevice& p = modelled(1);
  const plan::Plan low = plan::run_planner(planner == "optimal" ? "mutwo" : planner, p.input, 0);
  return {low.predicted.peak_bytes + runtime::outside_allocator_bytes(dev_),
          p.input.profile.persistent_bytes + p.input.start_extra_bytes};
}

std::string MaxBatchSearch::none_fits() const {
  const std::vector<std::string> planners = planner_list(c_.planners);
  const std::string* least = nullptr;  // in --planners' order, the first that needs least
  for (const std::string& p : planners) {
    if (!short_.count(p)) return {};
    if (!least || short_.at(p).bytes < short_.at(*least).bytes) least = &p;
  }
  if (!least) return {};
  return fmt::format("max-batch: batch 1 does not fit --memory {} under any planner ({}): {}, the least, with {}; give "
                     "--memory at least that, or a smaller model or sequence",
                     format_bytes(cap_), fmt::join(planners, ", "), short_.at(*least).text(), *least);
}

bool MaxBatchSearch::predicted_fits(const std::string& planner, int64_t b) {
  const PlannedOnDevice& p = modelled(b);
  const auto t0 = Clock::now();
  const plan::Plan plan = plan::run_planner(planner, p.input, cap_ - runtime::outside_allocator_bytes(dev_));
  spent_.plan_s += std::chrono::duration<double>(Clock::now() - t0).count();
  ++spent_.plans;
  return plan.feasible;
}

void MaxBatchSearch::predict(const std::vector<std::string>& all) {
  if (full()) return;
  // An unknown name is left to its turn in answer(), which fails on it after
  // the planners before it have their answers (--json's "results").
  std::vector<std::string> planners;
  for (const std::string& p : all)
    if (std::find(plan::planner_names().begin(), plan::planner_names().end(), p) != plan::planner_names().end())
      planners.push_back(p);
  const int64_t first = std::min(c_.limit, kFirstModelBatch);
  progress_.expect(kProfileSteps * static_cast<double>(first));
  if (!add_point(first) && first > 1) add_point(1);
  // Each planner's answer on the model as it stands, from where the line
  // through its lowest peaks meets the budget; then, with two measured
  // batches, again from the answers before.
  auto answers = [&](bool first_round) {
    for (const std::string& p : planners) {
      progress_.step(fmt::format("{}: predicting its answer", p), 0);
      const int64_t from = first_round ? guess(p) : predicted_[p];
      predicted_[p] = largest_fitting(from, c_.limit, [&](int64_t b) { return predicted_fits(p, b); });
    }
  };
  answers(true);
  // The second batch profiled, for the planners that read node times (the
  // others' plans follow from bytes alone, which the step at each batch
  // gives exactly): the largest answer, where the runs that confirm it go
  // anyway.
  int64_t second = 0;
  bool any_timed = false;
  for (const std::string& p : planners) {
    second = std::max(second, predicted_[p]);
    any_timed |= timed(p);
  }
  if (any_timed && !model_batches_.empty() && second > 0 && !model_.has(second)) {
    progress_.expect(kProfileSteps * static_cast<double>(second));
    if (add_point(second)) answers(false);
  }
  std::string line;
  for (const std::string& p : planners) {
    line += fmt::format("{}{} {}", line.empty() ? "" : ", ", p, predicted_[p]);
    // The answer, one above and 5% above, each run (and profiled, for a
    // planner that reads node times); the answer again in a fresh process.
    const auto a = static_cast<double>(predicted_[p]);
    progress_.expect(((timed(p) ? kProfileSteps : 0) + kRunSteps) * (a + (a + 1) + std::max(a + 1, a * 1.05)) +
                     (c_.no_fresh_check ? 0 : kRunSteps * a));
  }
  std::string from = model_batches_.empty() ? std::string("the roofline estimate (no batch could be profiled)")
                                            : fmt::format("profiles at batch {}", fmt::join(model_batches_, " and "));
  progress_.note(fmt::format("max-batch: predicted from {}: {}; confirming with real runs", from, line));
}

// Device bytes of `planner` at batch b. A budget is what the device holds for
// the process: the plan's allocated budget leaves room for what the CUDA
// context and libraries hold, and when the measured device peak still passes
// the cap (the allocator's fragmentation, workspaces), the overshoot comes off
// the budget and the step is planned again, up to three times.
MaxBatchSearch::Fit MaxBatchSearch::try_run(const std::string& planner, int64_t b) {
  const PlannedOnDevice* base = nullptr;
  try {
    // Planners that read node times plan from the step profiled at b; the
    // others from the model, whose bytes at b are the step's own (the search
    // before the model profiled every batch for every planner).
    base = full() || timed(planner) ? &profiled(b) : &modelled(b);
  } catch (const std::exception& e) {
    if (!runtime::is_out_of_memory(e)) throw;  // any other failure is an error, not a smaller batch
    runtime::release_cached_memory(dev_);
    return {};  // even under the most recomputation
  }
  int64_t budget = cap_ - runtime::outside_allocator_bytes(dev_);
  Fit last;
  for (int attempt = 0; attempt < (planner == "none" ? 1 : 3) && budget > 0; ++attempt) {
    try {
      auto t0 = Clock::now();
      PlannedOnDevice p = *base;
      plan::PlanOptions o = request();
      o.planner = planner;
      o.budget = Budget::of_bytes(budget);
      plan::plan_and_rewrite(p, o, c_.step.dump_ir_after.rewrite_passes());
      spent_.plan_s += std::chrono::duration<double>(Clock::now() - t0).count();
      ++spent_.plans;
      if (planner != "none" && !p.plan.feasible) return last;
      const std::string text = ir::print(p.rewritten.graph);
      auto m = measured_.find(text);
      if (m == measured_.end()) {
        t0 = Clock::now();
        int64_t over = 0;
        Measured got = measure_step(p.rewritten.graph, over);
        spent_.run_s += std::chrono::duration<double>(Clock::now() - t0).count();
        ++spent_.runs;
        if (over > 0) {  // the arena alone passes the cap: plan lower by that much, not measured
          budget -= over;
          continue;
        }
        m = measured_.emplace(text, std::move(got)).first;
      }
      last = {false, true, m->second.peak_bytes, m->second.device_peak_bytes, {}};
      if (m->second.device_peak_bytes <= cap_ && m->second.peak_bytes <= cap_)
        return {true, true, m->second.peak_bytes, m->second.device_peak_bytes,
                c_.out.empty() && c_.no_fresh_check ? std::string() : text};
      budget -= m->second.device_peak_bytes - cap_;
    } catch (const std::exception& e) {
      if (!runtime::is_out_of_memory(e)) throw;  // any other failure is an error, not a smaller batch
      runtime::release_cached_memory(dev_);
      budget = budget / 20 * 19;  // out of memory: how far over is unknown
    }
  }
  return last;
}

Measured MaxBatchSearch::measure_step(const ir::Graph& g, int64_t& arena_over) {
  arena_over = 0;
  if (!arena_) return measure(g, dev_, c_.device.seed, {2});
  runtime::ExecutorOptions o{dev_, c_.device.seed};
  o.arena = true;
  arena_over = prepare_arena_within_cap(g, o);
  if (arena_over > 0) return {};
  return measure(g, dev_, c_.device.seed, {2, false, o.arena_workspace});
}

const MaxBatchSearch::Fit& MaxBatchSearch::run(const std::string& planner, int64_t b) {
  auto it = runs_.find({planner, b});
  if (it == runs_.end()) {
    progress_.step(fmt::format("{}: running batch {}", planner, b), kRunSteps * static_cast<double>(b));
    it = runs_.emplace(std::make_pair(planner, b), try_run(planner, b)).first;
  }
  if (std::none_of(tried_.begin(), tried_.end(), [&](const json& t) { return t["batch"] == b; }))
    tried_.push_back({{"batch", b}, {"fits", it->second.fits},
                      {"peak_bytes", it->second.measured ? json(it->second.peak) : json()}});
  return it->second;
}

// Trains planner's answer b, which fitted in this process, in a fresh one
// (cli/fresh_run.h), stepped down where it does not fit there
// (max_batch_fresh.h's confirm_fresh), to the largest lower batch that fits in this process.
MaxBatchSearch::Confirmed MaxBatchSearch::confirm_fresh(const std::string& planner, int64_t b) {
  FreshCheck check{cap_, arena_};
  check.train = [&](int64_t x) {
    const Fit& f = run(planner, x);
    MUTWO_ASSERT(f.fits && !f.step.empty(), "{} at batch {}: no fitting step to train in a fresh process", planner, x);
    progress_.step(fmt::format("{}: batch {} in a fresh process", planner, x), kRunSteps * static_cast<double>(x));
    runtime::release_cached_memory(dev_);  // the device for the child (this process keeps its context)
    const FreshRun r = run_fresh(f.step, fmt::format("{} at batch {}", planner, x), {c_.device, dev_, arena_});
    spent_.fresh_s += r.seconds;
    ++spent_.fresh;
    return r;
  };
  check.subject = [&](int64_t x) { return fmt::format("max-batch: {}: batch {}", planner, x); };
  check.below = [&](int64_t next) { return largest_fitting(next, next, [&](int64_t x) { return run(planner, x).fits; }); };
  const FreshAnswer a = cli::confirm_fresh(b, check, progress_);
  return {a.n, a.fits, a.row};
}

// mutwo's floor: the larger of per-layer's and sqrt-n's answers confirmed so
// far (plan_mutwo takes their plans where the simulator finds them better,
// plan/mutwo.cpp; on a card, measured, the same holds here), with its planner.
std::pair<const MaxBatchSearch::Confirmed*, std::string> MaxBatchSearch::floor_of(const std::string& planner) const {
  std::pair<const Confirmed*, std::string> best{nullptr, ""};
  if (planner != "mutwo") return best;
  for (const char* peer : {"per-layer", "sqrt-n"})
    if (auto it = answered_.find(peer); it != answered_.end() && it->second.fits &&
                                        (!best.first || it->second.batch > best.first->batch))
      best = {&it->second, peer};
  return best;
}

json MaxBatchSearch::answer(const std::string& planner) {
  tried_ = json::array();
  const auto pr = predicted_.find(planner);
  const BatchSearch bs = search_batches(pr == predicted_.end() ? 1 : pr->second, c_.limit,
                                        [&](int64_t b) { return run(planner, b).fits; });
  const int64_t searched = bs.answer;  // the largest batch that fitted in this process
  if (!bs.monotone)
    progress_.warn(fmt::format("max-batch: {}: fitting is not monotone in the batch here (the search settled on {}, "
                               "yet {} fits); the answer is the largest batch that fitted, {}",
                               planner, bs.first_answer, searched, searched));
  Confirmed fresh = c_.no_fresh_check || searched == 0 ? Confirmed{searched, true, json()}
                                                       : confirm_fresh(planner, searched);
  const int64_t own = fresh.fits ? fresh.batch : 0;  // the planner's own plans' answer, confirmed (0: none)
  answered_[planner] = fresh;
  std::string from = planner;  // whose plan the answer is
  if (const auto [floor, peer] = floor_of(planner); floor && floor->batch > own) {
    progress_.warn(fmt::format("max-batch: {}: its own plans reach batch {}, {}'s {}: the answer is {}'s plan, as "
                               "plan_mutwo takes it where it is better", planner, own, peer, floor->batch, peer));
    fresh = *floor;
    from = peer;
  }
  const int64_t lo = fresh.batch;
  const Fit best = lo > 0 ? runs_.at({from, lo}) : Fit{};
  Need need;  // where no batch fits
  if (lo == 0) need = short_[planner] = batch_one_needs(planner);
  const std::string name = from == planner ? planner : fmt::format("{} ({}'s plan)", planner, from);
  if (lo > 0)
    fmt::print("| {} | {} | {} | {} | {} |\n", name, lo, format_bytes(best.peak), format_bytes(best.device_peak),
               c_.no_fresh_check ? std::string("skipped") : fresh_cell(fresh.row));
  else
    fmt::print("| {} | 0 | - | - | {} |\n", planner, need.text());
  json r{{"planner", planner},   {"max_batch", lo},          {"peak_bytes", lo > 0 ? json(best.peak) : json()},
         {"device_peak_bytes", lo > 0 ? json(best.device_peak) : json()}, {"above_batch", bs.above},
         {"above_fits", bs.above_fits}, {"predicted_batch", pr == predicted_.end() ? json() : json(pr->second)},
         {"runs", tried_}, {"searched_batch", searched}, {"fresh_process", fresh.row},
         {"monotone", bs.monotone}, {"answer_from", from}, {"own_max_batch", own}};
  if (lo == 0) r.update({{"batch1_needs_bytes", need.bytes}, {"persistent_bytes", need.persistent}});
  note_answer(planner, searched, name, fresh);
  if (!fresh.fits)
    unconfirmed_.push_back(fmt::format("{} (fresh-process tries: {})", planner, fresh.row["tries"].dump()));
  if (!c_.out.empty() && lo > 0) {
    make_dirs(c_.out);
    const std::string path = c_.out + "/" + planner + ".ir";
    write_file(path, best.step);
    r["step"] = path;
  }
  return r;
}

// The progress notes on planner's answer: what the search found against its
// prediction, and the fresh process's peak where it confirmed `fresh`.
void MaxBatchSearch::note_answer(const std::string& planner, int64_t searched, const std::string& name,
                                 const Confirmed& fresh) {
  int measured = 0;
  for (const json& t : tried_) measured += !t["peak_bytes"].is_null();
  if (const auto pr = predicted_.find(planner); pr != predicted_.end())
    progress_.note(fmt::format("max-batch: {}: {} (predicted {}; {} batch(es) tried: {} run and measured, {} refused "
                               "by the plan)",
                               planner,
                               searched == 0         ? "batch 1 does not fit: " + batch_one_needs(planner).text()
                               : searched == c_.limit ? fmt::format("batch {} fits, the --limit", searched)
                                                      : fmt::format("batch {} fits, {} does not", searched, searched + 1),
                               pr->second, tried_.size(), measured, tried_.size() - measured));
  if (fresh.fits && !fresh.row.is_null())
    progress_.note(fmt::format("max-batch: {}: batch {} confirmed in a fresh process: peak {}, {} under --memory", name,
                               fresh.batch, format_bytes(fresh.row["device_peak_bytes"].get<int64_t>()),
                               format_bytes(fresh.row["margin_bytes"].get<int64_t>())));
}

std::string MaxBatchSearch::spent() const {
  return fmt::format("{} profile(s) {:.1f} s, {} plan(s) {:.1f} s, {} measured run(s) {:.1f} s, {} fresh process(es) "
                     "{:.1f} s",
                     spent_.profiles, spent_.profile_s, spent_.plans, spent_.plan_s, spent_.runs, spent_.run_s,
                     spent_.fresh, spent_.fresh_s);
}

}  // namespace mutwo::cli
