// Planning (phase 2 of mu-TWO): which activations to drop after the forward
// pass and recompute in the backward pass so the step fits a memory budget.
//
// Every planner has the same signature, takes plain data (a graph and its
// Profile; never tensors) and is scored by the same simulator, which runs the
// recomputation rewrite itself and the executor's liveness analysis on its
// output: the prediction walks exactly the schedule that will be executed.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "profile/profile.h"
#include "rewrite/passes.h"
#include "rewrite/recompute.h"

namespace mutwo::plan {

// What planners read: the profiled graph and per-node measurements aligned to it.
struct PlanInput {
  ir::Graph graph;                // parsed from the profile
  profile::Profile profile;
  std::vector<double> node_ms;        // per node of `graph`
  std::vector<int64_t> workspace;     // per node: measured bytes beyond its outputs
  int64_t start_extra_bytes = 0;      // the most the device held beyond the graph's own tensors at any
                                      // node (CUDA libraries' workspaces); counted in every prediction
  // Swapping (issue 16). Copy speeds from the profile (0: unknown, no swap);
  // on CUDA copies run on their own streams beside compute, on the CPU in line.
  double h2d_bytes_per_ms = 0, d2h_bytes_per_ms = 0;
  bool copies_overlap = false;
  bool swap = true;              // planners may swap (--no-swap: recomputation only)
  int64_t host_limit_bytes = 0;  // host memory the swapped copies may hold at once (--host-memory; by default
                                 // half the machine's on CUDA, none on the CPU)
  bool can_swap() const { return swap && h2d_bytes_per_ms > 0 && d2h_bytes_per_ms > 0 && host_limit_bytes > 0; }
  // Random nodes' outputs are candidates, recomputed by replaying the
  // generator's state (rewrite/recompute.h); false under --cuda-graph, whose
  // capture cannot replay it: they are then kept.
  bool replay_random = true;
};
PlanInput make_input(const profile::Profile& p);  // UserError if the profile's graph does not parse
// Half the machine's physical memory: --host-memory's default on CUDA.
int64_t default_host_limit();

// A set of activations to drop: one candidate is one storage, with every
// activation that shares it (a view and its base are dropped together).
struct Candidate {
  ir::ValueId owner = ir::kNoValue;  // the value owning the storage
  std::vector<ir::ValueId> members;  // activations in it
  int64_t bytes = 0;
  int32_t made_by = -1;  // the node making the storage (siblings share its recompute subgraph)
};
std::vector<Candidate> candidates(const PlanInput& in);

struct Simulation {
  int64_t peak_bytes = 0;
  int32_t peak_node = -1;  // rank in the rewritten schedule
  std::array<int64_t, ir::kNumRoles> peak_by_role{};
  int64_t peak_working_bytes = 0;  // the peak node's inputs, outputs and workspace (within the above)
  std::string peak_op;             // that node's op
  double extra_ms = 0;  // measured time of the recomputed nodes
  int32_t recompute_nodes = 0;
  std::vector<int64_t> live_after;  // per rewritten node
  // Swapping: time the copies add (on CUDA, the compute stream's waits for a
  // copy back and the copy streams' tail after compute; on the CPU, every
  // copy), the predicted step (the nodes' times, recomputation and swapping),
  // the host memory the copies hold at once, and how many storages are swapped.
  double swap_ms = 0;
  double step_ms = 0;
  int64_t host_peak_bytes = 0;
  int32_t swapped = 0;
  // Per value (the input graph's ids): its storage is live at the peak node,
  // read last in the forward pass before it and next by the backward pass (or
  // a recomputation) after it, so dropping it frees its bytes at the peak.
  std::vector<bool> idle_at_peak;
  // Per storage owner (the input graph's ids): live at the peak node and
  // inside its swap gap there (rewrite::Gap: read last before the peak, next
  // in a later part of the step after it), so swapping it frees its bytes at the peak.
  std::vector<bool> swap_idle_at_peak;
};
// The plan's schedule: recomputation inserted for `drop`, then the storages in
// `swap` swapped (their prefetch points from the nodes' times), simulated.
// With `update_early`, each parameter's update moved into the backward pass
// first (rewrite/update_early.h), before the swaps.
Simulation simulate(const PlanInput& in, const std::vector<ir::ValueId>& drop, const std::vector<ir::ValueId>& swap = {},
                    bool update_early = false);

// linear_cross_entropy's chunk size (chunks.cpp), which every planner's plan
// carries: run_planner picks, before the planner runs, for each
// linear_cross_entropy node and its backward, the largest chunk_rows from the
// node's default (about ops::kVocabChunkBytes of logits) halving down to
// ops::kVocabBlockRows whose workspace keeps that node's simulated bytes (its
// live bytes without recomputation, plus its workspace) within the budget, or
// the smallest. The workspace is the profile's measurement re-scaled by the op's
// declared one (OpDef::workspace). The planner then plans the chunked graph.
struct ChunkChoice {
  int32_t node = -1;  // in the profiled graph (recomputation does not move it)
  int64_t rows = 0;
};
std::vector<ChunkChoice> choose_chunks(const PlanInput& in, int64_t budget_bytes);
// Sets each node's chunk_rows; on a PlanInput, re-scales its workspace too.
// Apply a plan's chunks to the graph before rewriting it with the plan's drops.
void apply_chunks(ir::Graph& g, const std::vector<ChunkChoice>& chunks);
void apply_chunks(PlanInput& in, const std::vector<ChunkChoice>& chunks);
// One candidate a planner chose, in the order it chose: the greedy's reasoning,
// written to plan.json and plan.csv (`rank`, `score`, `reason`).
struct Choice {
  enum class Outcome { dropped, raised_peak, taken_back };
  ir::ValueId owner = ir::kNoValue;  // the candidate's storage
  double score = 0;                  // bytes freed per ms of recomputation not already paid (or of copy
                                     // time not hidden, for a swap), when chosen
  Outcome outcome = Outcome::dropped;
  bool swap = false;                 // swapped to host memory, not recomputed
};
const char* to_string(Choice::Outcome o);

struct Plan {
  std::string planner;
  int64_t budget_bytes = 0;
  std::vector<ir::ValueId> drop;  // activations to recompute
  std::vector<ir::ValueId> swap;  // storages (owners) to swap to host memory
  bool update_early = false;      // parameters updated in the backward pass, as soon as ready (rewrite/update_early.h)
  std::vector<ChunkChoice> chunks;  // chunk_rows of the vocabulary loss's nodes, applied before `drop`
  Simulation predicted;
  bool feasible = false;
  double planning_ms = 0;
  std::string note;  // why infeasible, or what the planner chose to say
  std::string from;  // mutwo: the planner whose plan it took, better than the greedy's (per-layer, sqrt-n); else empty
  // Candidates in the order the planner considered them (the greedy's picks,
  // undone ones included); empty for planners without an order.
  std::vector<Choice> order;
};
// `g` (the plan's profiled graph) with the plan's chunks applied: what the
// recomputation rewrite takes with the plan's drops.
ir::Graph chunked_graph(const ir::Graph& g, const Plan& p);
// The step the plan runs: `in`'s graph chunked, recomputation inserted, then
// swaps (prefetch points placed from `in`'s node times and copy speed).
// Each pass verified, and shown to `o.after` (--dump-ir-after).
rewrite::Rewritten rewrite_plan(const PlanInput& in, const Plan& p, const rewrite::PassOptions& o = {});
// A random node the plan's step recomputes by replaying its generator state
// (plan.json's `replayed`): its first output, its op, the state's value.
struct ReplayedNode {
  std::string node, op, state;
  int64_t state_bytes = 0;
};
std::vector<ReplayedNode> replayed_random(const PlanInput& in, const Plan& p);

// linear_cross_entropy's chunks, after the planner (chunks.cpp): choose_chunks
// judged each node by its live bytes without recomputation, which the plan's
// recomputation and swaps lower, and small chunks cost time (BERT-large at
// batch 32 on an H100: 32-row chunks made the head and its backward 21 ms
// slower than the default's). So for a plan that fits, each chunk grows back,
// up to the default, to the largest that keeps the plan's simulated peak
// within its budget, and the plan is simulated again. `in`: the unchunked
// input the planner's was made from.
void grow_chunks(const PlanInput& in, Plan& p);

using PlannerFn = Plan (*)(const PlanInput& in, int64_t budget_bytes);

// none, per-layer, sqrt-n, mutwo, optimal.
const std::vector<std::string>& planner_names();
// Runs a planner by name, timing it. UserError for an unknown name.
Plan run_planner(const std::string& name, const PlanInput& in, int64_t budget_bytes);

// The planners (one file each).
Plan plan_none(const PlanInput& in, int64_t budget_bytes);
Plan plan_per_layer(const PlanInput& in, int64_t budget_bytes);
Plan plan_sqrt_n(const PlanInput& in, int64_t budget_bytes);
Plan plan_mutwo(const PlanInput& in, int64_t budget_bytes);
Plan plan_optimal(const PlanInput& in, int64_t budget_bytes);

// Module blocks for the layer-wise planners: a scope up to and including its
// first all-digit component ("layer1.0.conv1" -> "layer1.0", "encoder.layer.3.attention"
// -> "encoder.layer.3", "h.5.attn" -> "h.5"); "" when the scope has none.
std::string block_of(const std::string& scope);

// Drops the candidates made inside the given blocks, except those read by a
// forward node outside their block (the block's outputs) when the block is in `keep_outputs_of`.
std::vector<ir::ValueId> drop_inside_blocks(const PlanInput& in, const std::vector<std::string>& blocks,
                                            const std::vector<std::string>& keep_outputs_of);

// "the lowest peak the mutwo planner reaches is 2.9 GiB (parameter 418 MiB,
// gradient 418 MiB, ...)": an infeasible plan's peak and what is live there by
// role (other: temporaries and the peak node's workspace), for the error that
// plan, optimize and mutwo.torch report.
std::string floor_text(const Plan& lowest, const std::string& planner);

// The greedy's lowest plan for `g` on an estimated profile (nothing runs):
// what to recompute to profile a step whose unplanned form does not fit the
// device. Its drops bring the peak as low as the greedy can by recomputation
// alone, whatever the times (dropping every candidate can be higher:
// recomputed chains are held at once).
std::vector<ir::ValueId> lowest_drop(const ir::Graph& g, const std::string& device);

// Fills a Plan from a drop list (and a swap list): simulates it and judges it against the budget.
Plan finish(const PlanInput& in, std::string planner, int64_t budget_bytes, std::vector<ir::ValueId> drop,
            std::vector<ir::ValueId> swap = {}, bool update_early = false);

// Storage owners the planners may swap (rewrite::swappable in the unplanned step).
std::vector<ir::ValueId> swap_candidates(const PlanInput& in);

// The kept values a dropped activation is recomputed from under `drop`.
std::vector<ir::ValueId> recompute_sources(const PlanInput& in, const std::vector<ir::ValueId>& drop, ir::ValueId v);

// The time of the nodes that recompute `v` from kept values under `drop`, as if
// `v` were dropped too (the nodes recompute_sources walks); 0 for a value
// without a producer.
double recompute_ms(const PlanInput& in, const std::vector<ir::ValueId>& drop, ir::ValueId v);

// One activation's line of plan.json / plan.csv: what the planner decided and why.
struct ActivationRecord {
  std::string name;
  int64_t bytes = 0;
  std::string decision;  // "recompute", "swap" (its storage goes to host memory) or "keep"
  std::string reason;    // picked, raised the peak, taken back, not picked, not needed: the step fits unplanned,
                         // chosen by PLANNER, kept by PLANNER, not recomputable
  int32_t rank = 0;      // 1-based position in the planner's order (shared by a storage's members); 0: none
  double score = 0;      // the greedy's bytes per ms when it chose (rank > 0)
  bool candidate = false;  // recomputable: recompute_ms and ratio are meaningful
  double recompute_ms = 0;
  std::vector<std::string> sources;  // dropped only: the kept values it is recomputed from
  double ratio() const { return recompute_ms > 0 ? static_cast<double>(bytes) / recompute_ms : 0.0; }
};
std::vector<ActivationRecord> activation_records(const PlanInput& in, const Plan& p);

// plan.json (versioned; every activation with its decision, reason, rank,
// recompute time and ratio, and sources; the graph's fingerprint) and plan.csv.
// 2: graph_fingerprint; 3: swapped; 4: replayed (random nodes recomputed from
// their generator state). Versions 2 and 3 are read too: their plans drop no
// random output (none was a candidate).
inline constexpr int kPlanVersion = 4;
void write_plan_json(const PlanInput& in, const Plan& p, int64_t unplanned_peak, const std::string& path);
void write_plan_csv(const PlanInput& in, const Plan& p, const std::string& path);

// plan.json read back (UserError naming the file when it is not a mutwo plan).
struct PlanFile {
  std::string model, device, planner, note;
  int64_t batch = 0;
  int64_t budget_bytes = 0, unplanned_peak_bytes = 0, predicted_peak_bytes = 0, dropped_bytes = 0;
  double predicted_extra_ms = 0;
  bool feasible = false;
  std::vector<ActivationRecord> activations;
};
PlanFile read_plan_file(const std::string& path);


// plan.json read back and validated on its own: format and version exact,
// every field of its type, sizes and times finite and non-negative (sizes at
// most 1 PiB), activations listed once each, the summary's counts those of the
// list. UserError naming the file and the field.
struct SavedPlan {
  struct Activation {
    std::string name;
    int64_t bytes = 0;
    bool recompute = false;
    bool swap = false;  // its storage is swapped
  };
  std::string model;
  int64_t batch = 0;  // 0: a captured step's
  std::string graph_fingerprint;  // ir::fingerprint of the unplanned step
  std::string device;  // informative: a plan holds on any device
  std::string planner;
  int64_t budget_bytes = 0;
  std::vector<Activation> activations;  // the step's, in its order
  // linear_cross_entropy's chunk per node, by the node's first output (plan.json's `chunks`).
  std::vector<std::pair<std::string, int64_t>> chunks;
  std::vector<std::pair<std::string, int64_t>> swap;  // storages swapped to host memory: name, bytes
  bool update_early = false;
  // The random nodes it replays, by first output (version 4); absent in older plans.
  std::optional<std::vector<std::string>> replayed;
};
SavedPlan read_plan(const std::string& path);

// Why `s` is not a plan of this step: "it was made for model 'mlp', not
// 'bert-tiny'" (then batch, then the graph's fingerprint); empty when it is.
std::string plan_mismatch(const SavedPlan& s, const std::string& model, int64_t batch, const std::string& fingerprint);

// The saved plan as a Plan of `in`'s graph, simulated and judged against its
// own budget. UserError unless its activations are the graph's (names and
// sizes, in order) and what it recomputes is whole candidates.
Plan apply_plan(const PlanInput& in, const SavedPlan& s);

// `optimize --plan PATH`'s two steps (the CLI's and the fuzzer's loader,
// tests/fuzz/load.cpp): check_saved before the step is profiled (the plan is
// this step's: plan_mismatch against --model, --batch and `g`), apply_saved
// on the profiled step. UserErrors that start "--plan PATH: ".
void check_saved(const SavedPlan& s, const std::string& path, const std::string& model, int64_t batch,
                 const ir::Graph& g);
Plan apply_saved(const PlanInput& in, const SavedPlan& s, const std::string& path);

// One pipeline: profile -> plan, the same for optimize, sweep, max-batch,
// train and plan on the command line, mutwo.torch's sessions and its
// compiled steps (each then rewrites, runs or hands the plan on its own way).
struct PlanOptions {
  std::string planner = "mutwo";  // planner_names()
  std::string budget = "100%";     // bytes ("2GiB") or a percentage of the unplanned peak
  int64_t exempt_bytes = 0;        // bytes of the step the budget leaves out (a compiled step's given
                                   // tensors), and its percentage too
};
struct Planned {
  PlanInput input;             // the profiled step (its graph is the baseline)
  int64_t unplanned_peak = 0;  // simulated, without recomputation
  Plan plan;
};
// The planners' input from `prof` (then `adjust`ed: swap flags, no swapping)
// and the unplanned step simulated.
Planned prepare(const profile::Profile& prof, const std::function<void(PlanInput&)>& adjust = {});
// The same from a profile.json (`mutwo plan --profile PATH`): UserError naming the file.
Planned prepare_file(const std::string& profile_path, const std::function<void(PlanInput&)>& adjust = {});
// p.plan: o.planner under o.budget.
void run(Planned& p, const PlanOptions& o);
// Why p.plan does not fit: the lowest peak o.planner reaches and what it holds.
std::string infeasible_text(const Planned& p, const PlanOptions& o);

}  // namespace mutwo::plan
