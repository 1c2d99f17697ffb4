// mutwo train: trains a decoder (transformer-lm, gpt2-*) on a text file for
// whole epochs. The file's bytes are the tokens; its last --holdout fraction is
// held out. Each epoch walks the training part in batches of (batch x seq)
// windows, a new batch bound to the step's input_ids every step, with the step
// planned and rewritten under --budget when one is given; after the epoch the
// held-out windows are evaluated with a forward-only graph (dropout off) that
// shares the trained parameters.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <random>

#include "cli/arena_output.h"
#include "cli/commands.h"
#include "cli/pipeline.h"
#include "ops/op.h"
#include "runtime/executor.h"
#include "runtime/memory.h"
#include "support/error.h"
#include "support/files.h"
#include "support/units.h"

namespace mutwo::cli {

namespace {

using nlohmann::json;

// The text split into windows of `seq` bytes: the training part first, the
// held-out part (the file's last `holdout` fraction of bytes) after it.
struct Windows {
  std::string bytes;
  int64_t seq = 0;
  int64_t train_bytes = 0;      // bytes [0, train_bytes) are trained on
  std::vector<int64_t> train;   // offsets of whole windows in the training part
  std::vector<int64_t> heldout;  // offsets of whole windows in the held-out part
};

int64_t heldout_bytes(int64_t n, double holdout) { return static_cast<int64_t>(static_cast<double>(n) * holdout); }

// The smallest file that holds one training batch and one held-out window.
int64_t bytes_needed(int64_t batch, int64_t seq, double holdout) {
  int64_t n = batch * seq + seq;
  while (n - heldout_bytes(n, holdout) < batch * seq || heldout_bytes(n, holdout) < seq) ++n;
  return n;
}

Windows split_text(const std::string& path, int64_t batch, int64_t seq, double holdout) {
  Windows w;
  w.bytes = read_file(path);
  w.seq = seq;
  const auto n = static_cast<int64_t>(w.bytes.size());
  const int64_t held = heldout_bytes(n, holdout);
  w.train_bytes = n - held;
  MUTWO_CHECK(w.train_bytes >= batch * seq && held >= seq,
              "--data {}: {} bytes are too few for one training batch of {} x {} bytes and one held-out window "
              "(--holdout {}); a file of at least {} bytes is needed, or lower --batch or --seq",
              path, n, batch, seq, holdout, bytes_needed(batch, seq, holdout));
  for (int64_t o = 0; o + seq <= w.train_bytes; o += seq) w.train.push_back(o);
  for (int64_t o = w.train_bytes; o + seq <= n; o += seq) w.heldout.push_back(o);
  return w;
}

// input_ids (count, seq) from the windows at offsets[first, first + count).
at::Tensor token_batch(const Windows& w, const std::vector<int64_t>& offsets, size_t first, int64_t count) {
  at::Tensor ids = at::empty({count, w.seq}, at::TensorOptions().dtype(at::kLong));
  auto* out = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t o = offsets[first + static_cast<size_t>(i)];
    for (int64_t t = 0; t < w.seq; ++t) *out++ = static_cast<unsigned char>(w.bytes[static_cast<size_t>(o + t)]);
  }
  return ids;
}

ir::ValueId input_ids(const ir::Graph& g) {
  ir::ValueId ids = g.find("input_ids");
  MUTWO_ASSERT(ids != ir::kNoValue && g.value(ids).role == ir::Role::input, "the step has no input_ids input");
  return ids;
}

struct Epoch {
  int64_t epoch = 0;
  double train_loss = 0;
  double heldout_loss = 0;
  double tokens_per_s = 0;
  int64_t peak_bytes = 0;
  int64_t steps = 0;
  json to_json() const {
    return {{"epoch", epoch},           {"train_loss", train_loss}, {"heldout_loss", heldout_loss},
            {"tokens_per_s", tokens_per_s}, {"peak_bytes", peak_bytes}, {"steps", steps}};
  }
};

// The held-out graph: the forward graph at dropout 0, as model.eval() would
// run it, at batch `eval_batch`.
ir::Graph heldout_graph(const StepOptions& synthetic, int64_t eval_batch) {
  models::ModelOptions eo = synthetic.model_options();
  eo.batch = eval_batch;
  eo.dropout = 0.0;
  models::Model em = models::build_model(eo);
  ir::Graph eval_graph = std::move(em.graph);
  eval_graph.outputs = {em.loss};
  ops::verify(eval_graph);
  for (const ir::Node& n : eval_graph.nodes())
    MUTWO_ASSERT(n.phase == ir::Phase::forward || n.phase == ir::Phase::loss,
                 "the held-out graph would update something: {} in phase {}", n.op, ir::to_string(n.phase));
  return eval_graph;
}

using ParameterPairs = std::vector<std::pair<ir::ValueId, ir::ValueId>>;  // (evaluator's, trainer's)

// The trainer's parameter tensors by name, for the evaluator to share (the
// optimizer updates them in place), so it holds no second copy; `parameters`
// pairs the two graphs' ids.
std::map<std::string, at::Tensor> shared_parameters(const ir::Graph& eval_graph, const ir::Graph& train_graph,
                                                    runtime::Executor& ex, ParameterPairs& parameters) {
  std::map<std::string, at::Tensor> shared;
  for (const ir::Value& v : eval_graph.values())
    if (v.role == ir::Role::parameter) {
      parameters.emplace_back(v.id, train_graph.find(v.name));
      MUTWO_ASSERT(parameters.back().second != ir::kNoValue, "the training step lacks parameter %{}", v.name);
      shared.emplace(v.name, ex.value(parameters.back().second));
    }
  return shared;
}

// One epoch's walk: the training steps over `order`, then the held-out loss.
struct EpochLoop {
  const Windows& w;
  runtime::Executor& ex;
  ir::ValueId ids;
  runtime::Executor& evaluator;
  ir::ValueId eval_ids;
  const ParameterPairs& parameters;
  int64_t B, T, steps_per_epoch, eval_batch, eval_batches;
  bool quiet;
  int64_t log_every;

