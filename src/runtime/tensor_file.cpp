// write_tensor_file (see tensor_file.h).
#include "runtime/tensor_file.h"

#include <nlohmann/json.hpp>

#include <fstream>

#include "support/error.h"

namespace mutwo::runtime {

namespace {

const char* safetensors_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kDouble: return "F64";
    case at::kHalf: return "F16";
    case at::kBFloat16: return "BF16";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kBool: return "BOOL";
    default: MUTWO_FAIL("cannot write a tensor of type {}", c10::toString(t));
  }
}

}  // namespace

void write_tensor_file(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  nlohmann::json header = {{"__metadata__", {{"format", "mutwo-step-data"}, {"version", "1"}}}};
  std::vector<at::Tensor> data;
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const int64_t bytes = static_cast<int64_t>(c.nbytes());
    header[name] = {{"dtype", safetensors_dtype(c.scalar_type())}, {"shape", c.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(c));
  }
  std::string h = header.dump();
  std::ofstream out(path, std::ios::binary);
  MUTWO_CHECK(out, "cannot write {}: check that its folder exists and is writable", path);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << h;
  for (const at::Tensor& c : data) out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  MUTWO_CHECK(out.good(), "writing {} failed (disk full?)", path);
}

}  // namespace mutwo::runtime
