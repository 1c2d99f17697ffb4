// What this process holds on a CUDA device (see device_memory.h): NVML's
// per-process figure, read through libnvidia-ml.so.1 opened at run time (the
// driver ships it; nothing links against it, and a machine without it falls
// back), else the card's used bytes less what other processes held before
// this one made its context, else the card's used bytes.
#include "runtime/device_memory.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <vector>

#ifdef MUTWO_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace mutwo::runtime {

namespace {

// The few NVML entry points used, as nvml.h declares them (the C ABI NVML has
// kept since its v2 functions; pynvml declares them the same way).
using NvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlProcessInfo {  // nvmlProcessInfo_t, as nvmlDeviceGetComputeRunningProcesses_v3 fills it
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id, compute_instance_id;
};

class Nvml {
 public:
  static Nvml& instance() {
    static Nvml n;
    return n;
  }
  bool ok() const { return handle_ != nullptr; }

  std::optional<int64_t> used(const std::string& pci_bus_id) const {
    NvmlDevice d = device(pci_bus_id);
    NvmlMemory m{};
    if (!d || memory_info_(d, &m) != 0) return std::nullopt;
    return static_cast<int64_t>(m.used);
  }

  // This PID's bytes on the device; nullopt when NVML does not list it (a PID
  // namespace other than the driver's, as in some containers).
  std::optional<int64_t> process_bytes(const std::string& pci_bus_id) const {
    NvmlDevice d = device(pci_bus_id);
    if (!d) return std::nullopt;
    std::vector<NvmlProcessInfo> infos(64);
    unsigned int count = static_cast<unsigned int>(infos.size());
    if (processes_(d, &count, infos.data()) != 0) return std::nullopt;
    const unsigned int pid = static_cast<unsigned int>(getpid());
    for (unsigned int i = 0; i < count && i < infos.size(); ++i)
      if (infos[i].pid == pid) return static_cast<int64_t>(infos[i].used_gpu_memory);
    return std::nullopt;
  }

 private:
  Nvml() {
    handle_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle_) return;
    auto sym = [&](const char* name) { return dlsym(handle_, name); };
    auto init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
    by_pci_ = reinterpret_cast<int (*)(const char*, NvmlDevice*)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
    memory_info_ = reinterpret_cast<int (*)(NvmlDevice, NvmlMemory*)>(sym("nvmlDeviceGetMemoryInfo"));
    processes_ = reinterpret_cast<int (*)(NvmlDevice, unsigned int*, NvmlProcessInfo*)>(
        sym("nvmlDeviceGetComputeRunningProcesses_v3"));
    if (!init || !by_pci_ || !memory_info_ || !processes_ || init() != 0) {
      dlclose(handle_);
      handle_ = nullptr;
    }
  }
  NvmlDevice device(const std::string& pci_bus_id) const {
    NvmlDevice d = nullptr;
    return ok() && by_pci_(pci_bus_id.c_str(), &d) == 0 ? d : nullptr;
  }

  void* handle_ = nullptr;
  int (*by_pci_)(const char*, NvmlDevice*) = nullptr;
  int (*memory_info_)(NvmlDevice, NvmlMemory*) = nullptr;
  int (*processes_)(NvmlDevice, unsigned int*, NvmlProcessInfo*) = nullptr;
};

#ifdef MUTWO_WITH_CUDA
std::string pci_bus_id(int index) {
  char id[32] = {0};
  C10_CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof id, index));
  return id;
}

struct Baseline {
  bool taken = false;
  std::optional<int64_t> others;  // the card's used bytes before this process's context, from NVML
};
Baseline& baseline() {
  static Baseline b;
  return b;
}
#endif

}  // namespace

void take_device_baseline(const c10::Device& device) {
#ifdef MUTWO_WITH_CUDA
  if (!device.is_cuda() || baseline().taken) return;
  baseline().taken = true;
  // cudaDeviceGetPCIBusId makes no context; NVML reads the card without one.
  baseline().others = Nvml::instance().used(pci_bus_id(device.index() < 0 ? 0 : device.index()));
#else
  (void)device;
#endif
}

DeviceBytes process_device_bytes(const c10::Device& device) {
#ifdef MUTWO_WITH_CUDA
  if (device.is_cuda()) {
    const int index = device.index() < 0 ? 0 : device.index();
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
    size_t free = 0, total = 0;
    C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    const int64_t card_used = static_cast<int64_t>(total - free);
    if (auto mine = Nvml::instance().process_bytes(pci_bus_id(index)))
      return {*mine, static_cast<int64_t>(free), "nvml"};
    if (baseline().others) return {card_used - *baseline().others, static_cast<int64_t>(free), "baseline"};
    return {card_used, static_cast<int64_t>(free), "card"};
  }
#endif
  (void)device;
  return {};
}

}  // namespace mutwo::runtime