  Epoch run(int64_t e, const std::vector<int64_t>& order) {
    Epoch ep;
    ep.epoch = e;
    double loss_sum = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      ex.bind(ids, token_batch(w, order, static_cast<size_t>(s * B), B));
      runtime::StepResult r = ex.step();
      loss_sum += r.outputs.at(0);
      ep.peak_bytes = std::max(ep.peak_bytes, r.peak_bytes);
      if (!quiet && log_every > 0 && (s + 1) % log_every == 0)
        fmt::print(stderr, "epoch {} step {}/{}: loss {:.4f}\n", e, s + 1, steps_per_epoch, r.outputs[0]);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ep.steps = steps_per_epoch;
    ep.train_loss = loss_sum / static_cast<double>(steps_per_epoch);
    ep.tokens_per_s = static_cast<double>(steps_per_epoch * B * T) / seconds;
    double heldout_sum = 0;
    for (const auto& [mine, theirs] : parameters) evaluator.bind(mine, ex.value(theirs));  // shared, not copied
    for (int64_t b = 0; b < eval_batches; ++b) {
      evaluator.bind(eval_ids, token_batch(w, w.heldout, static_cast<size_t>(b * eval_batch), eval_batch));
      heldout_sum += evaluator.step().outputs.at(0);
    }
    evaluator.value(eval_ids).reset();
    ep.heldout_loss = heldout_sum / static_cast<double>(eval_batches);
    return ep;
  }
};

// What training did, for the summary line and the last JSON line.
struct TrainSummary {
  std::string device;
  int64_t B = 0, T = 0, steps_per_epoch = 0;
  int64_t dropped_bytes = 0;
  int64_t predicted = 0;  // the plan's simulated peak (kernel workspace included), else liveness's (without)
  bool arena = false;     // the step trained from its arena
};

void print_summary(const TrainCommand& cmd, const std::optional<PlannedOnDevice>& p, const TrainSummary& t,
                   const std::vector<Epoch>& epochs_done) {
  const Epoch& last = epochs_done.back();
  int64_t peak = 0;
  double tokens = 0, seconds = 0;
  json train_losses = json::array(), heldout_losses = json::array();
  for (const Epoch& ep : epochs_done) {
    peak = std::max(peak, ep.peak_bytes);
    tokens += static_cast<double>(ep.steps * t.B * t.T);
    seconds += static_cast<double>(ep.steps * t.B * t.T) / ep.tokens_per_s;
    train_losses.push_back(ep.train_loss);
    heldout_losses.push_back(ep.heldout_loss);
  }
  fmt::print("trained {} epochs, {} steps: peak memory {} (predicted {})\n", cmd.epochs, cmd.epochs * t.steps_per_epoch,
             format_bytes(peak), format_bytes(t.predicted));
  if (!cmd.output.json) return;
  json j{{"command", "train"},
         {"model", cmd.step.model},
         {"batch", t.B},
         {"seq", t.T},
         {"data", cmd.step.data},
         {"device", t.device},
         {"optimizer", cmd.step.optimizer},
         {"planner", p ? json(cmd.planning.planner) : json()},
         {"budget_bytes", p ? json(p->plan.budget_bytes) : json()},
         {"dropped", p ? p->plan.drop.size() : 0},
         {"dropped_bytes", t.dropped_bytes},
         {"predicted_peak_bytes", t.predicted},
         {"epoch", last.epoch},
         {"epochs", cmd.epochs},
         {"steps", cmd.epochs * t.steps_per_epoch},
         {"train_loss", last.train_loss},
         {"heldout_loss", last.heldout_loss},
         {"tokens_per_s", tokens / seconds},
         {"peak_bytes", peak},
         {"arena", t.arena},
         {"arena_from", cmd.arena.from()},
         {"train_losses", train_losses},
         {"heldout_losses", heldout_losses}};
  std::cout << j.dump() << std::endl;
}

}  // namespace

