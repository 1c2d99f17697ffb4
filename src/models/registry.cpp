// The model registry behind --model.
#include <algorithm>

#include "models/model.h"
#include "support/error.h"

namespace mutwo::models {

const std::vector<ModelInfo>& model_list() {
  static const std::vector<ModelInfo> list = {
      {"mlp", "784-512-512-10 MLP, relu, dropout 0.1, cross-entropy (synthetic MNIST-sized data)"},
  };
  return list;
}

Model build_model(const ModelOptions& o) {
  if (o.name == "mlp") {
    MlpConfig c;
    c.batch = o.batch;
    c.dtype = o.dtype;
    if (o.dropout) c.dropout = *o.dropout;
    if (o.classes) c.classes = *o.classes;
    return build_mlp(c);
  }
  std::vector<std::string> names;
  for (const auto& m : model_list()) names.push_back(m.name);
  MUTWO_FAIL("unknown model '{}'; known models: {}", o.name, fmt::join(names, ", "));
}

}  // namespace mutwo::models
