// write_tensor_file (see tensor_file.h); the layout is stepfile's.
#include "runtime/tensor_file.h"

#include <filesystem>
#include <cstdio>
#include <algorithm>
#include <fstream>

#include "kernels/kernel.h"
#include "stepfile/step_file.h"
#include "support/error.h"

namespace mutwo::runtime {

void write_tensor_file(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  constexpr ir::DType kTypes[] = {ir::DType::f32, ir::DType::f64, ir::DType::f16,    ir::DType::bf16,
                                  ir::DType::i64, ir::DType::i32, ir::DType::boolean, ir::DType::u8};
  std::vector<std::pair<std::string, stepfile::TensorEntry>> entries;
  std::vector<at::Tensor> data;
  for (const auto& [name, t] : tensors) {
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const ir::DType* type = std::find_if(std::begin(kTypes), std::end(kTypes),
                                         [&](ir::DType d) { return kernels::to_aten(d) == c.scalar_type(); });
    MUTWO_CHECK(type != std::end(kTypes), "cannot write %{}: tensors of type {} have no place in a tensor file", name,
                c10::toString(c.scalar_type()));
    entries.push_back({name, {*type, c.sizes().vec(), 0, static_cast<int64_t>(c.nbytes())}});
    data.push_back(std::move(c));
  }
  // Whole or not at all, as support/files.h's write_file: into PATH.tmp, renamed when complete.
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::binary);
  MUTWO_CHECK(out, "cannot write {}: check that its folder exists and is writable", path);
  out << stepfile::tensor_file_header(entries);
  for (const at::Tensor& c : data) out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  out.close();
  if (!out) {
    std::remove(tmp.c_str());
    MUTWO_FAIL("writing {} failed (disk full?); nothing was written", path);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  MUTWO_CHECK(!ec, "cannot write {}: {}", path, ec.message());
}

}  // namespace mutwo::runtime
