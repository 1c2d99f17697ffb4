// What the mutwo subcommands share: validators, the options that build a
// training step, device parsing.
#pragma once

#include <CLI/CLI.hpp>
#include <c10/core/Device.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "autodiff/autodiff.h"
#include "models/model.h"
#include "plan/pipeline.h"
#include "plan/plan.h"
#include "runtime/arena.h"
#include "stepfile/step_file.h"

namespace mutwo::cli {

// Validators with messages a user can act on (CLI11's numeric ranges print 1.8e308).
extern const CLI::Validator kPositive;
extern const CLI::Validator kNonNegative;
// Checked when parsed, so that a bad value is refused before any work:
extern const CLI::Validator kSize;         // parse_bytes: 2GiB, 1500MiB
extern const CLI::Validator kSizeOrFree;   // a size or `free` (--device-memory, --memory)
extern const CLI::Validator kBudget;       // parse_budget: 2GiB, 60%, lowest
extern const CLI::Validator kPlanner;      // check_planner
// UserError unless `name` is one of plan::planner_names().
void check_planner(const std::string& name);

// --dump-ir-after PASS[,PASS...] or all (passes: autodiff, reinplace,
// data-parallel, recompute, update-early, swap), offered with the step
// options: each named pass's graph goes to stderr as IR text under a line
// "# IR after PASS (graph)", or as that line alone, saying "unchanged", where
// the pass left the graph as it found it. Called as an ir::AfterPass by
// StepOptions::build (autodiff, reinplace, data-parallel) and by the plan's
// rewrite (rewrite_passes()). Copies share one state: the passes asked for,
// and the graph last reported, whichever copy reported it.
class IrDump {
 public:
  void add_to(CLI::App& app);
  void operator()(std::string_view pass, const ir::Graph& g) const;
  // The plan's rewrite passes verified and shown here (plan::plan_and_rewrite's passes).
  rewrite::PassOptions rewrite_passes() const { return {/*verify=*/true, *this}; }

 private:
  struct State {
    std::string passes;  // as given: "all", or a comma-separated list
    std::string last;    // the text of the graph last reported, to say when a pass changed nothing
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

// Options shared by every command that builds a training step.
struct StepOptions {
  std::string model = "mlp";
  int64_t batch = 64;  // after parsing, models::default_batch(model) when --batch is not given
  std::string optimizer = "sgd";
  double lr = 0.01;
  std::optional<double> dropout;
  std::optional<int64_t> classes;
  std::optional<int64_t> image_size;
  std::optional<int64_t> seq;
  std::string data;
  std::optional<int64_t> pad;       // BERT: padded positions at the end of each sequence
  std::optional<std::string> head;  // BERT: "mlm" or "none"
  std::string graph;  // a captured step (step.json) or IR text (rewritten.ir) instead of --model
  bool no_fuse_loss = false;  // --no-fuse-loss: a step.json's vocabulary head left as captured
  // Several ranks (torchrun; cli/ranks.h): the step is one rank's (dist::data_parallel).
  bool shard_optimizer = false;      // --shard-optimizer: ZeRO stages 1 and 2
  std::string bucket_size = "25MiB";  // --bucket-size: gradients per all-reduce or reduce-scatter
  IrDump dump_ir_after;  // --dump-ir-after

