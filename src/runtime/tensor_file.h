// Writing tensors in the safetensors layout (the step file's tensor file,
// docs/step-file.md): what `mutwo run --save` leaves of a trained step.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

namespace mutwo::runtime {

// Writes `tensors` (copied to the CPU, C-contiguous) to `path`; UserError if it cannot.
void write_tensor_file(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors);

}  // namespace mutwo::runtime
