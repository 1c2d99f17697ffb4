// mutwo many: trains N copies of one zoo model as one training graph
// (models::compose_copies), copy i from seed S+i at learning rate lrs[i],
// planned by the one planner under one --budget and run by the one executor.
// Copy i's losses are `mutwo run --seed S+i --lr lrs[i]`'s, bit for bit on the
// CPU. The copies run in the order μ-TWO's scheduler chooses (plan/orders.h:
// phase by phase, one copy after another, or one copy's backward interleaved
// with the next one's forward), each order planned under the one budget and
// judged by the simulator; --order asks for one. Unfused (no batched matmuls
// across copies yet). --memory's search is many_memory.cpp's.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>

#include "analysis/liveness.h"
#include "cli/commands.h"
#include "cli/ending_in_json.h"
#include "cli/many.h"
#include "cli/pipeline.h"
#include "models/copies.h"
#include "plan/orders.h"
#include "profile/profile.h"
#include "runtime/executor.h"
#include "support/error.h"
#include "support/units.h"

namespace mutwo::cli {

namespace {

using nlohmann::json;

// "0.01,0.1" as numbers; the validator below has refused anything else.
std::vector<double> parse_numbers(const std::string& s) {
  std::vector<double> out;
  std::stringstream list(s);
  for (std::string item; std::getline(list, item, ',');) out.push_back(std::strtod(item.c_str(), nullptr));
  return out;
}

const CLI::Validator kLearningRates = CLI::Validator(
    [](std::string& s) -> std::string {
      std::stringstream list(s);
      for (std::string item; std::getline(list, item, ',');) {
        char* end = nullptr;
        const double v = std::strtod(item.c_str(), &end);
        if (item.empty() || *end != '\0' || !(v >= 0))
          return fmt::format("'{}' is not a learning rate (a number >= 0); give them comma-separated, e.g. 0.01,0.05", item);
      }
      if (s.empty() || s.back() == ',') return "give learning rates comma-separated, e.g. 0.01,0.05";
      return {};
    },
    "LR[,LR...]");

std::vector<plan::CopyOrder> orders_asked(const std::string& flag) {
  if (flag == "auto") return plan::copy_orders();
  for (plan::CopyOrder o : plan::copy_orders())
    if (plan::to_string(o) == flag) return {o};
  MUTWO_FAIL("--order {}: not an order; give auto, by-phase, sequential or paired", flag);
}

// Each copy's initial values as a lone step from its seed makes them: the
// copy's persistent values in its own order, from a CPU generator seeded
// seed + i (runtime::Executor::initialize's walk), keyed by their copy names.
std::map<std::string, at::Tensor> initial_values(const models::Copies& c, const std::vector<ir::Graph>& steps,
                                                 uint64_t seed) {
  std::map<std::string, at::Tensor> given;
  for (size_t i = 0; i < steps.size(); ++i) {
    at::Generator gen = at::detail::createCPUGenerator(seed + i);
    for (const ir::Value& v : steps[i].values())
      if (ir::is_persistent(v.role))
        given.emplace(c.graph.value(c.value_of[i][static_cast<size_t>(v.id)]).name,
                      runtime::make_initial(v.type, v.init, gen));
  }
  return given;
}

// What the steps measured: per copy its losses, the peak, the step times.
struct Trained {
  std::vector<std::vector<double>> losses;
  std::vector<double> ms;
  int64_t peak_bytes = 0;
};

Trained train(const ir::Graph& g, const models::Copies& c, std::map<std::string, at::Tensor> given,
              const c10::Device& dev, uint64_t seed, int64_t steps) {
  runtime::Executor ex(g, {dev, seed});
  ex.initialize(given);
  given.clear();  // the executor holds them now
  Trained t;
  t.losses.resize(c.loss_output.size());
  for (int64_t s = 0; s < steps; ++s) {
    runtime::StepResult r = ex.step();
    std::vector<std::string> shown;
    for (size_t i = 0; i < c.loss_output.size(); ++i) {
      t.losses[i].push_back(r.outputs.at(c.loss_output[i]));
      shown.push_back(fmt::format("{:.6f}", t.losses[i].back()));
    }
    t.ms.push_back(r.ms);
    t.peak_bytes = std::max(t.peak_bytes, r.peak_bytes);
    fmt::print("step {:>4}  losses {}  {:.2f} ms  peak {}\n", s + 1, fmt::join(shown, " "), r.ms,
               format_bytes(r.peak_bytes));
    std::fflush(stdout);
  }
  return t;
}

}  // namespace

std::vector<double> copy_rates(const ManyCommand& c) {
  std::vector<double> rates = c.lrs.empty() ? std::vector<double>{c.step.lr} : parse_numbers(c.lrs);
  MUTWO_CHECK(rates.size() == 1 || rates.size() == static_cast<size_t>(c.copies),
              "--lrs has {} learning rates for {} copies: give one for all copies or {}, one per copy "
              "(comma-separated)", rates.size(), c.copies, c.copies);
  rates.resize(static_cast<size_t>(c.copies), rates.front());
  return rates;
}

ArrangedCopies arrange_copies(const ManyCommand& c, int64_t n, const std::vector<double>& rates,
                              const c10::Device& dev) {
  ArrangedCopies a;
  a.rates.assign(rates.begin(), rates.begin() + n);
  for (double lr : a.rates) {
    StepOptions s = c.step;
    s.lr = lr;
    a.alone.push_back(s.build());
  }
  a.copies = models::compose_copies(a.alone);
  const plan::PlanOptions options = c.planning.plan_options(!c.output.quiet);
  // The orders, each planned under the budget from one profile of the
  // composed step (phase by phase); with no budget, each as it is, from an
  // estimated profile (nothing runs: paired's interleaving weighs the nodes
  // by their estimated times).
  a.planned = !c.planning.budget.empty();
  const plan::PlannedStep p =
      a.planned ? profile_for_plan(a.copies.graph,
                                   ProfilingOptions::of(dev, c.device, !c.output.quiet, c.step.model, c.step.batch),
                                   options)
                : plan::prepare(profile::estimate_profile(a.copies.graph, dev.str()), options);
  a.choice = plan::choose_order(p, options, orders_asked(c.order));
  plan::OrderCandidate& chosen = a.choice.best();
  if (!chosen.step.plan.feasible) return a;
  if (a.planned)
    chosen.step.rewritten = plan::rewrite_plan(chosen.step.input, chosen.step.plan, c.step.dump_ir_after.rewrite_passes());
  a.graph = a.planned ? chosen.step.rewritten.graph : plan::reorder(a.copies.graph, chosen.schedule);
  return a;
}

void print_orders(const ArrangedCopies& a) {
  for (size_t i = 0; i < a.choice.candidates.size(); ++i) {
    const plan::OrderCandidate& k = a.choice.candidates[i];
    fmt::print("order {:<10} {} peak {}, step {:.2f} ms{}{}\n", plan::to_string(k.order),
               a.planned ? "predicted" : "estimated", format_bytes(k.step.plan.predicted.peak_bytes),
               k.step.plan.predicted.step_ms, a.planned ? fmt::format(", {} dropped", k.step.plan.drop.size()) : std::string(),
               i == a.choice.chosen ? (k.step.plan.feasible ? "  (chosen)" : "  (the lowest; over the budget)")
                                    : (k.step.plan.feasible ? "" : "  (over the budget)"));
  }
}

json train_arranged(const ManyCommand& c, const ArrangedCopies& a, const c10::Device& dev) {
  const int64_t copies = static_cast<int64_t>(a.rates.size());
  const ir::Graph& g = a.graph;
  const plan::PlannedStep* p = a.planned ? &a.chosen().step : nullptr;
  fmt::print("mutwo many: {} copies of {} on {}, one graph of {} nodes in order {}, {} steps\n", copies, c.step.what(),
             dev.str(), g.nodes().size(), plan::to_string(a.chosen().order), c.steps);
  if (p)
    fmt::print("plan: {} under {}: {} activations dropped, {} recompute nodes, predicted peak {} (unplanned {})\n",
               c.planning.planner, format_bytes(p->plan.budget_bytes), p->plan.drop.size(), p->rewritten.clones,
               format_bytes(p->plan.predicted.peak_bytes), format_bytes(p->unplanned_peak));
  const Trained t = train(g, a.copies, initial_values(a.copies, a.alone, c.device.seed), dev, c.device.seed, c.steps);
  double seconds = 0;
  for (double ms : t.ms) seconds += ms / 1000;
  const double model_steps_per_s = static_cast<double>(copies * c.steps) / seconds;
  fmt::print("peak memory {}{}, median step {:.2f} ms, {:.1f} model-steps/s\n", format_bytes(t.peak_bytes),
             p ? fmt::format(" (budget {})", format_bytes(p->plan.budget_bytes)) : std::string(), median(t.ms),
             model_steps_per_s);
  json orders = json::array();
  for (const plan::OrderCandidate& k : a.choice.candidates)
    orders.push_back({{"order", plan::to_string(k.order)},
                      {"feasible", k.step.plan.feasible},
                      {"predicted_peak_bytes", k.step.plan.predicted.peak_bytes},
                      {"predicted_step_ms", k.step.plan.predicted.step_ms},
                      {"unplanned_peak_bytes", k.step.unplanned_peak},
                      {"dropped", k.step.plan.drop.size()},
                      {"from", p ? "profile" : "estimate"}});
  std::vector<uint64_t> seeds;
  for (int64_t i = 0; i < copies; ++i) seeds.push_back(c.device.seed + static_cast<uint64_t>(i));
  return {{"command", "many"},
          {"model", c.step.model},
          {"batch", c.step.batch},
          {"copies", copies},
          {"seeds", seeds},
          {"lrs", a.rates},
          {"optimizer", c.step.optimizer},
          {"device", dev.str()},
          {"steps", c.steps},
          {"order", plan::to_string(a.chosen().order)},
          {"orders", orders},
          {"fused", false},  // no batched kernels across copies yet
          {"nodes", g.nodes().size()},
          {"planner", p ? json(c.planning.planner) : json()},
          {"budget_bytes", p ? json(p->plan.budget_bytes) : json()},
          {"predicted_peak_bytes", p ? p->plan.predicted.peak_bytes : analysis::analyze_liveness(g).peak_bytes},
          {"unplanned_peak_bytes", p ? json(p->unplanned_peak) : json()},
          {"dropped", p ? p->plan.drop.size() : 0},
          {"recompute_nodes", p ? p->rewritten.clones : 0},
          {"losses", t.losses},
          {"step_ms_all", t.ms},
          {"step_ms", median(t.ms)},
          {"peak_bytes", t.peak_bytes},
          {"model_steps_per_s", model_steps_per_s}};
}

void ManyCommand::add_to(CLI::App& app) {
  planning.swap.add_to(app);
  step.add_to(app, /*with_batch=*/true, /*with_graph=*/false);
  app.add_option("--copies", copies,
                 "how many copies of the model to train, copy i from seed --seed + i; with --memory, the most to try")
      ->required()
      ->check(kPositive);
  app.add_option("--lrs", lrs,
                 "learning rates, comma-separated: one for every copy, or one per copy (default: --lr for all)")
      ->check(kLearningRates)
      ->excludes(app.get_option("--lr"));
  planning.add_to(app, "plan the copies' one step under this memory budget (2GiB, 60%, lowest: docs/budgets.md); "
                       "default: no plan");
  device.add_to(app, "copy i's seed for weights, data and dropout is this + i");
  app.add_option("--steps", steps, "training steps to run")->capture_default_str()->check(kPositive);
  app.add_option("--order", order,
                 "the copies' order: auto (the fastest predicted under --budget, ties to the lower peak), by-phase "
                 "(every forward, then every backward), sequential (one copy after another) or paired (one copy's "
                 "backward interleaved with the next one's forward); docs/many.md")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "by-phase", "sequential", "paired"}));
  app.add_option("--memory", memory,
                 "find the most copies, up to --copies, that train under this cap on what the process holds (e.g. "
                 "2GiB, or `free` on CUDA), each under --budget, the answer confirmed in a fresh process; then train "
                 "them; docs/many.md")
      ->check(kSizeOrFree);
  output.add_to(app);
}

int ManyCommand::run() const {
  if (memory.empty()) return train_copies();
  json result{{"command", "many"}, {"copies", 0}, {"copies_bound", copies}, {"memory_bytes", nullptr}};
  return ending_in_json(output.json, result, [&] { return most_copies(result); });
}

int ManyCommand::train_copies() const {
  const std::vector<double> rates = copy_rates(*this);
  c10::Device dev = device.open();
  const ArrangedCopies a = arrange_copies(*this, copies, rates, dev);
  if (!output.quiet || !a.fits_budget()) print_orders(a);
  if (!a.fits_budget()) {
    plan::PlanOptions in_bytes = planning.plan_options(false);  // the budget as the orders were planned under it
    in_bytes.budget = Budget::of_bytes(a.chosen().step.plan.budget_bytes);
    fmt::print(stderr, "mutwo: in no order of the copies (the lowest: {}): {}\n", plan::to_string(a.chosen().order),
               plan::infeasible_text(a.chosen().step, in_bytes));
    return kExitInfeasible;
  }
  const json j = train_arranged(*this, a, dev);
  if (output.json) std::cout << j.dump() << std::endl;
  return 0;
}

}  // namespace mutwo::cli
