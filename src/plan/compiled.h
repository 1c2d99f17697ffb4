// The compiled route's decisions, from plain data (docs/compiled.md). mutwo.torch's Inductor adapter (python/mutwo/compiled/)
// traces the joint graph, asks PyTorch's min-cut for each candidate partition
// and prices it; what is decided, and by which rule, is here, in the one
// planner: μ-TWO's recompute order over the anchors, the solve across
// repeated layers, the choice among priced candidates, what a budget resolves
// to, and the refusal text. Arrays in, indices out, as PyTorch's own
// knapsack solvers take them; the extension (src/torchext/library.cpp) calls
// these with the Python side's lists.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mutwo::plan::compiled {

// μ-TWO's greedy order over anchors (the ops min-cut would otherwise save:
// matmuls, convolutions, attention, reductions, random ops): by bytes freed per
// millisecond of recomputation (recompute_ratio, the ratio mutwo.cpp's greedy
// takes the argmax of), highest first, ranked as its inverse, time per byte;
// ties keep the callers' order. `ms` and `bytes` are per anchor.
std::vector<int32_t> recompute_order(const std::vector<double>& ms, const std::vector<int64_t>& bytes);

// One way to plan a repeated layer: recompute the first `k` anchors of its
// order, freeing `freed` bytes of what the forward saves for `extra_ms`.
struct LayerOption {
  int32_t k = 0;
  int64_t freed = 0;
  double extra_ms = 0;
};
// The option of each of `count` layers (its k, the most recomputed first): the
// least total extra_ms whose freed bytes add up to at least `need`; nullopt if
// even every layer's most freeing option does not. An exact knapsack over
// bytes quantised to 1/4096 of `need`, rounded so a solution frees at least need.
std::optional<std::vector<int32_t>> solve_layers(const std::vector<LayerOption>& options, int32_t count, int64_t need);

// PyTorch's own knapsack step (torch/_functorch/_activation_checkpointing/knapsack.py's dp_knapsack,
// its default activation_memory_budget_solver), to the bit: memories quantised to 1/10000 (rounded half
// to even, as Python's round), runtimes and the table in float32, the same backtrack. The most runtime
// of the items saved within `max_memory`, the items saved (ascending) and those left to recompute
// (descending, as PyTorch lists them). What PyTorch's own answer at a budget is does not change; it is
// found in C++, where PyTorch fills the table a torch row at a time.
struct Knapsack {
  double max_runtime = 0;
  std::vector<int32_t> saved, recomputed;
};
Knapsack dp_knapsack(const std::vector<double>& memory, const std::vector<double>& runtime, double max_memory);

// A candidate partition as the adapter priced it: its predicted added peak
// (already corrected by what was measured) and its modelled recompute time.
struct Priced {
  int64_t peak = 0;
  double extra_ms = 0;
};
// The fastest candidate whose peak is within `budget` (the lower peak breaks
// ties, then the earlier index); -1 if none is.
int32_t fastest_within(const std::vector<Priced>& candidates, int64_t budget);
// The candidate with the lowest peak (the faster breaks ties, then the earlier index).
int32_t lowest(const std::vector<Priced>& candidates);

// One phase (the forward or the backward module) of a candidate partition, as
// the memory events the adapter reads from it: per storage, its bytes, the
// position of the node that makes it (-1: live before the phase, the saved set
// the backward is given), the position after which it is freed (its last
// reader; -1 for a carried one never read; `nodes` or more: never, the phase
// returns it) and whether it counts
// as saved (the saved set, or the forward's outputs); per node, what it holds
// inside beyond its outputs (an operator's workspace). What Inductor never
// writes to memory is left out by the adapter.
struct Phase {
  std::vector<int64_t> bytes, made, freed;
  std::vector<uint8_t> saved;
  std::vector<int64_t> workspace;  // per node; its size is the phase's node count
};
struct PhasePeak {
  int64_t peak = 0;           // live bytes at the phase's highest point, the carried ones included
  int64_t saved_at_peak = 0;  // of those, the saved storages' bytes
  int64_t retained = 0;       // bytes live after the phase: what it returns, the carried ones it keeps
};
// The one walk of a compiled phase: at each node its storages made, the peak
// taken with its workspace, then what it read last freed.
PhasePeak phase_peak(const Phase& p);

// A saved tensor the forward hands the backward, as offloading it to host
// memory sees it, at positions in the step's run order (the forward's nodes,
// then the backward's): its last forward read (or its making) and its first
// backward read.
struct SavedTensor {
  int64_t bytes = 0;
  int32_t last_forward_read = 0;
  int32_t first_backward_read = 0;
};
struct OffloadRequest {
  std::vector<double> node_ms;  // per node of the step's run order: its modelled compute
  std::vector<SavedTensor> saved;
  std::string device;           // the rate table's row (profile/rates.h), for a rate not measured
  double d2h_gbps = 0, h2d_gbps = 0;  // measured pinned copy rates; 0: the table's copy_gbps
  bool overlap = true;          // copies on their own stream (CUDA); false: they serialise with compute
  int64_t host_limit = 0;       // host bytes the offloaded tensors may hold
};
struct Offloaded {
  int32_t saved = 0;       // the index in OffloadRequest::saved
  int32_t gone_after = 0;  // the node under which its copy out ends: its device bytes free after it
  int32_t back_at = 0;     // the node under which its copy back starts: its device bytes live from it
  double exposed_ms = 0;   // what the compute does not hide of its copies, given those taken before it
};
// Which saved tensors to offload, in the order worth taking: the CLI route's
// swap rule (plan/copy_streams.h), repeatedly the tensor freeing the most bytes
// per exposed millisecond, each taken filling the copy streams, until the host
// limit. A plan offloads a prefix of this order: the adapter prices each
// prefix's memory with phase_peak and its time with the exposed ms.
std::vector<Offloaded> offload_order(const OffloadRequest& r);

// How far a predicted floor may stand above the measured one: the model's
// misses reach +3.2% per phase on an H200 and 8.6% on the CPU's backward
// (docs/compiled.md), so a budget under the predicted floor by more than this
// share is refused before any step runs (Refusal), and one nearer is measured first.
inline constexpr double kModelTolerance = 0.2;
// Does `budget` fall so far under the predicted `lowest` that no step need run to know?
bool surely_below(int64_t budget, int64_t lowest);

// What a refusal says: a budget of added bytes that no plan reaches.
struct Refusal {
  int64_t budget = 0;            // the added peak asked for, in bytes
  int64_t lowest = 0;            // the lowest added peak: predicted, or measured when `compiles` > 0
  int64_t unplanned = 0;         // plain torch.compile's added peak, 0 if unknown
  std::string what;              // "the compiled graph at model.py:12 (layers.0)", "the 3 compiled graphs of this step"
  int64_t fixed = 0;             // with `activation`, what a percentage is of (support/units.h, Budget)
  int64_t activation = 0;        // 0: suggest bytes, not a percentage
  int32_t compiles = 0;          // > 0: every graph compiled this often, the floor measured
  int64_t host = 0;              // host memory the lowest plan offloads to, 0 if none
  int64_t host_limit = 0;        // what the plans may offload to (backend's host_memory), 0 if not said
  int64_t roomier_lowest = 0;    // > 0: the lowest added peak with `roomier_host` of host memory instead
  int64_t roomier_host = 0;
};
// One line: what was asked, the floor, and the budget to ask for instead (a
// percentage where the budget was one, else a size), sizes in the unit that
// keeps them apart.
std::string refusal_text(const Refusal& r);

}  // namespace mutwo::plan::compiled
