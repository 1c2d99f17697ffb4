// mutwo many: trains N copies of one zoo model as one training graph
// (models::compose_copies), copy i from seed S+i at learning rate lrs[i],
// planned by the one planner under one --budget and run by the one executor.
// Copy i's losses are `mutwo run --seed S+i --lr lrs[i]`'s, bit for bit on the
// CPU. The copies run in the order μ-TWO's scheduler chooses (plan/orders.h:
// phase by phase, one copy after another, or one copy's backward interleaved
// with the next one's forward), each order planned under the one budget and
// judged by the simulator; --order asks for one. Unfused (no batched matmuls
// across copies yet).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "analysis/liveness.h"
#include "cli/commands.h"
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

// --order's value (auto: the scheduler's choice). A ManyCommand member
// belongs in commands.h; kept here while that file is others' to edit.
std::string order_flag = "auto";

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

void ManyCommand::add_to(CLI::App& app) {
  planning.swap.add_to(app);
  step.add_to(app, /*with_batch=*/true, /*with_graph=*/false);
  app.add_option("--copies", copies, "how many copies of the model to train, copy i from seed --seed + i")
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
  app.add_option("--order", order_flag,
                 "the copies' order: auto (the fastest predicted under --budget, ties to the lower peak), by-phase "
                 "(every forward, then every backward), sequential (one copy after another) or paired (one copy's "
                 "backward interleaved with the next one's forward); docs/many.md")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "by-phase", "sequential", "paired"}));
  output.add_to(app);
}

int ManyCommand::run() const {
  std::vector<double> rates = lrs.empty() ? std::vector<double>{step.lr} : parse_numbers(lrs);
  MUTWO_CHECK(rates.size() == 1 || rates.size() == static_cast<size_t>(copies),
              "--lrs has {} learning rates for {} copies: give one for all copies or {}, one per copy "
              "(comma-separated)", rates.size(), copies, copies);
  rates.resize(static_cast<size_t>(copies), rates.front());
  c10::Device dev = device.open();
  std::vector<ir::Graph> steps_of;
  for (double lr : rates) {
    StepOptions s = step;
    s.lr = lr;
    steps_of.push_back(s.build());
  }
  const models::Copies c = models::compose_copies(steps_of);
  const plan::PlanOptions options = planning.plan_options(!output.quiet);
  // The orders, each planned under the budget from one profile of the
  // composed step (phase by phase); with no budget, each as it is, from an
  // estimated profile (nothing runs: paired's interleaving weighs the nodes
  // by their estimated times).
  std::optional<PlannedOnDevice> profiled;
  plan::PlannedStep estimated;
  if (!planning.budget.empty())
    profiled = profile_for_plan(c.graph, ProfilingOptions::of(dev, device, !output.quiet, step.model, step.batch),
                                options);
  else
    estimated = plan::prepare(profile::estimate_profile(c.graph, dev.str()), options);
  plan::OrderChoice choice = plan::choose_order(profiled ? *profiled : estimated, options, orders_asked(order_flag));
  plan::OrderCandidate& chosen = choice.best();
  const bool planned = profiled.has_value();
  if (!output.quiet || !chosen.step.plan.feasible)
    for (size_t i = 0; i < choice.candidates.size(); ++i) {
      const plan::OrderCandidate& k = choice.candidates[i];
      fmt::print("order {:<10} {} peak {}, step {:.2f} ms{}{}\n", plan::to_string(k.order),
                 planned ? "predicted" : "estimated", format_bytes(k.step.plan.predicted.peak_bytes),
                 k.step.plan.predicted.step_ms,
                 planned ? fmt::format(", {} dropped", k.step.plan.drop.size()) : std::string(),
                 i == choice.chosen ? (k.step.plan.feasible ? "  (chosen)" : "  (the lowest; over the budget)")
                                    : (k.step.plan.feasible ? "" : "  (over the budget)"));
    }
  if (!chosen.step.plan.feasible) {
    plan::PlanOptions in_bytes = options;  // the budget as the orders were planned under it
    in_bytes.budget = Budget::of_bytes(chosen.step.plan.budget_bytes);
    fmt::print(stderr, "mutwo: in no order of the copies (the lowest: {}): {}\n", plan::to_string(chosen.order),
               plan::infeasible_text(chosen.step, in_bytes));
    return kExitInfeasible;
  }
  if (planned) chosen.step.rewritten = plan::rewrite_plan(chosen.step.input, chosen.step.plan,
                                                          step.dump_ir_after.rewrite_passes());
  const ir::Graph g = planned ? chosen.step.rewritten.graph : plan::reorder(c.graph, chosen.schedule);
  const plan::PlannedStep* p = planned ? &chosen.step : nullptr;
  fmt::print("mutwo many: {} copies of {} on {}, one graph of {} nodes in order {}, {} steps\n", copies, step.what(),
             dev.str(), g.nodes().size(), plan::to_string(chosen.order), steps);
  if (p)
    fmt::print("plan: {} under {}: {} activations dropped, {} recompute nodes, predicted peak {} (unplanned {})\n",
               planning.planner, format_bytes(p->plan.budget_bytes), p->plan.drop.size(), p->rewritten.clones,
               format_bytes(p->plan.predicted.peak_bytes), format_bytes(p->unplanned_peak));
  const Trained t = train(g, c, initial_values(c, steps_of, device.seed), dev, device.seed, steps);
  double seconds = 0;
  for (double ms : t.ms) seconds += ms / 1000;
  const double model_steps_per_s = static_cast<double>(copies * steps) / seconds;
  fmt::print("peak memory {}{}, median step {:.2f} ms, {:.1f} model-steps/s\n", format_bytes(t.peak_bytes),
             p ? fmt::format(" (budget {})", format_bytes(p->plan.budget_bytes)) : std::string(), median(t.ms),
             model_steps_per_s);
  if (!output.json) return 0;
  json orders = json::array();
  for (const plan::OrderCandidate& k : choice.candidates)
    orders.push_back({{"order", plan::to_string(k.order)},
                      {"feasible", k.step.plan.feasible},
                      {"predicted_peak_bytes", k.step.plan.predicted.peak_bytes},
                      {"predicted_step_ms", k.step.plan.predicted.step_ms},
                      {"unplanned_peak_bytes", k.step.unplanned_peak},
                      {"dropped", k.step.plan.drop.size()},
                      {"from", planned ? "profile" : "estimate"}});
  std::vector<uint64_t> seeds;
  for (int64_t i = 0; i < copies; ++i) seeds.push_back(device.seed + static_cast<uint64_t>(i));
  json j{{"command", "many"},
         {"model", step.model},
         {"batch", step.batch},
         {"copies", copies},
         {"seeds", seeds},
         {"lrs", rates},
         {"optimizer", step.optimizer},
         {"device", dev.str()},
         {"steps", steps},
         {"order", plan::to_string(chosen.order)},
         {"orders", orders},
         {"fused", false},         // no batched kernels across copies yet
         {"nodes", g.nodes().size()},
         {"planner", p ? json(planning.planner) : json()},
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
  std::cout << j.dump() << std::endl;
  return 0;
}

}  // namespace mutwo::cli
