// A vocabulary head and its cross-entropy as torch 1.13's AOTAutograd captures
// them (python3 -m mutwo.capture on a GPT-like LM: lm_head = nn.Linear on a
// (B, T, H) hidden state, F.cross_entropy(logits.view(-1, V), target.view(-1))),
// written as a step file and its tensor file for the loader's fusion
// (src/stepfile/fuse_loss.h): test_step_file.cpp checks the graph, test_vocab_loss.cpp
// the numbers. With `upcast`, the head is bf16 and its logits are cast to
// `upcast` before the loss (Hugging Face LLaMA's `logits.float()`, as torch
// 2.11 captures it: `_to_copy` forward, `_to_copy` back to bf16 in the
// backward). ATen-free: mutwo_core_tests includes it too.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (fmt 11 and later)

#include "stepfile/step_file.h"

namespace mutwo::captured_head {

struct Options {
  bool bias = true;
  int64_t ignore_index = -100;  // targets in row 0..2 are this (ignored) when `ignore_rows`
  bool ignore_rows = false;
  bool logits_read_elsewhere = false;  // a near miss: an amax of the logits also made
  std::string upcast;  // "" (an f32 head), or the dtype a bf16 head's logits are cast to: "f32" (fused), "f64" (not)
  std::string name = "head";
};

inline constexpr int64_t kB = 3, kT = 8, kH = 16, kV = 40, kN = kB * kT;

// The head's tensors, dir/<name>.safetensors: seeded data, the same in both test binaries.
inline void write_tensors(const std::string& dir, const Options& o) {
  uint64_t seed = 12345;  // a small LCG: the same data in both test binaries, no ATen
  auto uniform = [&seed] {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((seed >> 40) & 0xffffff) / float(1 << 24) * 2.0f - 1.0f;
  };
  std::vector<std::pair<std::string, stepfile::TensorEntry>> entries;
  std::string bytes;
  auto add = [&](const std::string& name, ir::DType dt, ir::Shape shape, auto&& fill) {
    stepfile::TensorEntry e{dt, shape, 0, ir::TensorType{shape, dt}.bytes()};
    for (int64_t i = 0; i < ir::TensorType{shape, dt}.numel(); ++i) {
      auto x = fill(i);
      bytes.append(reinterpret_cast<const char*>(&x), sizeof(x));
    }
    entries.emplace_back(name, e);
  };
  const bool bf16 = !o.upcast.empty();
  auto head = [&](const char* name, ir::Shape shape, float scale) {  // f32, or bf16 rounded to nearest even
    if (!bf16) return add(name, ir::DType::f32, shape, [&](int64_t) { return scale * uniform(); });
    add(name, ir::DType::bf16, shape, [&](int64_t) {
      const float x = scale * uniform();
      uint32_t b;
      std::memcpy(&b, &x, 4);
      return static_cast<uint16_t>((b + 0x7fff + ((b >> 16) & 1)) >> 16);
    });
  };
  head("h", {kB, kT, kH}, 1.0f);
  head("lm_head.weight", {kV, kH}, 0.5f);
  if (o.bias) head("lm_head.bias", {kV}, 0.1f);
  add("input0", ir::DType::i64, {kB, kT}, [&](int64_t i) {
    return o.ignore_rows && i < 3 ? o.ignore_index : static_cast<int64_t>((uniform() + 1.0f) * 0.5f * (kV - 1));
  });
  std::ofstream(dir + "/" + o.name + ".safetensors", std::ios::binary) << stepfile::tensor_file_header(entries) << bytes;
}

// The step file's values, as JSON objects.
inline std::vector<std::string> values_json(const Options& o) {
  std::vector<std::string> values;
  const bool bf16 = !o.upcast.empty();
  const char* H = bf16 ? "bf16" : "f32";                     // the head's dtype
  const char* L = bf16 ? o.upcast.c_str() : "f32";           // the logits' dtype at the loss
  auto value = [&](const std::string& name, const char* role, const ir::Shape& shape, const std::string& extra = "",
                   const char* dtype = "f32") {
    values.push_back(fmt::format(R"({{"name":"{}","role":"{}","dtype":"{}","shape":[{}],"strides":[]{}}})", name, role,
                                 dtype, fmt::join(shape, ","), extra));
  };
  value("p_h", "parameter", {kB, kT, kH}, R"(,"qualname":"h")", H);
  value("p_w", "parameter", {kV, kH}, R"(,"qualname":"lm_head.weight")", H);
  if (o.bias) value("p_b", "parameter", {kV}, R"(,"qualname":"lm_head.bias")", H);
  value("tokens", "input", {kB, kT}, R"(,"index":0)", "i64");
  value("tangents_1", "tangent", {}, "", L);
  value("t", "intermediate", {kH, kV}, "", H);
  value("view", "intermediate", {kN, kH}, "", H);
  value("mm", "intermediate", {kN, kV}, "", H);
  value("view_1", "intermediate", {kB, kT, kV}, "", H);
  if (bf16) value("up", "intermediate", {kB, kT, kV}, "", L);
  value("view_2", "intermediate", {kN, kV}, "", L);
  value("view_3", "intermediate", {kN}, "", "i64");
  value("logp", "intermediate", {kN, kV}, "", L);
  value("detach", "intermediate", {kN, kV}, "", L);
  value("loss", "intermediate", {}, "", L);
  value("total", "intermediate", {}, "", L);
  if (o.logits_read_elsewhere) value("amax", "intermediate", {kN}, "", L);
  value("g1", "intermediate", {kN, kV}, "", L);
  value("detach_1", "intermediate", {kN, kV}, "", L);
  value("g2", "intermediate", {kN, kV}, "", L);
  value("ra", "intermediate", {kB, kT, kV}, "", L);
  if (bf16) value("down", "intermediate", {kB, kT, kV}, "", H);
  value("ra_1", "intermediate", {kN, kV}, "", H);
  value("t_1", "intermediate", {kV, kH}, "", H);
  value("mm_1", "intermediate", {kN, kH}, "", H);
  value("t_2", "intermediate", {kV, kN}, "", H);
  value("mm_2", "intermediate", {kV, kH}, "", H);
  value("t_3", "intermediate", {kH, kV}, "", H);
  if (o.bias) {
    value("sum", "intermediate", {1, kV}, "", H);
    value("d_b", "gradient", {kV}, R"(,"of":"p_b")", H);
  }
  value("d_h", "gradient", {kB, kT, kH}, R"(,"of":"p_h")", H);
  value("d_w", "gradient", {kV, kH}, R"(,"of":"p_w")", H);

  return values;
}

// The step file's nodes, as JSON objects.
inline std::vector<std::string> nodes_json(const Options& o) {
  std::vector<std::string> nodes;
  const bool bf16 = !o.upcast.empty();
  const char* H = bf16 ? "bf16" : "f32";                     // the head's dtype
  const char* L = bf16 ? o.upcast.c_str() : "f32";           // the logits' dtype at the loss
  // A node of the step file; `alias` 0 makes it a view of its first argument.
  auto node = [&](const char* target, const std::string& args, const std::string& outs, bool view = false,
                  const char* overload = "default") {
    nodes.push_back(fmt::format(R"({{"target":"{}","overload":"{}","args":[{}],"outputs":[{}],"tags":{},"mutates":[],)"
                                R"("alias_of":{},"scope":"","phase":"forward"}})",
                                target, overload, args, outs, view ? R"(["view"])" : "[]", view ? "0" : "null"));
  };
  const std::string dims = fmt::format("[{},{},{}]", kB, kT, kV);
  node("aten::t", R"({"t":"p_w"})", R"("t")", true);
  node("aten::view", fmt::format(R"({{"t":"p_h"}},[{},{}])", kN, kH), R"("view")", true);
  if (o.bias) node("aten::addmm", R"({"t":"p_b"},{"t":"view"},{"t":"t"},1,1)", R"("mm")");
  else node("aten::mm", R"({"t":"view"},{"t":"t"})", R"("mm")");
  node(o.bias ? "aten::view" : "aten::_unsafe_view", fmt::format(R"({{"t":"mm"}},{})", dims), R"("view_1")", true);
  if (bf16) node("aten::_to_copy", fmt::format(R"({{"t":"view_1"}},{{"dtype":"{}"}},null,null,null,false,null)", L), R"("up")");
  node("aten::view", fmt::format(R"({{"t":"{}"}},[-1,{}])", bf16 ? "up" : "view_1", kV), R"("view_2")", true);
  node("aten::view", R"({"t":"tokens"},[-1])", R"("view_3")", true);
  node("aten::_log_softmax", R"({"t":"view_2"},1,false)", R"("logp")");
  node("aten::detach", R"({"t":"logp"})", R"("detach")", true);
  node("aten::nll_loss_forward", fmt::format(R"({{"t":"logp"}},{{"t":"view_3"}},null,1,{})", o.ignore_index),
       R"("loss","total")");
  if (o.logits_read_elsewhere) node("aten::amax", R"({"t":"view_2"},[1],false)", R"("amax")");
  node("aten::nll_loss_backward",
       fmt::format(R"({{"t":"tangents_1"}},{{"t":"logp"}},{{"t":"view_3"}},null,1,{},{{"t":"total"}})", o.ignore_index),
       R"("g1")");
  node("aten::detach", R"({"t":"detach"})", R"("detach_1")", true);
  node("aten::_log_softmax_backward_data", fmt::format(R"({{"t":"g1"}},{{"t":"detach_1"}},1,{{"dtype":"{}"}})", L),
       R"("g2")");
  node("aten::_reshape_alias", fmt::format(R"({{"t":"g2"}},{},[{},{},1])", dims, kT * kV, kV), R"("ra")", true);
  if (bf16)
    node("aten::_to_copy", fmt::format(R"({{"t":"ra"}},{{"dtype":"{}"}},{{"layout":"strided"}},{{"device":"cpu"}},null,false,null)", H),
         R"("down")");
  node("aten::_reshape_alias", fmt::format(R"({{"t":"{}"}},[{},{}],[{},1])", bf16 ? "down" : "ra", kN, kV, kV), R"("ra_1")",
       true);
  node("aten::t", R"({"t":"t"})", R"("t_1")", true);
  node("aten::mm", R"({"t":"ra_1"},{"t":"t_1"})", R"("mm_1")");
  node("aten::t", R"({"t":"ra_1"})", R"("t_2")", true);
  node("aten::mm", R"({"t":"t_2"},{"t":"view"})", R"("mm_2")");
  node("aten::t", R"({"t":"mm_2"})", R"("t_3")", true);
  if (o.bias) {
    node("aten::sum", R"({"t":"ra_1"},[0],true,null)", R"("sum")", false, "dim_IntList");
    node("aten::view", fmt::format(R"({{"t":"sum"}},[{}])", kV), R"("d_b")", true);
  }
  node("aten::_reshape_alias", fmt::format(R"({{"t":"mm_1"}},[{},{},{}],[{},{},1])", kB, kT, kH, kT * kH, kH),
       R"("d_h")", true);
  node("aten::t", R"({"t":"t_3"})", R"("d_w")", true);
  return nodes;
}

// Writes dir/<name>.json and dir/<name>.safetensors; returns the JSON's path.
// The hidden state is a parameter (h, (B, T, H)), so that its gradient is one too.
inline std::string write(const std::string& dir, const Options& o) {
  write_tensors(dir, o);
  const std::string path = dir + "/" + o.name + ".json";
  std::ofstream(path) << fmt::format(
      R"({{"format":"mutwo-step","version":1,"name":"{}","data":"{}.safetensors","loss":"loss","values":[{}],"nodes":[{}]}})",
      o.name, o.name, fmt::join(values_json(o), ","), fmt::join(nodes_json(o), ","));
  return path;
}

}  // namespace mutwo::captured_head
