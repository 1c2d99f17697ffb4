// The executor: runs a training-step graph node by node on ATen tensors,
// dropping each value right after its last use (analysis/liveness.h), and
// measures peak memory and step time.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "analysis/liveness.h"
#include "ir/graph.h"
#include "runtime/arena.h"

namespace mutwo::kernels {
class Collectives;
}

namespace mutwo::runtime {

// The refusal of an arena with a captured CUDA graph, which the executor makes
// and optimize makes before any work.
inline constexpr const char* kArenaWithCudaGraph =
    "--arena with --cuda-graph: a captured step allocates from the graph's own pool, which the arena does not serve "
    "yet; leave out one of them";

struct ExecutorOptions {
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  uint64_t seed = 0;  // initial values and dropout masks; a node with a seed offset k draws from seed + k (ops/op.h)
  bool keep_outputs = false;  // leave the graph outputs in their slots after step() (for checks)
  // CUDA only: run the first two steps node by node on a side stream, capture
  // the third in a CUDA graph and replay that graph from then on, so the host
  // launches one graph per step instead of a kernel per node. Refused (UserError)
  // for Adam, whose bias correction changes every step.
  bool cuda_graph = false;
  // Random ops draw from ATen's default generator, as eager PyTorch does
  // (mutwo.torch, in the user's process), not from one seeded with `seed`.
  bool default_generator = false;
  // The other ranks, for a data-parallel step's collectives (src/dist);
  // null: the process's group (runtime::process_group(), null in one process).
  kernels::Collectives* collectives = nullptr;
  // The step's allocations served from one arena planned ahead from the
  // liveness (runtime/arena.h: each node's outputs at their offsets, its
  // workspace in its own block), allocated once at the plan's size;
  // what it cannot serve falls back to the device's allocator, counted in
  // StepResult::arena.
  bool arena = false;
  std::vector<int64_t> arena_workspace{};  // per node: the workspace the plan states; empty: none
};

struct StepResult {
  std::vector<double> outputs;  // the graph outputs (the loss), as numbers
  int64_t peak_bytes = 0;       // measured, all tensors on the device
  int64_t reserved_peak_bytes = 0;  // measured, what the allocator held (CUDA caching; CPU = peak_bytes)
  int64_t start_bytes = 0;      // measured when the step began (persistent state)
  double ms = 0;                // wall time of the step, device synchronised
  ArenaUse arena;               // with ExecutorOptions::arena: what fell back to the allocator
};

// Called around every node, for profiling: before() ahead of the kernel,
// after() once the kernel ran and the node's dead values were released. The
// executor does not synchronise the device for observers.
class NodeObserver {
 public:
  virtual ~NodeObserver() = default;
  virtual void before(size_t node) {}
  virtual void after(size_t node) {}
};

// While alive, ATen picks deterministic kernels (CUDA's embedding backward,
// for one, otherwise accumulates with atomics in a run-dependent order), so two
// runs of one step give the same bits. Warn-only: an op without a
// deterministic version still runs. Restores the previous setting.
class DeterministicAlgorithms {
 public:
  DeterministicAlgorithms() : before_(at::globalContext().deterministicAlgorithms()) {
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  }
  ~DeterministicAlgorithms() { at::globalContext().setDeterministicAlgorithms(before_, false); }
  DeterministicAlgorithms(const DeterministicAlgorithms&) = delete;
  DeterministicAlgorithms& operator=(const DeterministicAlgorithms&) = delete;

 private:
  bool before_;
};

class Executor {
 public:
  Executor(const ir::Graph& g, ExecutorOptions options);
  ~Executor();

  // Fills every persistent value from its Init, on the CPU with a generator
  // seeded by options.seed, then moves it to the device (so CPU and CUDA start
  // from the same numbers). A value named in `given` takes that tensor
  // instead (moved to the device if it is elsewhere, else shared, not copied).
  void initialize(const std::map<std::string, at::Tensor>& given = {});
  StepResult step();
  // Runs nodes [begin, end) and nothing else: no synchronisation, no
  // measurement (mutwo.torch runs the forward part, returns to the user's
  // code, then runs the backward part). Starting at node 0 starts a step.
  void run(size_t begin, size_t end);

  const ir::Graph& graph() const { return graph_; }
  const analysis::Liveness& liveness() const { return liveness_; }
  const c10::Device& device() const { return options_.device; }
  // The arena's plan (ExecutorOptions::arena), null without one.
  const analysis::ArenaPlan* arena_plan() const { return arena_ ? &arena_->plan() : nullptr; }

  // Persistent values (parameters, inputs, state): read or replace.
  at::Tensor& value(ir::ValueId v);
  // Sets value `v` to `t` (shared, not copied; moved to the device if it is
  // elsewhere), refusing a tensor whose shape or dtype the graph does not declare.
  void bind(ir::ValueId v, const at::Tensor& t);
  void set_observer(NodeObserver* o) { observer_ = o; }

 private:
  struct Instr;
  struct CudaGraph;  // executor.cpp, CUDA builds only
  static void check_aliasing(const Instr& ins);
  void draw_by_seed_offset();  // each instruction's generator (ops::kSeedOffsetAttr)
  void run_nodes();
  void run_range(size_t begin, size_t end);
  StepResult replay_step();
  ir::Graph graph_;
  ExecutorOptions options_;
  analysis::Liveness liveness_;
  std::vector<at::Tensor> slots_;  // one per value; fixed size, so pointers into it are stable
  std::vector<Instr> program_;
  bool swaps_ = false;  // the step has swap nodes: its end waits for the copy streams (kernels::join_copies)
  at::Generator generator_;
  at::Tensor absent_;
  int64_t step_ = 0;
  NodeObserver* observer_ = nullptr;
  std::unique_ptr<CudaGraph> cuda_graph_;
  std::shared_ptr<Arena> arena_;
};

// A tensor filled as `init` says, for a value of type `t` (on the CPU).
at::Tensor make_initial(const ir::TensorType& t, const ir::Init& init, at::Generator& gen);

}  // namespace mutwo::runtime
