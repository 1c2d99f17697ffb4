// The device rates every time estimate in mutwo is made from: one table, for
// the executor's estimated profile (estimate.cpp, profile="flops") and the
// compiled route's recompute times (plan/compiled.h) alike. What the planners
// need is the ratio of one op's cost to another's, which a roofline gets
// roughly right; measured steps replace these figures wherever a profile is
// measured, and correct the compiled route's memory model, not its times.
//
// Source of the CUDA row: NVIDIA's H100/H200 SXM datasheets (dense tensor-core
// BF16/FP16 989 TFLOP/s, FP8 1979, TF32 495 with FP32 inputs at 67 without
// tensor cores, FP64 67; HBM3e 4.8 TB/s on the H200, 3.35 TB/s on the H100),
// taken at about 60% of peak, what large matmuls and streaming kernels reach
// in practice. The CPU row: one desktop core's order of magnitude (AVX2 FMA,
// DDR4), for ranking only.
#pragma once

#include <cstdint>
#include <string_view>

namespace mutwo::profile {

struct DeviceRates {
  // Arithmetic by element size in bytes: 1 (int8/fp8), 2 (bf16/fp16), 4 (fp32), 8 (fp64).
  double flops_per_s_1 = 0, flops_per_s_2 = 0, flops_per_s_4 = 0, flops_per_s_8 = 0;
  double memory_bytes_per_s = 0;
  double launch_ms = 0;   // per unfused kernel (the executor's ATen calls); Inductor's fused kernels pay none
  double copy_gbps = 0;   // host-device copies, each way (pinned PCIe 4 x16 on CUDA)
  double flops_per_s(int element_size) const;
};

// The row for `device` ("cuda", "cuda:1", "cpu"; anything else: the CPU's).
const DeviceRates& device_rates(std::string_view device);

// A fused pointwise op recomputed inside its consumer's kernel pays this share
// of the bytes it reads (Inductor fuses it: it writes nothing to memory).
inline constexpr double kFusedPointwiseShare = 0.25;

// Roofline milliseconds of one op: its arithmetic at the rate of its element
// size, or the bytes it moves at memory speed, whichever is longer.
double roofline_ms(const DeviceRates& r, double flops, double bytes_moved, int element_size);

}  // namespace mutwo::profile
