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
  std::optional<int64_t> pad;         // BERT: the last `pad` positions of each sequence are padding (default 0)
  std::optional<std::string> head;    // BERT: "mlm" (default) or "none"
  ir::DType dtype = ir::DType::f32;
  // BERT, GPT-2, transformer-lm: the vocabulary head and its loss as linear +
  // cross_entropy, the logits (N, V) a value, instead of linear_cross_entropy
  // (chunked: the logits never whole). For tests and comparisons.
  bool whole_logits = false;
};

// The models `--model` accepts, with one line each, and the batch the
// command line uses when --batch is not given.
struct ModelInfo {
  std::string name;
  std::string about;
  int64_t batch = 64;
};
const std::vector<ModelInfo>& model_list();
// The command line's batch for `name` when --batch is not given (64 for a name
// the registry does not know, whose build then fails naming the known ones).
int64_t default_batch(const std::string& name);

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

// ResNet-18/34/50/101/152 as torchvision builds them (BasicBlock for 18 and 34,
// Bottleneck for the rest), trained with cross-entropy. Value names equal
// torchvision's state_dict keys (conv1.weight, layer1.0.bn1.running_mean, ...);
// each block's nodes have scope "layerK.i". Batch-norm running statistics are
// buffers. Synthetic inputs: images ~ N(0, 1) (B, 3, H, W), labels uniform.
struct ResnetConfig {
  int64_t depth = 50;  // 18, 34, 50, 101 or 152
  int64_t batch = 32;
  int64_t image_size = 224;
  int64_t classes = 1000;
  double bn_momentum = 0.1;  // nn.BatchNorm2d's defaults
  double bn_eps = 1e-5;
  ir::DType dtype = ir::DType::f32;
};
Model build_resnet(const ResnetConfig& c);

// BERT pre-training as Hugging Face's BertForMaskedLM builds it (eager
// attention, exact gelu, no pooler): value names equal its state_dict keys
// (bert.embeddings.word_embeddings.weight, bert.encoder.layer.3.attention.self.query.weight,
// cls.predictions.bias); the MLM decoder reuses the word embedding (tied: one
// parameter used twice). Loss: cross-entropy over every position with labels =
// the input ids, with the decoder in one linear_cross_entropy. Synthetic ids
// uniform over the vocabulary, token types 0.
// Weights ~ N(0, 0.02), biases 0, LayerNorm 1 and 0 (HF zeroes the padding row
// of the word embedding too; mutwo's initialisers cannot, which changes nothing
// measured). bert-tiny/mini/small/medium/base/large: see bert_config.
struct BertConfig {
  std::string name = "bert-base";
  int64_t batch = 8;
  int64_t seq = 128;
  int64_t vocab = 30522;
  int64_t max_positions = 512;
  int64_t type_vocab = 2;
  int64_t hidden = 768;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t intermediate = 3072;
  double dropout = 0.1;  // embeddings, attention probabilities, hidden states
  double eps = 1e-12;    // LayerNorm
  // The last `pad` positions of every sequence are padding: an attention_mask
  // (B, T) of 1s then 0s (HF's convention, held in the graph by int_constant)
  // gives them weight 0 in every attention, and the MLM loss ignores them.
  int64_t pad = 0;
  // false: no MLM head; the loss is the sum of the encoder's last hidden state
  // (the original study's last_hidden_state.sum()), padded positions included.
  bool mlm_head = true;
  ir::DType dtype = ir::DType::f32;
  bool whole_logits = false;  // see ModelOptions
};
// The named size (bert-tiny ... bert-large) with the options applied; UserError otherwise.
BertConfig bert_config(const ModelOptions& o);
Model build_bert(const BertConfig& c);

// GPT-2 as Hugging Face's GPT2LMHeadModel builds it (eager attention, gelu
// tanh approximation, lm_head tied to the token embedding), value names its
// state_dict keys (transformer.h.0.attn.c_attn.weight, ...). HF's Conv1D
// weights are (in, out); mutwo stores them (out, in) and uses linear: the same
// parameter count and arithmetic. Loss: next-token cross-entropy (labels =
// ids shifted left, the last position ignored, as HF's causal-LM loss), with
// lm_head in one linear_cross_entropy.
// transformer-lm is the same decoder at a small size (see gpt_config).
struct GptConfig {
  std::string name = "gpt2-small";
  int64_t batch = 8;
  int64_t seq = 1024;
  int64_t vocab = 50257;
  int64_t max_positions = 1024;
  int64_t hidden = 768;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t intermediate = 3072;
  double dropout = 0.1;  // embeddings, attention probabilities, residual branches
  double eps = 1e-5;     // LayerNorm
  // A text file: the input ids are then one fixed batch of `batch` windows of
  // `seq` bytes at offsets drawn with data_seed, held in the graph
  // (int_constant) and the same every step. Empty: synthetic ids.
  std::string data;
  uint64_t data_seed = 0;
  ir::DType dtype = ir::DType::f32;
  bool whole_logits = false;  // see ModelOptions
};
// gpt2-small, gpt2-medium or transformer-lm with the options applied; UserError otherwise.
GptConfig gpt_config(const ModelOptions& o);
Model build_gpt(const GptConfig& c);

}  // namespace mutwo::models