  // with_graph: offer --graph (not where the command varies the batch).
  void add_to(CLI::App& app, bool with_batch = true, bool with_graph = true);
  models::ModelOptions model_options() const;
  // forward + autodiff + optimizer, verified; or the --graph file. On several
  // ranks, one rank's step (dist::data_parallel; a --graph that already has
  // collectives is taken as it is).
  ir::Graph build() const;
  std::string name(const ir::Graph& built) const;  // --model, or the captured model's name (built's)
  int64_t batch_or_none() const { return graph.empty() ? batch : 0; }  // 0: set by the captured step
  std::string what() const;  // "mlp batch 64" or "step.json"
};

// "cpu", "cuda", "cuda:N"; UserError when CUDA is asked for and missing.
c10::Device parse_device(const std::string& s);

// The device to run on, capped at `memory` ("8GiB"; empty: no cap) as if it
// were a card that size (runtime::set_memory_limit), memory counted on the CPU.
c10::Device open_device(const std::string& device, const std::string& memory);

// The bytes a --device-memory (or max-batch --memory) text stands for: a size
// ("8GiB"), or "free": what this process holds on the CUDA card plus what the
// card has free now (other processes' bytes left out).
int64_t device_memory_bytes(const c10::Device& dev, const std::string& memory);

// The options each concern shares across the commands (run, profile,
// optimize, sweep, max-batch, train): one struct per concern, one place that
// names its flags and their help.

// Where the step runs and from which seed: --device, --device-memory, --seed.
struct DeviceOptions {
  std::string name = "cpu";  // "cpu", "cuda", "cuda:N"
  std::string memory;        // --device-memory: a size, "free", or empty (the card as it is)
  uint64_t seed = 0;
  void add_to(CLI::App& app, const char* seed_help = "seed for weights, data and dropout");
  c10::Device open() const { return open_device(name, memory); }
  // The cap open() set from --device-memory (a size, or what was free then), in bytes; 0 without it.
  int64_t memory_cap(const c10::Device& opened) const;
};

// --no-swap and --host-memory, for every command that plans (plan, optimize,
// sweep, train, max-batch).
struct SwapOptions {
  bool no_swap = false;
  std::string host_memory;  // empty: the planning request's default (plan::PlanOptions)
  void add_to(CLI::App& app);
  void apply_to(plan::PlanOptions& o) const;
};

// The planning request as flags: --budget, --planner (plan, optimize, sweep,
// train) and the swap flags.
struct BudgetOptions {
  std::string budget;  // empty: none given (each command says what that means)
  std::string planner = plan::PlanOptions{}.planner;
  SwapOptions swap;  // added by each command, first (swap.add_to)
  static BudgetOptions with_budget(std::string b) {  // a command whose --budget has a default
    BudgetOptions o;
    o.budget = std::move(b);
    return o;
  }
  // --budget with `budget_help`, --planner with `planner_help`; returns --budget.
  CLI::Option* add_to(CLI::App& app, const char* budget_help,
                      const char* planner_help = "none, per-layer, sqrt-n, mutwo or optimal");
  // The request: the parsed --budget (none when not given), --planner and the
  // swap flags; `progress`: the optimal planner says on stderr how far it is
  // (not under --quiet).
  plan::PlanOptions plan_options(bool progress) const;
};

// --arena and --no-arena (run, optimize, sweep, train, max-batch). Neither:
// runtime::arena_by_default, on CUDA wherever a budget or a memory cap applies.
struct ArenaOptions {
  bool on = false;   // --arena
  bool off = false;  // --no-arena
  // Both flags, --arena's help `what` (what the command serves from it) and `detail`; --no-arena excludes --arena.
  void add_to(CLI::App& app, const char* what, const char* detail = "");
  // Whether the step is served from an arena on `dev`; `bounded`: a budget or a cap applies to the command.
  bool resolve(const c10::Device& dev, bool bounded) const { return on || (!off && runtime::arena_by_default(dev, bounded)); }
  // For --json's `arena_from`: "--arena", "--no-arena", or "default" (the device's).
  const char* from() const { return on ? "--arena" : off ? "--no-arena" : "default"; }
};

// What a command prints: --json (its last stdout line one JSON object) and --quiet.
struct OutputOptions {
  bool json = false;
  bool quiet = false;  // no progress lines on stderr
  void add_to(CLI::App& app, const char* json_help = "end with one JSON line", bool with_quiet = true);
};

double median(std::vector<double> v);

// A line when the allocator reserved more than 10% above what was allocated at
// the peak (fragmentation in CUDA's caching allocator); empty otherwise.
std::string fragmentation_note(int64_t allocated_peak, int64_t reserved_peak);

}  // namespace mutwo::cli
