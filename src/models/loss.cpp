// The models' cross-entropy loss (see loss.h).
#include "models/loss.h"

namespace mutwo::models {

ir::ValueId linear_cross_entropy_loss(ops::Builder& b, ir::ValueId hidden, ir::ValueId weight, ir::ValueId bias,
                                      ir::ValueId targets) {
  std::vector<ir::ValueId> in{hidden, weight, targets};
  if (bias != ir::kNoValue) in.push_back(bias);
  auto outs = b.call("linear_cross_entropy", in, {{"chunk_rows", int64_t{0}}, {"ignore_index", int64_t{-100}}}, "loss");
  b.graph().rename(outs[1], "loss.logsumexp");  // (N)
  return outs[0];
}

ir::ValueId cross_entropy_loss(ops::Builder& b, ir::ValueId scores, ir::ValueId targets, CrossEntropyForm form) {
  if (form == CrossEntropyForm::fused) {
    auto outs = b.call("cross_entropy", {scores, targets}, {{"ignore_index", int64_t{-100}}}, "loss");
    b.graph().rename(outs[1], "loss.logsumexp");  // (N)
    return outs[0];
  }
  ir::ValueId logp = b.op("log_softmax", {scores}, {{"dim", int64_t{1}}}, "loss.log_softmax");
  auto outs = b.call("nll_loss", {logp, targets}, {{"reduction", int64_t{1}}, {"ignore_index", int64_t{-100}}}, "loss");
  b.graph().rename(outs[1], "loss.total_weight");
  return outs[0];
}

}  // namespace mutwo::models
