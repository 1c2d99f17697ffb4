// The model registry behind --model.
#include <algorithm>

#include "models/model.h"
#include "support/error.h"

namespace mutwo::models {

const std::vector<ModelInfo>& model_list() {
  static const std::vector<ModelInfo> list = {
      {"mlp", "784-512-512-10 MLP, relu, dropout 0.1, cross-entropy (synthetic MNIST-sized data)"},
      {"resnet-18", "torchvision resnet18 (11.7M parameters), cross-entropy; images 224 and 1000 classes by default"},
      {"resnet-34", "torchvision resnet34 (21.8M parameters)"},
      {"resnet-50", "torchvision resnet50 (25.6M parameters, Bottleneck blocks)"},
      {"resnet-101", "torchvision resnet101 (44.5M parameters)"},
      {"resnet-152", "torchvision resnet152 (60.2M parameters)"},
      {"bert-tiny", "BERT masked LM (HF BertForMaskedLM) L2 H128 A2 (4.4M parameters); seq 128, dropout 0.1 by default"},
      {"bert-mini", "BERT masked LM L4 H256 A4 (11.2M parameters)"},
      {"bert-small", "BERT masked LM L4 H512 A8 (28.8M parameters)"},
      {"bert-medium", "BERT masked LM L8 H512 A8 (41.4M parameters)"},
      {"bert-base", "BERT masked LM L12 H768 A12 (109.5M parameters)"},
      {"bert-large", "BERT masked LM L24 H1024 A16 (335.2M parameters)"},
      {"gpt2-small", "GPT-2 causal LM (HF GPT2LMHeadModel) L12 H768 A12 (124.4M parameters); seq 1024 by default"},
      {"gpt2-medium", "GPT-2 causal LM L24 H1024 A16 (354.8M parameters)"},
      {"transformer-lm", "small byte-level decoder LM, L2 H32 A2, seq 20, batch 256; trains on a text file (mutwo train --data FILE)", 256},
  };
  return list;
}

int64_t default_batch(const std::string& name) {
  for (const ModelInfo& m : model_list())
    if (m.name == name) return m.batch;
  return 64;
}

Model build_model(const ModelOptions& o) {
  MUTWO_CHECK(o.name.rfind("bert-", 0) == 0 || (!o.pad && !o.head), "{}: --pad and --head are BERT options", o.name);
  if (o.name == "mlp") {
    MlpConfig c;
    c.batch = o.batch;
    c.dtype = o.dtype;
    if (o.dropout) c.dropout = *o.dropout;
    if (o.classes) c.classes = *o.classes;
    return build_mlp(c);
  }
  if (o.name.rfind("resnet-", 0) == 0) {  // resnet-18, -34, -50, -101, -152
    ResnetConfig c;
    const std::string depth = o.name.substr(7);
    MUTWO_CHECK(depth == "18" || depth == "34" || depth == "50" || depth == "101" || depth == "152",
                "unknown model '{}'; the ResNets are resnet-18, resnet-34, resnet-50, resnet-101 and resnet-152",
                o.name);
    MUTWO_CHECK(!o.dropout, "{} has no dropout; leave --dropout unset", o.name);
    MUTWO_CHECK(!o.seq, "{} takes images, not sequences; use --image-size instead of --seq", o.name);
    c.depth = std::stoll(depth);
    c.batch = o.batch;
    c.dtype = o.dtype;
    if (o.image_size) c.image_size = *o.image_size;
    if (o.classes) c.classes = *o.classes;
    return build_resnet(c);
  }
  if (o.name.rfind("bert-", 0) == 0) return build_bert(bert_config(o));
  if (o.name.rfind("gpt2-", 0) == 0 || o.name == "transformer-lm") return build_gpt(gpt_config(o));
  std::vector<std::string> names;
  for (const auto& m : model_list()) names.push_back(m.name);
  MUTWO_FAIL("unknown model '{}'; known models: {}", o.name, fmt::join(names, ", "));
}

}  // namespace mutwo::models
