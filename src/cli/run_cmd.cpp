// mutwo run: trains a step (a zoo model, or a --graph file: a captured or a
// rewritten step) for a few steps; prints losses, peak memory, step time, and
// optionally saves the trained state.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>

#include "cli/arena_output.h"
#include "cli/commands.h"
#include "cli/ranks.h"
#include "runtime/executor.h"
#include "runtime/memory.h"
#include "runtime/tensor_file.h"
#include "support/error.h"
#include "support/units.h"

namespace mutwo::cli {

namespace {

using nlohmann::json;

// What the steps measured: each step's loss and time, the most any step held.
struct RunMeasured {
  std::vector<double> losses, times;
  int64_t peak = 0, reserved = 0;
  runtime::ArenaUse arena_use;
};

// `steps` steps of `ex`, a line each; on several ranks each loss is the whole batch's.
RunMeasured run_steps(runtime::Executor& ex, int64_t steps) {
  RunMeasured m;
  for (int64_t s = 0; s < steps; ++s) {
    runtime::StepResult r = ex.step();
    r.outputs = rank_mean(r.outputs);  // on several ranks: the loss of the whole batch, every rank's rows
    m.losses.push_back(r.outputs.at(0));
    m.times.push_back(r.ms);
    m.peak = std::max(m.peak, r.peak_bytes);
    m.reserved = std::max(m.reserved, r.reserved_peak_bytes);
    m.arena_use = runtime::most(m.arena_use, r.arena);
    fmt::print("step {:>4}  loss {:.6f}  {:.2f} ms  peak {}\n", s + 1, r.outputs[0], r.ms, format_bytes(r.peak_bytes));
    std::fflush(stdout);
  }
  return m;
}

// --save: the parameters, buffers and optimizer state of `g` as `ex` holds them, on rank 0.
void save_state(const ir::Graph& g, runtime::Executor& ex, const std::string& path) {
  if (rank() != 0) return;  // the ranks hold the same parameters and state
  std::vector<std::pair<std::string, at::Tensor>> state;
  for (const ir::Value& v : g.values())
    if (v.role == ir::Role::parameter || v.role == ir::Role::buffer || v.role == ir::Role::optimizer_state)
      state.emplace_back(v.name, ex.value(v.id));
  runtime::write_tensor_file(path, state);
  fmt::print("saved {} tensors to {}\n", state.size(), path);
}

json run_json(const RunCommand& cmd, const ir::Graph& g, const runtime::Executor& ex, const c10::Device& dev,
              bool arena, const RunMeasured& m) {
  const auto& L = ex.liveness();
  json j{{"command", "run"},         {"model", cmd.step.name(g)},
         {"batch", cmd.step.graph.empty() ? json(cmd.step.batch) : json()}, {"graph", cmd.step.graph},
         {"device", dev.str()},      {"optimizer", cmd.step.optimizer}, {"steps", cmd.steps},
         {"cuda_graph", cmd.cuda_graph}, {"deterministic", cmd.deterministic}, {"arena", arena},
         {"arena_from", cmd.arena.from()}, {"losses", m.losses}, {"step_ms_all", m.times},
         {"step_ms", median(m.times)}, {"peak_bytes", m.peak}, {"reserved_peak_bytes", m.reserved},
         {"device_peak_bytes", m.reserved + runtime::outside_allocator_bytes(dev)},
         {"predicted_peak_bytes", L.peak_bytes},
         {"persistent_bytes", L.persistent_bytes}, {"nodes", g.nodes().size()}};
  add_rank_json(j);
  if (ex.arena_plan()) add_arena_json(j, *ex.arena_plan(), m.arena_use);
  if (world_size() > 1) j["shard_optimizer"] = cmd.step.shard_optimizer;
  return j;
}

}  // namespace

void RunCommand::add_to(CLI::App& app) {
  step.add_to(app);
  app.add_option("--steps", steps, "training steps to run")->capture_default_str()->check(kPositive);
  app.add_flag("--cuda-graph", cuda_graph,
               "CUDA: steps 1-2 node by node, then the step captured once as a CUDA graph and replayed");
  app.add_flag("--deterministic", deterministic,
               "deterministic kernels (warn-only), so that two runs from one seed give the same losses");
  arena.add_to(app, "the step's allocations",
               "for run: under --device-memory or with --graph (a planned step), in one process, not with "
               "--cuda-graph");
  device.add_to(app);
  app.add_option("--save", save,
                 "after the last step, write the parameters, buffers and optimizer state to this file "
                 "(safetensors layout, keyed by value name)");
  output.add_to(app, "end with one JSON line", /*with_quiet=*/false);
}

int RunCommand::run() const {
  c10::Device dev = device.open();
  std::optional<runtime::DeterministicAlgorithms> det;
  if (deterministic) det.emplace();
  std::optional<runtime::SideStream> side;
  if (cuda_graph) side.emplace(dev);  // warm-up, capture and replays on one stream
  ir::Graph g = step.build();
  runtime::ExecutorOptions o{dev, device.seed};
  o.cuda_graph = cuda_graph;
  MUTWO_CHECK(!arena.on || !cuda_graph, "{}", runtime::kArenaWithCudaGraph);
  // A cap, or a step planned under a budget (--graph); a captured CUDA graph or several ranks keep the allocator.
  o.arena = arena.resolve(dev, (!device.memory.empty() || !step.graph.empty()) && !cuda_graph && world_size() == 1);
  if (o.arena)  // kernel temporaries get blocks of their own, measured first
    if (int rc = prepare_arena(g, o); rc != 0) return rc;
  runtime::Executor ex(g, o);
  if (int rc = refuse_arena_over_cap(ex, dev); rc != 0) return rc;
  ex.initialize();
  fmt::print("mutwo run: {} on {}, {} nodes, {} steps\n", step.what(), dev.str(), g.nodes().size(), steps);
  MUTWO_CHECK(save.empty() || !step.shard_optimizer,
              "--save with --shard-optimizer: each rank holds only its slice of the optimizer state; leave out one of them");
  const RunMeasured m = run_steps(ex, steps);
  if (!save.empty()) save_state(g, ex, save);
  fmt::print("peak memory {} (liveness predicts {} before kernel workspace), median step {:.2f} ms\n",
             format_bytes(m.peak), format_bytes(ex.liveness().peak_bytes), median(m.times));
  if (std::string note = fragmentation_note(m.peak, m.reserved); !note.empty()) fmt::print("{}\n", note);
  if (ex.arena_plan()) fmt::print("{}\n", arena_line(*ex.arena_plan(), m.arena_use));
  if (output.json) std::cout << run_json(*this, g, ex, dev, o.arena, m).dump() << std::endl;
  return 0;
}

}  // namespace mutwo::cli
