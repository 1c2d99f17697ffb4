// The subcommands, one struct each: its flags (add_to) and its work (run).
// Each is defined in a file of its own, NAME_cmd.cpp; main.cpp parses argv and runs one.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json_fwd.hpp>

#include <string>

#include "cli/common.h"
#include "support/units.h"

namespace mutwo {
class Progress;
}

namespace mutwo::cli {

// Exit codes: 0 done, 1 internal error or a failed bitwise check, 2 the
// user's mistake (one line on stderr), 3 no plan fits the budget (plan and
// optimize, after writing the best plan found).
inline constexpr int kExitInfeasible = 3;
// How stderr's line starts when a command ran out of memory (exit 1);
// max-batch reads it from the child that trains an answer in a fresh process.
inline constexpr const char* kOutOfMemoryLine = "mutwo: out of memory: ";

// mutwo run: a step (a zoo model or a --graph file) trained for a few steps;
// losses, peak memory, step time (run_cmd.cpp).
struct RunCommand {
  StepOptions step;
  int64_t steps = 10;
  DeviceOptions device;
  OutputOptions output;  // --json only
  bool cuda_graph = false;
  bool deterministic = false;
  ArenaOptions arena;  // default: on CUDA under --device-memory or for a --graph (a planned step), in one process
  std::string save;

  void add_to(CLI::App& app);
  int run() const;
};

// mutwo show: the training-step graph in the IR's text form (show_cmd.cpp).
struct ShowCommand {
  StepOptions step;
  bool forward_only = false;  // --forward: the forward graph, before autodiff

  void add_to(CLI::App& app);
  int run() const;
};

// mutwo info: sizes of a model's training step, counted from types: no tensor is made (info_cmd.cpp).
struct InfoCommand {
  StepOptions step;
  OutputOptions output;  // --json only

  void add_to(CLI::App& app);
  int run() const;
};

// mutwo profile: phase 1, the graph profiler.
struct ProfileCommand {
  StepOptions step;
  std::string batches;  // "8,16,32" instead of --batch
  DeviceOptions device;
  int iters = 3;
  int warmup = 1;
  std::string out;
  std::string memory_snapshot;  // --memory-snapshot FILE; empty: OUT/memory_snapshot.pickle
  OutputOptions output;

  void add_to(CLI::App& app);
  int run() const;
};

// mutwo plan: phase 2, choose activations to recompute under a budget.
struct PlanCommand {
  std::string profile_path;
  BudgetOptions planning;
  std::string out = "plan.json";
  std::string sweep;  // "100,90,...,10": percentages of the unplanned peak
  OutputOptions output;  // --json, --quiet (the optimal planner's progress)

  void add_to(CLI::App& app);
  int run() const;
};

// mutwo report: a profile's tables and plots (and a plan's report.md) written
// again from saved files; runs nothing.
struct ReportCommand {
  std::string profile_path;
  std::string plan_path;  // optional
  std::string out;

  void add_to(CLI::App& app);
  int run() const;
};

// mutwo optimize: phase 3, profile -> plan -> rewrite -> train, measured.
struct OptimizeCommand {
  StepOptions step;
  BudgetOptions planning;
  std::string plan_path;  // --plan: a saved plan.json applied instead of planning
  DeviceOptions device;
  int steps = 5;
  std::string out;
  std::string memory_snapshot;  // --memory-snapshot FILE; empty: OUT/memory_before_after.pickle
  bool check = false;
  bool cuda_graph = false;
  ArenaOptions arena;  // --arena, --no-arena: the planned step measured from its arena (default on CUDA)
  OutputOptions output;

  void add_to(CLI::App& app);
  int run() const;
};

// mutwo sweep: peak and step time against batch size, with and without checkpointing.
struct SweepCommand {
  StepOptions step;
  std::string batches = "8,16,32";
  BudgetOptions planning = BudgetOptions::with_budget("60%");
  DeviceOptions device;
  int steps = 3;
  std::string out;
  ArenaOptions arena;  // the planned points measured from their arenas (default on CUDA)
  OutputOptions output;

  void add_to(CLI::App& app);
  int run() const;

 private:
  int sweep() const;  // run's work; run adds --json's "error" line where it throws
};

// mutwo max-batch: the largest batch whose measured peak fits a memory limit.
struct MaxBatchCommand {
  StepOptions step;
  std::string memory;
  std::string planners = "none,per-layer,mutwo";
  DeviceOptions device;
  std::string out;            // --out: each answer's rewritten step
  int64_t limit = 4096;
  std::string search = "model";  // --search: "model" (predict, then confirm) or "full" (every batch profiled)
  bool no_fresh_check = false;   // --no-fresh-check: answers not trained again in a fresh process
  ArenaOptions arena;            // each batch measured, and each answer trained fresh, from its arena (default on CUDA)
  SwapOptions swap;
  OutputOptions output;

  void add_to(CLI::App& app);
  int run() const;

 private:
  int find(nlohmann::json& result) const;  // run's work; run adds --json's "error" line where it throws
  // On CUDA: the search in children, the fresh-process check here (max_batch_children.cpp).
  struct Children {
    c10::Device device;    // parsed, never opened here
    std::string dir;       // the search children's --out
    int64_t cap = 0;       // --memory in bytes, as the first child resolved it
    int64_t device_memory = 0;  // --device-memory in bytes (0: none)
    bool arena = false;    // the children's arena, as resolved on the device
  };
  int find_in_children(nlohmann::json& result) const;
  void confirm_in_children(nlohmann::json& row, const Children& c, Progress& progress) const;
  int report_children(nlohmann::json& result, const Children& c, Progress& progress) const;
};

// mutwo train: epochs over a text file in batches, the step optionally planned
// under a budget; per epoch the training and held-out loss, tokens/s, peak.
struct TrainCommand {
  StepOptions step;
  BudgetOptions planning;  // no --budget: no plan
  DeviceOptions device;
  int64_t epochs = 1;
  double holdout = 0.1;
  bool sequential = false;
  int64_t log_every = 0;
  ArenaOptions arena;  // with --budget: the planned step trained from its arena (default on CUDA)
  OutputOptions output;

  void add_to(CLI::App& app);
  int run() const;
};

// mutwo many: N copies of one zoo model trained as one graph under one budget (many_cmd.cpp).
struct ManyCommand {
  StepOptions step;        // the model; --lr is every copy's unless --lrs
  int64_t copies = 0;      // --copies N, required; with --memory, the most tried
  std::string lrs;         // --lrs a,b,...: one for all copies or one per copy
  BudgetOptions planning;  // no --budget: no plan
  DeviceOptions device;    // --seed S: copy i from S + i
  int64_t steps = 10;
  std::string order = "auto";  // --order: auto (the scheduler's choice), by-phase, sequential or paired
  std::string memory;          // --memory CAP: the most copies, up to --copies, that train under CAP (many_memory.cpp)
  OutputOptions output;

  void add_to(CLI::App& app);
  int run() const;

 private:
  int train_copies() const;                    // --copies N copies trained
  int most_copies(nlohmann::json& result) const;  // --memory's search, then its answer trained
};

}  // namespace mutwo::cli
