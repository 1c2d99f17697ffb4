// The process group (see process_group.h) on c10d: a TCPStore at torchrun's
// MASTER_ADDR:MASTER_PORT, ProcessGroupNCCL on CUDA (collectives on its own
// stream; a wait makes the step's stream wait, not the host) or
// ProcessGroupGloo on the CPU (collectives on its threads; gloo's headers come
// from Debian's libgloo-dev, the wheel ships none).
#include "runtime/process_group.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#if __has_include(<gloo/algorithm.h>)
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#define MUTWO_HAVE_GLOO 1
#endif
#if defined(MUTWO_WITH_CUDA) && __has_include(<nccl.h>)
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define MUTWO_HAVE_NCCL 1
#endif

#include <chrono>
#include <map>

#include "support/error.h"

namespace mutwo::runtime {

namespace {
ProcessGroup* g_group = nullptr;
constexpr std::chrono::minutes kTimeout{5};  // a rank that does not come: the others give up after this
}  // namespace

void set_process_group(ProcessGroup* group) { g_group = group; }
ProcessGroup* process_group() { return g_group; }

struct ProcessGroup::Impl {
  c10::Device device;
  c10::intrusive_ptr<c10d::Store> store{};
#ifdef MUTWO_HAVE_GLOO
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo{};
#endif
#ifdef MUTWO_HAVE_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl{};
#endif
  std::map<int64_t, c10::intrusive_ptr<c10d::Work>> pending{};  // by bucket

  // f(backend) on whichever backend this group has.
  template <class F>
  auto on(F&& f) {
#ifdef MUTWO_HAVE_NCCL
    if (nccl) return f(*nccl);
#endif
#ifdef MUTWO_HAVE_GLOO
    if (gloo) return f(*gloo);
#endif
    MUTWO_FAIL("no process group");
  }
  bool is_gloo() const {
#ifdef MUTWO_HAVE_GLOO
    return gloo.defined();
#else
    return false;
#endif
  }
  void start(int64_t bucket, c10::intrusive_ptr<c10d::Work> work) {
    MUTWO_ASSERT(!pending.count(bucket), "bucket {} started twice without a wait", bucket);
    pending.emplace(bucket, std::move(work));
  }
};

ProcessGroup::ProcessGroup(const Launch& l, c10::Device device)
    : impl_(new Impl{device}), rank_(l.rank), world_(l.world_size) {
  MUTWO_CHECK(l.world_size >= 1 && l.rank >= 0 && l.rank < l.world_size,
              "RANK {} and WORLD_SIZE {} do not make a process group; launch with torchrun --nproc-per-node N", l.rank,
              l.world_size);
  MUTWO_CHECK(l.master_port > 0 && l.master_port < 65536, "MASTER_PORT {} is not a port", l.master_port);
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(l.master_port);
  so.isServer = l.rank == 0 && !l.agent_store;
  so.numWorkers = static_cast<std::size_t>(l.world_size);
  so.waitWorkers = true;  // every rank counts itself in, as Python's env:// rendezvous does
  so.timeout = kTimeout;
  try {
    impl_->store = c10::make_intrusive<c10d::PrefixStore>(
        "mutwo", c10::make_intrusive<c10d::TCPStore>(l.master_addr, so));
  } catch (const std::exception& e) {
    MUTWO_FAIL("rank {}: could not reach the store at {}:{} ({}); check MASTER_ADDR and MASTER_PORT", l.rank,
               l.master_addr, l.master_port, e.what());
  }
  if (device.is_cuda()) {
#ifdef MUTWO_HAVE_NCCL
    c10::cuda::set_device(device.index());
    impl_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, l.rank, l.world_size,
                                                              c10d::ProcessGroupNCCL::Options::create());
    backend_ = "nccl";
#else
    MUTWO_FAIL("--device cuda on several ranks needs NCCL, and this mutwo was built without it (nccl.h not found)");
#endif
  } else {
#ifdef MUTWO_HAVE_GLOO
    auto opts = c10d::ProcessGroupGloo::Options::create(kTimeout);
    const bool local = l.master_addr == "127.0.0.1" || l.master_addr == "localhost";
    opts->devices.push_back(!l.gloo_interface.empty() ? c10d::ProcessGroupGloo::createDeviceForInterface(l.gloo_interface)
                            : local                   ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                                      : c10d::ProcessGroupGloo::createDefaultDevice());
    impl_->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, l.rank, l.world_size, opts);
    backend_ = "gloo";
#else
    MUTWO_FAIL("--device cpu on several ranks needs Gloo, and this mutwo was built without it (gloo headers not found)");
#endif
  }
}

ProcessGroup::~ProcessGroup() {
  if (g_group == this) g_group = nullptr;
}

void ProcessGroup::all_reduce_start(int64_t bucket, at::Tensor flat) {
  std::vector<at::Tensor> t{flat};
  impl_->start(bucket, impl_->on([&](auto& pg) { return pg.allreduce(t); }));
}

// Gloo has no reduce-scatter: the whole bucket is summed, and the rank reads its slice.
void ProcessGroup::reduce_scatter_start(int64_t bucket, at::Tensor flat) {
  if (impl_->is_gloo()) return all_reduce_start(bucket, flat);
  at::Tensor slice = flat.narrow(0, rank_ * (flat.numel() / world_), flat.numel() / world_);  // in place, as NCCL allows
  impl_->start(bucket, impl_->on([&](auto& pg) { return pg._reduce_scatter_base(slice, flat); }));
}

void ProcessGroup::wait(int64_t bucket) {
  auto it = impl_->pending.find(bucket);
  MUTWO_ASSERT(it != impl_->pending.end(), "wait for bucket {}, which was not started", bucket);
  c10::intrusive_ptr<c10d::Work> work = std::move(it->second);
  impl_->pending.erase(it);
  work->wait();
}

void ProcessGroup::all_gather(const at::Tensor& shard, at::Tensor out) {
  at::Tensor in = shard;
  c10::intrusive_ptr<c10d::Work> work;
  if (impl_->is_gloo()) {
    std::vector<std::vector<at::Tensor>> outs{out.chunk(world_)};
    std::vector<at::Tensor> ins{in};
    work = impl_->on([&](auto& pg) { return pg.allgather(outs, ins); });
  } else {
    work = impl_->on([&](auto& pg) { return pg._allgather_base(out, in); });
  }
  work->wait();
}

std::vector<double> ProcessGroup::reduce(std::vector<double> values, bool mean) {
  if (values.empty()) return values;
  at::Tensor t = at::tensor(values, at::TensorOptions().dtype(at::kDouble)).to(impl_->device);
  std::vector<at::Tensor> ts{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = mean ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
  impl_->on([&](auto& pg) { return pg.allreduce(ts, opts); })->wait();
  if (mean) t.div_(static_cast<double>(world_));
  t = t.cpu();
  const double* p = t.data_ptr<double>();
  return std::vector<double>(p, p + values.size());
}

std::vector<double> ProcessGroup::mean(std::vector<double> values) { return reduce(std::move(values), true); }
std::vector<double> ProcessGroup::max(std::vector<double> values) { return reduce(std::move(values), false); }

void ProcessGroup::barrier() {
  impl_->on([&](auto& pg) { return pg.barrier(); })->wait();
}

}  // namespace mutwo::runtime
