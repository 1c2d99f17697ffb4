// The executor (see executor.h): a flat program of kernel calls with
// precomputed input/output slots and release lists.
#include "runtime/executor.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <optional>

#ifdef MUTWO_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "kernels/kernel.h"
#include "kernels/kernels.h"
#include "kernels/rng_state.h"
#include "ops/op.h"
#include "runtime/memory.h"
#include "runtime/process_group.h"
#include "stepfile/step_file.h"
#include "support/error.h"

namespace mutwo::runtime {

struct Executor::Instr {
  kernels::KernelFn kernel;
  const ir::Node* node;
  std::vector<const at::Tensor*> in;
  std::vector<at::Tensor*> out;
  std::vector<at::Tensor*> release;
  bool view;
  std::shared_ptr<const void> state;  // the kernel's prepare(node), if it has one
  const at::Tensor* rng_state = nullptr;  // a replayed random node: the generator state it draws from (its last input)
  at::Generator generator;  // the one it draws from: the step's, or its seed offset's (ops::kSeedOffsetAttr)
};

// The captured step (ExecutorOptions::cuda_graph). The caching allocator
// serves the capture from a private pool that the graph keeps, and replays
// allocate nothing: the memory statistics of every replayed step are the ones
// read around the capture, which made exactly the allocations of one step.
struct Executor::CudaGraph {
#ifdef MUTWO_WITH_CUDA
  c10::cuda::CUDAStream stream;  // captures need a stream other than the default one
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  StepResult captured;  // start, peak and reserved peak bytes measured at capture
#endif
};

Executor::Executor(const ir::Graph& g, ExecutorOptions options)
    : graph_(g), options_(options), liveness_(analysis::analyze_liveness(graph_)) {
  if (options_.device.is_cuda()) {
    std::string why;
    MUTWO_CHECK(cuda_available(&why), "--device cuda: {}", why);
  }
  if (options_.device.is_cpu()) track_cpu_memory();
  if (!options_.collectives) options_.collectives = process_group();
  slots_.resize(graph_.num_values());
  program_.reserve(graph_.nodes().size());
  for (size_t n = 0; n < graph_.nodes().size(); ++n) {
    const ir::Node& node = graph_.nodes()[n];
    const kernels::Kernel& kern = kernels::kernel(node.op);
    Instr ins{kern.run, &node, {}, {}, {}, ops::has(node, ops::kView),
              kern.prepare ? kern.prepare(graph_, node) : nullptr};
    for (ir::ValueId v : node.inputs) ins.in.push_back(v == ir::kNoValue ? &absent_ : &slots_[static_cast<size_t>(v)]);
    for (ir::ValueId v : node.outputs) ins.out.push_back(&slots_[static_cast<size_t>(v)]);
    for (ir::ValueId v : liveness_.release_after[n]) ins.release.push_back(&slots_[static_cast<size_t>(v)]);
    if (ops::replays_rng(node)) ins.rng_state = ins.in.back();
    program_.push_back(std::move(ins));
    swaps_ |= node.op == "swap_in";  // every swap copies back (rewrite/swap.h)
  }
  // On CUDA the arena serves ahead of the caching allocator (cuda_source.cpp), on the executor's stream; not
  // inside a captured graph's private pool. Swapped steps are served: swap_in's copy into its arena block starts
  // after the compute stream's work so far (kernels/swap.cpp), which holds every read of the block's earlier
  // tenant; what a copy stream reads (swap_out's and swap_into's sources) is left to the allocator (analysis/arena.h).
  MUTWO_CHECK(!options_.arena || !options_.device.is_cuda() || !options_.cuda_graph, "{}", kArenaWithCudaGraph);
  if (options_.arena)
    arena_ = std::make_shared<Arena>(
        graph_, analysis::plan_arena(graph_, liveness_, {options_.device.is_cuda() ? 512 : 64, options_.arena_workspace}));
  if (options_.cuda_graph) {
    for (const ir::Node& node : graph_.nodes())
      MUTWO_CHECK(!ops::has(node, ops::kStepCount),
                  "--cuda-graph: {} changes its bias correction every step, which a captured graph cannot replay; "
                  "use --optimizer sgd or leave out --cuda-graph",
                  node.op);
    for (const ir::Node& node : graph_.nodes())
      MUTWO_CHECK(!ops::replays_rng(node),
                  "--cuda-graph: the step recomputes the random node %{} ({}) by replaying the generator's state, "
                  "which a captured graph cannot do (the Philox offset of a capture is the graph's own, not a number "
                  "the host can put back); plan with --cuda-graph (random nodes are then kept) or leave out --cuda-graph",
                  graph_.value(node.outputs.at(0)).name, ops::display_name(node));
    MUTWO_CHECK(options_.device.is_cuda(), "--cuda-graph needs --device cuda");
  }
#ifdef MUTWO_WITH_CUDA
  if (options_.device.is_cuda()) {
    const c10::DeviceIndex index = options_.device.index() < 0 ? 0 : options_.device.index();
    // A graph replays random ops with fresh numbers only from the default
    // generator, which every capture registers; otherwise a private one.
    if (options_.default_generator) {
      generator_ = at::cuda::detail::getDefaultCUDAGenerator(index);
    } else {
      generator_ = options_.cuda_graph ? at::cuda::detail::getDefaultCUDAGenerator(index)
                                       : at::cuda::detail::createCUDAGenerator(index);
      generator_.set_current_seed(options_.seed);
    }
    if (options_.cuda_graph) {  // the current stream if it is not the default one (see SideStream), else one from the pool
      c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(index);
      c10::cuda::CUDAStream stream = current == c10::cuda::getDefaultCUDAStream(index) ? c10::cuda::getStreamFromPool(false, index) : current;
      cuda_graph_.reset(new CudaGraph{stream, nullptr, {}});
    }
  }
#endif
  if (!generator_.defined())
    generator_ = options_.default_generator ? at::detail::getDefaultCPUGenerator() : at::detail::createCPUGenerator(options_.seed);
  draw_by_seed_offset();
}

// Each node draws from the step's generator, or where it has a seed offset k
// (copies of a step in one graph: models/copies.h) from a generator of its own
// seeded seed + k, one per offset.
void Executor::draw_by_seed_offset() {
  std::map<int64_t, at::Generator> by_offset{{0, generator_}};
  for (Instr& ins : program_) {
    const int64_t k = ops::seed_offset(*ins.node);
    auto it = by_offset.find(k);
    if (it == by_offset.end()) {
      MUTWO_CHECK(!options_.default_generator && !options_.cuda_graph,
                  "{}: a seed offset ({}={}) needs the executor's own generators, which neither a captured CUDA graph "
                  "nor the default generator gives; leave out --cuda-graph",
                  ops::display_name(*ins.node), ops::kSeedOffsetAttr, k);
      MUTWO_CHECK(k > 0, "{}: {} must be positive, got {}", ops::display_name(*ins.node), ops::kSeedOffsetAttr, k);
      at::Generator gen = at::detail::createCPUGenerator(options_.seed + static_cast<uint64_t>(k));
#ifdef MUTWO_WITH_CUDA
      if (options_.device.is_cuda()) {
        gen = at::cuda::detail::createCUDAGenerator(options_.device.index() < 0 ? 0 : options_.device.index());
        gen.set_current_seed(options_.seed + static_cast<uint64_t>(k));
      }
#endif
      it = by_offset.emplace(k, gen).first;
    }
    ins.generator = it->second;
  }
}

Executor::~Executor() = default;

// Liveness assumes every output of a view op aliases input 0 and every other output is fresh
// memory; a kernel that breaks this would make memory predictions wrong. A
// table op that breaks it is our bug; a generic aten node's view tag and
// outputs are what its step file declared, so there it is the file's error.
void Executor::check_aliasing(const Instr& ins) {
  const bool declared = ins.node->op == "aten";
  auto check = [&](bool ok, const char* what) {  // formats only on failure: this runs for every node
    if (declared) MUTWO_CHECK(ok, "{} {}, not what its step file declares (tags, alias_of, outputs)",
                              ops::display_name(*ins.node), what);
    else MUTWO_ASSERT(ok, "op {} {}", ins.node->op, what);
  };
  for (size_t i = 0; i < ins.out.size(); ++i) {
    const at::Tensor& o = *ins.out[i];
    check(o.defined(), "left an output undefined");
    bool aliases_input0 = !ins.in.empty() && ins.in[0]->defined() && o.is_alias_of(*ins.in[0]);
    if (ins.view) {
      check(aliases_input0, "returned a copy, not a view of its input");
      continue;
    }
    for (const at::Tensor* in : ins.in)
      check(!in->defined() || !o.is_alias_of(*in), "returned an alias of an input but is not a view op");
  }
}

at::Tensor make_initial(const ir::TensorType& t, const ir::Init& init, at::Generator& gen) {
  auto opts = at::TensorOptions().dtype(kernels::to_aten(t.dtype));
  switch (init.kind) {
    case ir::Init::none:
    case ir::Init::zeros: return at::zeros(t.shape, opts);
    case ir::Init::ones: return at::ones(t.shape, opts);
    case ir::Init::uniform: return at::empty(t.shape, opts).uniform_(init.a, init.b, gen);
    case ir::Init::normal: return at::empty(t.shape, opts).normal_(init.a, init.b, gen);
    case ir::Init::randint: return at::randint(static_cast<int64_t>(init.b), t.shape, gen, opts);
    case ir::Init::data: MUTWO_FAIL("a value with init=data is read from the graph's tensor file, not made");
  }
  return {};
}

// A value with Init::data: its bytes from the graph's tensor file.
at::Tensor read_initial(const ir::Value& v, const std::map<std::string, stepfile::TensorEntry>& index, std::ifstream& file,
                        const std::string& path) {
  auto it = index.find(v.name);
  MUTWO_CHECK(it != index.end(), "{}: no tensor for %{}", path, v.name);
  MUTWO_CHECK(it->second.shape == v.type.shape && it->second.dtype == v.type.dtype, "{}: its tensor %{} is {}{}, the graph declares {}",
              path, v.name, ir::to_string(it->second.dtype), ir::shape_string(it->second.shape), ir::to_string(v.type));
  at::Tensor t = at::empty(v.type.shape, at::TensorOptions().dtype(kernels::to_aten(v.type.dtype)));
  file.seekg(it->second.offset);
  MUTWO_CHECK(file.read(static_cast<char*>(t.data_ptr()), it->second.bytes), "{}: truncated at %{}", path, v.name);
  return t;
}

void Executor::initialize(const std::map<std::string, at::Tensor>& given) {
  at::Generator gen = at::detail::createCPUGenerator(options_.seed);
  std::map<std::string, stepfile::TensorEntry> index;
  std::ifstream file;
  const auto& values = graph_.values();
  auto from_file = [&](const ir::Value& v) { return v.init.kind == ir::Init::data && !given.count(v.name); };
  if (std::any_of(values.begin(), values.end(), from_file)) {
    MUTWO_CHECK(!graph_.data_file.empty(), "values have init=data, but the graph names no tensor file (data \"FILE\")");
    index = stepfile::read_tensor_index(graph_.data_file);
    file.open(graph_.data_file, std::ios::binary);
  }
  for (const ir::Value& v : graph_.values()) {
    if (!ir::is_persistent(v.role)) continue;
    if (auto it = given.find(v.name); it != given.end()) {
      bind(v.id, it->second);
      continue;
    }
    at::Tensor t = v.init.kind == ir::Init::data ? read_initial(v, index, file, graph_.data_file)
                                                 : make_initial(v.type, v.init, gen);
    slots_[static_cast<size_t>(v.id)] = liveness_.on_host[static_cast<size_t>(v.id)] ? kernels::host_tensor(t)
                                         : options_.device.is_cpu()                      ? t
                                                                                         : t.to(options_.device);
  }
  if (arena_) arena_->allocate(options_.device);  // after the persistent state, as the step's own memory
  step_ = 0;
}

void Executor::bind(ir::ValueId v, const at::Tensor& t) {
  const ir::Value& val = graph_.value(v);
  MUTWO_CHECK(t.defined() && t.sizes().vec() == val.type.shape && t.scalar_type() == kernels::to_aten(val.type.dtype),
              "%{}: given a tensor of {} {}, the graph declares {}", val.name,
              t.defined() ? std::string(c10::toString(t.scalar_type())) : "undefined",
              t.defined() ? ir::shape_string(t.sizes().vec()) : "", ir::to_string(val.type));
  if (liveness_.on_host[static_cast<size_t>(v)]) value(v) = kernels::host_tensor(t.cpu());  // kept in host memory (swap_into)
  else value(v) = t.device() == options_.device ? t : t.to(options_.device);
}

at::Tensor& Executor::value(ir::ValueId v) {
  MUTWO_ASSERT(v >= 0 && static_cast<size_t>(v) < slots_.size(), "no value {}", v);
  return slots_[static_cast<size_t>(v)];
}

void Executor::run_nodes() { run_range(0, program_.size()); }

void Executor::run(size_t begin, size_t end) {
  MUTWO_ASSERT(begin <= end && end <= program_.size(), "node range [{}, {}) of {}", begin, end, program_.size());
  if (begin == 0) ++step_;
  run_range(begin, end);
}

namespace {

// The arena ahead of the device's allocator while alive, the source before it back after.
class ServedBy {
 public:
  ServedBy(const c10::Device& device, std::shared_ptr<Arena> arena)
      : device_(device), before_(set_allocation_source(device, std::move(arena))) {}
  ~ServedBy() { set_allocation_source(device_, std::move(before_)); }
  ServedBy(const ServedBy&) = delete;
  ServedBy& operator=(const ServedBy&) = delete;

