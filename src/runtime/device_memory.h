// What this process holds on a CUDA device, other processes on the same card
// left out: its context, the libraries' memory and what its caching allocator
// reserved. Every `device_peak_bytes`, `--device-memory` and max-batch's cap
// is about this figure, so a card shared with another process is planned for
// what this one may hold.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace mutwo::runtime {

struct DeviceBytes {
  int64_t process = 0;  // this process's bytes on the device
  int64_t free = 0;     // the card's free bytes now (what this process could still take)
  // How `process` was measured: "nvml" (NVML's per-process figure), "baseline"
  // (the card's used bytes less what others held before this process's
  // context), "card" (the card's used bytes, other processes included: no NVML).
  std::string source;
};

// Reads what other processes hold on `device` before this process makes a CUDA
// context there (NVML needs none): the baseline process_device_bytes falls back
// on where NVML does not list this process. Call before the first CUDA work;
// later calls do nothing. A no-op on the CPU.
void take_device_baseline(const c10::Device& device);

// This process's bytes on `device` now (zero on the CPU).
DeviceBytes process_device_bytes(const c10::Device& device);

}  // namespace mutwo::runtime
