// Model builders: each returns a forward graph (forward and loss phases) whose
// persistent values carry their initialisers, and the scalar loss.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace mutwo::models {

struct Model {
  ir::Graph graph;
  ir::ValueId loss = ir::kNoValue;
};

// Options every model understands; each family documents its own defaults.
struct ModelOptions {
  std::string name = "mlp";
  int64_t batch = 64;
  std::optional<double> dropout;   // family default if unset
  std::optional<int64_t> classes;  // family default if unset
  std::optional<int64_t> image_size;  // ResNet (default 224)
  std::optional<int64_t> seq;         // BERT (default 128), GPT-2 (1024), transformer-lm (20)
  std::string data;                   // transformer-lm: a text file trained on as byte tokens
  ir::DType dtype = ir::DType::f32;
};

// The models `--model` accepts, with one line each.
struct ModelInfo {
  std::string name;
  std::string about;
};
const std::vector<ModelInfo>& model_list();

// Builds a model; UserError for an unknown name (listing the known ones) or bad options.
Model build_model(const ModelOptions& options);

// MLP: `depth` hidden layers of linear -> activation -> dropout, then a linear
// classifier, log_softmax and nll_loss (cross-entropy). Synthetic inputs:
// x ~ N(0, 1), labels uniform over the classes. Weights as torch.nn.Linear
// initialises them: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
struct MlpConfig {
  int64_t batch = 64;
  int64_t in_features = 784;
  int64_t hidden = 512;
  int64_t depth = 2;
  int64_t classes = 10;
  double dropout = 0.1;
  std::string activation = "relu";  // or "gelu"
  ir::DType dtype = ir::DType::f32;
};
Model build_mlp(const MlpConfig& c);

}  // namespace mutwo::models
