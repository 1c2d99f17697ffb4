// plan.json and plan.csv: a Plan written for a reader and for a later run
// (every activation with its decision and why), and the one reader of
// plan.json (SavedPlan: the file validated on its own, then applied to a step
// by apply_plan, which checks it against that step's graph).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plan/decisions.h"
#include "plan/plan.h"

namespace mutwo::plan {

// One activation's line of plan.json / plan.csv: what the planner decided and why.
struct ActivationRecord {
  std::string name;
  std::string storage;   // the value whose memory it is (itself, or the tensor a view of it shares)
  int64_t bytes = 0;
  std::string decision;  // "recompute", "swap" (its storage goes to host memory) or "keep"
  std::string reason;    // picked, raised the peak, taken back, not picked, not needed: the step fits unplanned,
                         // chosen by PLANNER, kept by PLANNER, not recomputable
  int32_t rank = 0;      // 1-based position in the planner's order (shared by a storage's members); 0: none
  double score = 0;      // the greedy's bytes per ms when it chose (rank > 0)
  bool candidate = false;  // recomputable: recompute_ms and ratio are meaningful
  double recompute_ms = 0;
  std::vector<std::string> sources;  // dropped only: the kept values it is recomputed from
  // Where the model makes it: its node's module path (scope) and op (ops::op_name);
  // empty in plans written before they were recorded.
  std::string module, op;
  // "layers.3.mlp.act_fn: silu" (ops::node_label), the name where no op is recorded.
  std::string label() const { return op.empty() ? name : module.empty() ? op : module + ": " + op; }
  double ratio() const { return recompute_ms > 0 ? static_cast<double>(bytes) / recompute_ms : 0.0; }
  bool recomputed() const { return decision == "recompute"; }
  bool swapped() const { return decision == "swap"; }
};
std::vector<ActivationRecord> activation_records(const PlanInput& in, const Plan& p);

// plan.json (versioned; every activation with its decision, reason, rank,
// recompute time and ratio, and sources; the graph's fingerprint) and plan.csv.
// 2: graph_fingerprint; 3: swapped; 4: replayed (random nodes recomputed from
// their generator state). Versions 2 and 3 are read too: their plans drop no
// random output (none was a candidate). Added within version 4, optional on
// reading: each activation's `module` and `op`, and `decisions` (decisions.h).
inline constexpr int kPlanVersion = 4;
void write_plan_json(const PlanInput& in, const Plan& p, int64_t unplanned_peak, const std::string& path);
void write_plan_csv(const PlanInput& in, const Plan& p, const std::string& path);

// plan.json read back and validated on its own: format and version exact,
// every field of its type, sizes and times finite and non-negative (sizes at
// most 1 PiB), activations listed once each, the summary's counts those of the
// list. What `mutwo report --plan` shows and what `--plan` runs are both read
// by read_plan: one reader, one type.
struct SavedPlan {
  std::string model;
  int64_t batch = 0;  // 0: a captured step's
  std::string graph_fingerprint;  // ir::fingerprint of the unplanned step
  std::string device;  // informative: a plan holds on any device
  std::string planner;
  std::string note;
  int64_t budget_bytes = 0;
  // What the planner predicted (informative: apply_plan simulates again).
  int64_t unplanned_peak_bytes = 0, predicted_peak_bytes = 0, dropped_bytes = 0;
  double predicted_extra_ms = 0;
  bool feasible = false;
  std::vector<ActivationRecord> activations;  // the step's, in its order, with the planner's reasoning
  // linear_cross_entropy's chunk per node, by the node's first output (plan.json's `chunks`).
  std::vector<std::pair<std::string, int64_t>> chunks;
  std::vector<std::pair<std::string, int64_t>> swap;  // storages swapped to host memory: name, bytes
  bool update_early = false;
  // The random nodes it replays, by first output (version 4); absent in older plans.
  std::optional<std::vector<std::string>> replayed;
  // What lowered the peak (plan.json's `decisions`; absent in plans written before them).
  std::vector<Decision> decisions;
};
// UserError naming the file and the field.
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

}  // namespace mutwo::plan
