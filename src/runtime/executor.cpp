// The executor (see executor.h): a flat program of kernel calls with
// precomputed input/output slots and release lists.
#include "runtime/executor.h"

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>

#ifdef MUTWO_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include "ops/kernel.h"
#include "ops/op.h"
#include "runtime/memory.h"
#include "support/error.h"

namespace mutwo::runtime {

struct Executor::Instr {
  ops::KernelFn kernel;
  const ir::Node* node;
  std::vector<const at::Tensor*> in;
  std::vector<at::Tensor*> out;
  std::vector<at::Tensor*> release;
  bool view;
};

Executor::Executor(const ir::Graph& g, ExecutorOptions options)
    : graph_(g), options_(options), liveness_(analysis::analyze_liveness(graph_)) {
  if (options_.device.is_cuda()) {
    std::string why;
    MUTWO_CHECK(cuda_available(&why), "--device cuda: {}", why);
  }
  if (options_.device.is_cpu()) track_cpu_memory();
  slots_.resize(graph_.num_values());
  program_.reserve(graph_.nodes().size());
  for (size_t n = 0; n < graph_.nodes().size(); ++n) {
    const ir::Node& node = graph_.nodes()[n];
    const ops::OpDef& def = ops::op(node.op);
    Instr ins{def.kernel, &node, {}, {}, {}, def.has(ops::kView)};
    for (ir::ValueId v : node.inputs) ins.in.push_back(v == ir::kNoValue ? &absent_ : &slots_[static_cast<size_t>(v)]);
    for (ir::ValueId v : node.outputs) ins.out.push_back(&slots_[static_cast<size_t>(v)]);
    for (ir::ValueId v : liveness_.release_after[n]) ins.release.push_back(&slots_[static_cast<size_t>(v)]);
    program_.push_back(std::move(ins));
  }
#ifdef MUTWO_WITH_CUDA
  if (options_.device.is_cuda()) {
    generator_ = at::cuda::detail::createCUDAGenerator(options_.device.index() < 0 ? 0 : options_.device.index());
    generator_.set_current_seed(options_.seed);
  }
#endif
  if (!generator_.defined()) generator_ = at::detail::createCPUGenerator(options_.seed);
}

Executor::~Executor() = default;

// Liveness assumes view ops alias input 0 and every other output is fresh
// memory; a kernel that breaks this would make memory predictions wrong.
void Executor::check_aliasing(const Instr& ins) {
  for (size_t i = 0; i < ins.out.size(); ++i) {
    const at::Tensor& o = *ins.out[i];
    MUTWO_ASSERT(o.defined(), "op {} left output {} undefined", ins.node->op, i);
    bool aliases_input0 = !ins.in.empty() && ins.in[0]->defined() && o.is_alias_of(*ins.in[0]);
    if (ins.view && i == 0) {
      MUTWO_ASSERT(aliases_input0, "view op {} returned a copy, not a view of its input", ins.node->op);
      continue;
    }
    for (const at::Tensor* in : ins.in)
      MUTWO_ASSERT(!in->defined() || !o.is_alias_of(*in), "op {} returned an alias of an input but is not a view op",
                   ins.node->op);
  }
}

at::Tensor make_initial(const ir::TensorType& t, const ir::Init& init, at::Generator& gen) {
  auto opts = at::TensorOptions().dtype(ops::to_aten(t.dtype));
  switch (init.kind) {
    case ir::Init::none:
    case ir::Init::zeros: return at::zeros(t.shape, opts);
    case ir::Init::ones: return at::ones(t.shape, opts);
    case ir::Init::uniform: return at::empty(t.shape, opts).uniform_(init.a, init.b, gen);
    case ir::Init::normal: return at::empty(t.shape, opts).normal_(init.a, init.b, gen);
    case ir::Init::randint: return at::randint(static_cast<int64_t>(init.b), t.shape, gen, opts);
  }
  return {};
}

void Executor::initialize() {
  at::Generator gen = at::detail::createCPUGenerator(options_.seed);
  for (const ir::Value& v : graph_.values()) {
    if (!ir::is_persistent(v.role)) continue;
    at::Tensor t = make_initial(v.type, v.init, gen);
    slots_[static_cast<size_t>(v.id)] = options_.device.is_cpu() ? t : t.to(options_.device);
  }
  step_ = 0;
}

at::Tensor& Executor::value(ir::ValueId v) {
  MUTWO_ASSERT(v >= 0 && static_cast<size_t>(v) < slots_.size(), "no value {}", v);
  return slots_[static_cast<size_t>(v)];
}

StepResult Executor::step() {
  const c10::Device dev = options_.device;
  ++step_;
  const auto options = at::TensorOptions().device(dev);
  synchronize(dev);
  reset_peak(dev);
  StepResult r;
  r.start_bytes = memory_stats(dev).current;
  auto t0 = std::chrono::steady_clock::now();
  for (size_t n = 0; n < program_.size(); ++n) {
    Instr& ins = program_[n];
    if (observer_) observer_->before(n);
    ops::KernelCall k{*ins.node, ins.in.data(), ins.out.data(), options, step_, generator_};
    ins.kernel(k);
    check_aliasing(ins);
    for (at::Tensor* t : ins.release) t->reset();
    if (observer_) observer_->after(n);
  }
  synchronize(dev);
  auto t1 = std::chrono::steady_clock::now();
  r.ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const MemoryStats after = memory_stats(dev);
  r.peak_bytes = after.peak;
  r.reserved_peak_bytes = after.reserved_peak;
  for (ir::ValueId v : graph_.outputs) {
    at::Tensor& t = slots_[static_cast<size_t>(v)];
    r.outputs.push_back(t.numel() == 1 ? t.item<double>() : 0.0);
    if (!ir::is_persistent(graph_.value(v).role) && !options_.keep_outputs) t.reset();
  }
  return r;
}

}  // namespace mutwo::runtime
