// The MLP: the foundation's small model (linear, relu/gelu, dropout, cross-entropy).
#include <cmath>

#include "models/loss.h"
#include "models/model.h"
#include "ops/builder.h"
#include "support/error.h"

namespace mutwo::models {

using ir::Role;
using ir::TensorType;
using ir::ValueId;

Model build_mlp(const MlpConfig& c) {
  MUTWO_CHECK(c.batch > 0, "batch must be positive, got {}", c.batch);
  MUTWO_CHECK(c.classes > 1, "classes must be at least 2, got {}", c.classes);
  MUTWO_CHECK(c.depth >= 1 && c.hidden > 0, "the MLP needs at least one hidden layer of positive width");
  MUTWO_CHECK(c.dropout >= 0 && c.dropout < 1, "dropout must be in [0, 1), got {}", c.dropout);
  Model m;
  m.graph.name = "mlp";
  ops::Builder b(m.graph);

  // x: (B, in), labels: (B)
  ValueId x = b.input("x", TensorType{{c.batch, c.in_features}, c.dtype}, Role::input, {ir::Init::normal, 0, 1});
  ValueId labels = b.input("labels", TensorType{{c.batch}, ir::DType::i64}, Role::input,
                           {ir::Init::randint, 0, static_cast<double>(c.classes)});

  auto linear = [&](ValueId h, int64_t in, int64_t out) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in));
    ir::Init init{ir::Init::uniform, -bound, bound};
    ValueId w = b.input(b.scope + ".weight", TensorType{{out, in}, c.dtype}, Role::parameter, init);
    ValueId bias = b.input(b.scope + ".bias", TensorType{{out}, c.dtype}, Role::parameter, init);
    return b.op("linear", {h, w, bias}, {}, b.scope + ".out");  // (B, out)
  };

  ValueId h = x;
  int64_t width = c.in_features;
  for (int64_t l = 0; l < c.depth; ++l) {
    ops::Builder::Scope s(b, fmt::format("fc{}", l + 1));
    h = linear(h, width, c.hidden);                                               // (B, hidden)
    h = b.op(c.activation, {h}, {}, b.scope + "." + c.activation);                // (B, hidden)
    if (c.dropout > 0) {
      ValueId mask = b.op("dropout_mask", {h}, {{"p", c.dropout}}, b.scope + ".dropout_mask");
      h = b.op("dropout_apply", {h, mask}, {{"p", c.dropout}}, b.scope + ".dropout");
    }
    width = c.hidden;
  }
  ValueId logits;
  {
    ops::Builder::Scope s(b, "head");
    logits = linear(h, width, c.classes);  // (B, classes)
  }
  b.phase = ir::Phase::loss;
  ops::Builder::Scope s(b, "loss");
  m.loss = cross_entropy_loss(b, logits, labels, CrossEntropyForm::two_ops);
  return m;
}

}  // namespace mutwo::models
