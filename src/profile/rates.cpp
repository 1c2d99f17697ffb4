// The device rate table (rates.h): its rows and the roofline.
#include "profile/rates.h"

#include <algorithm>

namespace mutwo::profile {

namespace {

constexpr DeviceRates kCuda{1200e12, 600e12, 50e12, 25e12, 2.8e12, 5e-3, 20.0};
constexpr DeviceRates kCpu{2e11, 2e11, 1e11, 5e10, 2e10, 2e-3, 10.0};

}  // namespace

double DeviceRates::flops_per_s(int element_size) const {
  switch (element_size) {
    case 1: return flops_per_s_1;
    case 2: return flops_per_s_2;
    case 8: return flops_per_s_8;
    default: return flops_per_s_4;
  }
}

const DeviceRates& device_rates(std::string_view device) {
  return device.substr(0, 4) == "cuda" ? kCuda : kCpu;
}

double roofline_ms(const DeviceRates& r, double flops, double bytes_moved, int element_size) {
  return std::max(flops / r.flops_per_s(element_size), bytes_moved / r.memory_bytes_per_s) * 1e3;
}

}  // namespace mutwo::profile