 private:
  c10::Device device_;
  std::shared_ptr<AllocationSource> before_;
};

}  // namespace

void Executor::run_range(size_t begin, size_t end) {
  const auto options = at::TensorOptions().device(options_.device);
  std::optional<ServedBy> served;
  if (arena_) {
    arena_->allocate(options_.device);
    served.emplace(options_.device, arena_);
  }
  for (size_t n = begin; n < end; ++n) {
    Instr& ins = program_[n];
    if (observer_) observer_->before(n);
    if (arena_) arena_->begin_node(n);
    kernels::KernelCall k{*ins.node, ins.in.data(), ins.out.data(), options, step_, ins.generator, ins.state.get(),
                          options_.collectives};
    if (ins.rng_state) {
      kernels::ReplayedRngState replay(ins.generator, *ins.rng_state);  // the forward pass's draws, then the live state back
      ins.kernel(k);
    } else {
      ins.kernel(k);
    }
    check_aliasing(ins);
    // swap_in's output on CUDA is still being filled on the copy stream (its event keyed by its address): left
    // where it was served, never moved; a block elsewhere costs later tenants a fallback, never a wrong number.
    if (arena_ && !(ins.node->op == "swap_in" && options_.device.is_cuda())) {
      std::vector<std::pair<ir::ValueId, at::Tensor*>> made;
      for (size_t i = 0; i < ins.node->outputs.size(); ++i)
        if (liveness_.owns_storage(ins.node->outputs[i])) made.emplace_back(ins.node->outputs[i], ins.out[i]);
      arena_->place(made);
    }
    for (at::Tensor* t : ins.release) t->reset();
    if (observer_) observer_->after(n);
  }
  if (swaps_ && end == program_.size()) kernels::join_copies(options_.device);
}

StepResult Executor::step() {
  const c10::Device dev = options_.device;
  ++step_;
#ifdef MUTWO_WITH_CUDA
  std::optional<c10::cuda::CUDAStreamGuard> on_side_stream;
  if (cuda_graph_) {
    if (step_ >= 3) return replay_step();  // steps 1 and 2 warm up (momentum's first step, library workspaces)
    on_side_stream.emplace(cuda_graph_->stream);
  }
#endif
  synchronize(dev);
  reset_peak(dev);
  StepResult r;
  r.start_bytes = memory_stats(dev).current;
  auto t0 = std::chrono::steady_clock::now();
  run_nodes();
  synchronize(dev);
  auto t1 = std::chrono::steady_clock::now();
  r.ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const MemoryStats after = memory_stats(dev);
  r.peak_bytes = after.peak;
  r.reserved_peak_bytes = after.reserved_peak;
  if (arena_) r.arena = arena_->take_use();
  for (ir::ValueId v : graph_.outputs) {
    at::Tensor& t = slots_[static_cast<size_t>(v)];
    r.outputs.push_back(t.numel() == 1 ? t.item<double>() : 0.0);
    if (!ir::is_persistent(graph_.value(v).role) && !options_.keep_outputs) t.reset();
  }
  return r;
}

StepResult Executor::replay_step() {
#ifdef MUTWO_WITH_CUDA
  MUTWO_ASSERT(!observer_, "node observers cannot watch a replayed CUDA graph");
  const c10::Device dev = options_.device;
  CudaGraph& cg = *cuda_graph_;
  c10::cuda::CUDAStreamGuard guard(cg.stream);
  if (!cg.graph) {
    synchronize(dev);
    // The warm-up steps' blocks stay cached in the allocator's general pool,
    // which the capture does not use (it draws from the graph's private pool):
    // held both, the device would keep the step's memory twice. Only the
    // persistent tensors are allocated now; give the rest back first.
    release_cached_memory(dev);
    reset_peak(dev);
    cg.captured.start_bytes = memory_stats(dev).current;
    cg.graph = std::make_unique<at::cuda::CUDAGraph>();
    try {
      cg.graph->capture_begin();
      run_nodes();
      cg.graph->capture_end();
    } catch (const c10::Error& e) {
      MUTWO_FAIL("--cuda-graph: capturing the step failed (an op synchronises with the host?): {}; "
                 "run without --cuda-graph",
                 e.what_without_backtrace());
    }
    const MemoryStats s = memory_stats(dev);
    cg.captured.peak_bytes = s.peak;
    cg.captured.reserved_peak_bytes = s.reserved_peak;
  }
  StepResult r = cg.captured;
  synchronize(dev);
  auto t0 = std::chrono::steady_clock::now();
  cg.graph->replay();
  synchronize(dev);
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // The outputs stay in their slots: replays write the same memory.
  for (ir::ValueId v : graph_.outputs) {
    const at::Tensor& t = slots_[static_cast<size_t>(v)];
    r.outputs.push_back(t.numel() == 1 ? t.item<double>() : 0.0);
  }
  return r;
#else
  MUTWO_FAIL("--cuda-graph: this mutwo was built without CUDA");
#endif
}

}  // namespace mutwo::runtime