void TrainCommand::add_to(CLI::App& app) {
  planning.swap.add_to(app);
  step.model = "transformer-lm";  // the model that trains on text by default
  step.add_to(app, /*with_batch=*/true, /*with_graph=*/false);
  app.add_option("--epochs", epochs, "passes over the training part of --data")->capture_default_str()->check(kPositive);
  app.add_option("--holdout", holdout, "fraction of the file, at its end, held out for the held-out loss")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 0.9));
  app.add_flag("--sequential", sequential,
               "walk the training windows in file order (default: a shuffled order, drawn anew each epoch from --seed)");
  planning.add_to(app,
                  "plan the step under this memory budget (2GiB, 1500MiB, 60% of the activation memory: "
                  "docs/budgets.md, or lowest) and train the rewritten step; default: no plan",
                  "with --budget: none, per-layer, sqrt-n, mutwo or optimal");
  device.add_to(app, "seed for weights, dropout and the window order");
  app.add_option("--log-every", log_every, "a progress line on stderr every N steps (0: per epoch only)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  arena.add_to(app, "the planned step (with --budget)", "the held-out loss's forward stays with the allocator");
  output.add_to(app, "one JSON line per epoch, then one summary line");
}

int TrainCommand::run() const {
  MUTWO_CHECK(!step.data.empty(), "train needs --data FILE, a text file whose bytes are the tokens");
  MUTWO_CHECK(step.model == "transformer-lm" || step.model.rfind("gpt2-", 0) == 0,
              "train: --model {} does not read text; train walks --data with transformer-lm, gpt2-small or gpt2-medium",
              step.model);
  c10::Device dev = device.open();
  const uint64_t seed = device.seed;
  // input_ids as a graph input (not --data's one fixed batch), so that each
  // step can be given its own batch.
  StepOptions synthetic = step;
  synthetic.data.clear();
  const ir::Graph g = synthetic.build();
  const ir::Shape ids_shape = g.type(input_ids(g)).shape;  // (B, T)
  const int64_t B = ids_shape[0], T = ids_shape[1];
  const Windows w = split_text(step.data, B, T, holdout);

  // The step that trains: planned and rewritten under --budget, or as built.
  std::optional<PlannedOnDevice> p;
  if (!planning.budget.empty()) {
    const plan::PlanOptions options = planning.plan_options(!output.quiet);
    p = plan_step(g, ProfilingOptions::of(dev, device, !output.quiet, step.model, B), options,
                  step.dump_ir_after.rewrite_passes());
    if (!p->plan.feasible) {
      fmt::print(stderr, "mutwo: {}\n", plan::infeasible_text(*p, options));
      return kExitInfeasible;
    }
  }
  const ir::Graph& train_graph = p ? p->rewritten.graph : g;
  const int64_t dropped = p ? plan::dropped_bytes(p->input.graph, p->plan) : 0;

  // The held-out loss: the forward graph at dropout 0, in batches of at most B held-out windows.
  const int64_t eval_batch = std::min<int64_t>(B, static_cast<int64_t>(w.heldout.size()));
  ir::Graph eval_graph = heldout_graph(synthetic, eval_batch);

  runtime::ExecutorOptions train_options{dev, seed};
  train_options.arena = arena.resolve(dev, /*bounded=*/p.has_value());  // under --budget
  if (train_options.arena)  // its workspaces measured first; an arena over --device-memory exits 3
    if (int rc = prepare_arena(train_graph, train_options); rc != 0) return rc;
  runtime::Executor ex(train_graph, train_options);
  if (int rc = refuse_arena_over_cap(ex, dev); rc != 0) return rc;
  ex.initialize();
  const ir::ValueId ids = input_ids(train_graph);
  ParameterPairs parameters;
  const std::map<std::string, at::Tensor> shared = shared_parameters(eval_graph, train_graph, ex, parameters);
  runtime::Executor evaluator(eval_graph, {dev, seed});
  evaluator.initialize(shared);
  const ir::ValueId eval_ids = input_ids(eval_graph);
  evaluator.value(eval_ids).reset();  // bound per held-out batch; nothing of the evaluator's is held while training

  const int64_t steps_per_epoch = static_cast<int64_t>(w.train.size()) / B;
  const int64_t eval_batches = static_cast<int64_t>(w.heldout.size()) / eval_batch;
  fmt::print("mutwo train: {} batch {} seq {} on {}, {} nodes, {}\n", step.model, B, T, dev.str(),
             train_graph.nodes().size(), step.data);
  fmt::print("data: {} bytes trained on ({} windows, {} steps per epoch, {}), {} held out ({} batches of {} windows)\n",
             w.train_bytes, w.train.size(), steps_per_epoch, sequential ? "in file order" : "shuffled each epoch",
             w.bytes.size() - static_cast<size_t>(w.train_bytes), eval_batches, eval_batch);
  if (p)
    fmt::print("plan: {} under {}: {} activations dropped ({}), predicted peak {} (unplanned {})\n", planning.planner,
               format_bytes(p->plan.budget_bytes), p->plan.drop.size(), format_bytes(dropped),
               format_bytes(p->plan.predicted.peak_bytes), format_bytes(p->unplanned_peak));
  else
    fmt::print("plan: none (no --budget); predicted peak {}\n", format_bytes(ex.liveness().peak_bytes));
  std::fflush(stdout);

  EpochLoop loop{w, ex, ids, evaluator, eval_ids, parameters, B, T, steps_per_epoch, eval_batch, eval_batches, output.quiet, log_every};
  std::mt19937_64 order_rng(seed);
  std::vector<int64_t> order = w.train;
  std::vector<Epoch> epochs_done;
  for (int64_t e = 1; e <= epochs; ++e) {
    if (!sequential) std::shuffle(order.begin(), order.end(), order_rng);
    const Epoch ep = loop.run(e, order);
    fmt::print("epoch {:>3}  train loss {:.4f}  held-out loss {:.4f}  {:.0f} tokens/s  peak {}  ({} steps)\n", e,
               ep.train_loss, ep.heldout_loss, ep.tokens_per_s, format_bytes(ep.peak_bytes), ep.steps);
    if (output.json) std::cout << ep.to_json().dump() << std::endl;
    std::fflush(stdout);
    epochs_done.push_back(ep);
  }
  TrainSummary t;
  t.device = dev.str();
  t.B = B;
  t.T = T;
  t.steps_per_epoch = steps_per_epoch;
  t.dropped_bytes = dropped;
  t.predicted = p ? p->plan.predicted.peak_bytes : ex.liveness().peak_bytes;
  t.arena = train_options.arena;
  print_summary(*this, p, t, epochs_done);
  return 0;
}

}  // namespace mutwo::cli
