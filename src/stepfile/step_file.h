// The step file: a training step captured from PyTorch (python/mutwo/capture.py)
// as JSON plus a tensor file (docs/step-file.md). Loading validates every field,
// turns each ATen call into a node of the generic `aten` op, labels phases and
// roles from structure and appends mutwo's optimizer step: the result is a
// training-step graph like a zoo model's. ATen-free: the tensor file is only
// indexed here; runtime/ reads its bytes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "autodiff/autodiff.h"
#include "ir/graph.h"

namespace mutwo::stepfile {

inline constexpr int kVersion = 1;

// One tensor of a safetensors-layout file: where its bytes are.
struct TensorEntry {
  ir::DType dtype = ir::DType::f32;
  ir::Shape shape;
  int64_t offset = 0;  // from the start of the file
  int64_t bytes = 0;
};

// The header of a safetensors-layout file, checked against the file's size.
// Throws UserError naming the file and the entry that is wrong.
std::map<std::string, TensorEntry> read_tensor_index(const std::string& path);

// The start of a tensor file holding `tensors` in this order, C-contiguous
// and back to back (offset is ignored): the 8-byte header length and the
// header. The tensors' bytes follow it.
std::string tensor_file_header(const std::vector<std::pair<std::string, TensorEntry>>& tensors);

// True for a path that names a step file (".json") rather than IR text.
bool is_step_file(const std::string& path);

// How a step file becomes a training step.
struct LoadOptions {
  // The vocabulary head and its cross-entropy fused into linear_cross_entropy
  // (fuse_loss.h), so their logits never exist whole.
  bool fuse_loss = true;
};

// Loads `path` and its tensor file into a verified training-step graph ending
// in `optimizer`'s step. Parameter, buffer and input values take their
// qualified names ("layer1.0.conv1.weight", "input0"). Throws UserError naming
// the node or field at fault.
ir::Graph load_step(const std::string& path, const autodiff::OptimizerConfig& optimizer, const LoadOptions& options = {});

// What `--graph PATH` names (the CLI's run, profile and optimize; the fuzzer's
// loader, tests/fuzz/load.cpp): a step file (load_step) or IR text
// (optimize's rewritten.ir), parsed and verified. UserError naming the file.
ir::Graph load_graph_file(const std::string& path, const autodiff::OptimizerConfig& optimizer,
                          const LoadOptions& options = {});

// A module's step for mutwo.torch (python/mutwo/torch.py): the step file's
// `loss` is null, its `outputs` are what the module returns, each tangent
// (`of` an output) is the gradient of the user's loss with respect to that
// output, and the gradients (`of` a parameter or an input) are returned, not
// applied: no optimizer. The tensors come from the caller, not a file
// (values with init=data and no Graph::data_file).
struct ModuleStep {
  ir::Graph graph;                                          // outputs: `outputs`, then each gradient
  std::vector<ir::ValueId> primals;                         // parameters, buffers, inputs, in the file's order
  std::vector<ir::ValueId> constants;                       // tensors captured in the graph
  std::vector<ir::ValueId> outputs;                         // what the forward pass returns
  std::vector<std::pair<size_t, ir::ValueId>> tangents;     // (position in outputs, tangent value)
  std::vector<std::pair<ir::ValueId, ir::ValueId>> gradients;  // (parameter or input, its gradient)
};
// `text` is the step file's JSON; `source` names it in messages.
ModuleStep load_module_step(const std::string& text, const std::string& source);

}  // namespace mutwo::stepfile
