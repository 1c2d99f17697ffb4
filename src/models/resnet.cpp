// ResNet-18/34/50/101/152: torchvision's resnetNN as a forward graph, with its
// module names as value names (so a state_dict maps 1:1), its initialisation,
// batch norm in training mode and a cross-entropy loss.
#include <array>
#include <cmath>

#include "models/loss.h"
#include "models/model.h"
#include "ops/builder.h"
#include "support/error.h"

namespace mutwo::models {

namespace {

using ir::Role;
using ir::Shape;
using ir::TensorType;
using ir::ValueId;

struct Arch {
  bool bottleneck;                // Bottleneck (expansion 4) or BasicBlock (expansion 1)
  std::array<int64_t, 4> blocks;  // blocks in layer1..layer4
};

Arch arch_of(int64_t depth) {
  switch (depth) {
    case 18: return {false, {2, 2, 2, 2}};
    case 34: return {false, {3, 4, 6, 3}};
    case 50: return {true, {3, 4, 6, 3}};
    case 101: return {true, {3, 4, 23, 3}};
    case 152: return {true, {3, 8, 36, 3}};
    default: MUTWO_FAIL("resnet depth must be 18, 34, 50, 101 or 152, got {}", depth);
  }
}

class ResnetBuilder {
 public:
  ResnetBuilder(const ResnetConfig& c, ir::Graph& g) : c_(c), b_(g) {}

  ValueId build(ValueId images) {
    Arch arch = arch_of(c_.depth);
    ValueId h;
    {
      ops::Builder::Scope s(b_, "stem");
      h = conv(images, "conv1", 64, 7, 2, 3);  // (B, 64, H/2, W/2)
      h = bn(h, "bn1");
      h = b_.op("relu", {h}, {}, "relu");  // (B, 64, H/2, W/2)
      ir::Attrs pooling{{"kernel", Shape{3, 3}}, {"stride", Shape{2, 2}}, {"padding", Shape{1, 1}}};
      auto pool = b_.call("max_pool2d", {h}, pooling, "maxpool");
      b_.graph().rename(pool[1], "maxpool.indices");  // i64 (B, 64, H/4, W/4), kept for the backward pass
      h = pool[0];                                     // (B, 64, H/4, W/4)
    }
    const int64_t planes[4] = {64, 128, 256, 512};
    for (int64_t l = 0; l < 4; ++l) {
      for (int64_t i = 0; i < arch.blocks[static_cast<size_t>(l)]; ++i) {
        ops::Builder::Scope s(b_, fmt::format("layer{}.{}", l + 1, i));
        int64_t stride = l > 0 && i == 0 ? 2 : 1;  // layer2..4 halve H and W in their first block
        h = arch.bottleneck ? bottleneck(h, planes[l], stride) : basic_block(h, planes[l], stride);
      }
    }
    ops::Builder::Scope s(b_, "head");
    int64_t features = b_.shape(h)[1];  // 512 (BasicBlock) or 2048 (Bottleneck)
    h = b_.op("adaptive_avg_pool2d", {h}, {{"output_size", Shape{1, 1}}}, "avgpool");  // (B, C, 1, 1)
    h = b_.op("reshape", {h}, {{"shape", Shape{c_.batch, features}}}, "flatten");      // (B, C): torch.flatten(x, 1)
    // fc as nn.Linear initialises it: weight and bias ~ U(-1/sqrt(C), 1/sqrt(C)).
    double bound = 1.0 / std::sqrt(static_cast<double>(features));
    ir::Init init{ir::Init::uniform, -bound, bound};
    ValueId w = b_.input("fc.weight", TensorType{{c_.classes, features}, c_.dtype}, Role::parameter, init);
    ValueId bias = b_.input("fc.bias", TensorType{{c_.classes}, c_.dtype}, Role::parameter, init);
    return b_.op("linear", {h, w, bias}, {}, "fc.out");  // (B, classes)
  }

 private:
  // Full module path of a submodule of the current block ("layer1.0" + "conv1"); top level in the stem.
  std::string path(std::string_view name) const {
    bool top = b_.scope == "stem" || b_.scope.empty();
    return top ? std::string(name) : b_.scope + "." + std::string(name);
  }

  // A bias-free k x k conv (torchvision's conv3x3 / conv1x1 / the stem's 7x7),
  // weight ~ kaiming_normal_(mode="fan_out", nonlinearity="relu"): N(0, 2 / (out k k)).
  ValueId conv(ValueId x, std::string_view name, int64_t out, int64_t k, int64_t stride, int64_t pad) {
    int64_t in = b_.shape(x)[1];
    double sd = std::sqrt(2.0 / static_cast<double>(out * k * k));
    ValueId w = b_.input(path(name) + ".weight", TensorType{{out, in, k, k}, c_.dtype}, Role::parameter,
                         {ir::Init::normal, 0.0, sd});
    return b_.op("conv2d", {x, w}, {{"stride", Shape{stride, stride}}, {"padding", Shape{pad, pad}}},
                 path(name) + ".out");  // (B, out, H', W')
  }

  // nn.BatchNorm2d in training mode: weight 1, bias 0; running_mean 0 and
  // running_var 1 are buffers, which the batch_norm node updates in place (a
  // recomputed clone leaves them out, so they are updated once). torchvision's
  // num_batches_tracked buffer is omitted: with a set momentum it only counts
  // steps and changes no number.
  ValueId bn(ValueId x, std::string_view name) {
    std::string p = path(name);
    int64_t ch = b_.shape(x)[1];
    TensorType param{{ch}, c_.dtype};
    bool half = c_.dtype == ir::DType::f16 || c_.dtype == ir::DType::bf16;
    TensorType stats{{ch}, half ? ir::DType::f32 : c_.dtype};  // as ATen keeps them for half inputs
    ValueId w = b_.input(p + ".weight", param, Role::parameter, {ir::Init::ones});
    ValueId bias = b_.input(p + ".bias", param, Role::parameter, {ir::Init::zeros});
    ValueId mean = b_.input(p + ".running_mean", stats, Role::buffer, {ir::Init::zeros});
    ValueId var = b_.input(p + ".running_var", stats, Role::buffer, {ir::Init::ones});
    auto outs = b_.call("batch_norm", {x, w, bias, mean, var}, {{"eps", c_.bn_eps}, {"momentum", c_.bn_momentum}},
                        p + ".out");                      // y: x's shape; updates mean and var
    b_.graph().rename(outs[1], p + ".save_mean");    // (C)
    b_.graph().rename(outs[2], p + ".save_invstd");  // (C)
    return outs[0];
  }

  // The shortcut: identity, or downsample = conv1x1(stride) + batch norm when the shape changes.
  ValueId shortcut(ValueId x, int64_t out, int64_t stride) {
    if (stride == 1 && b_.shape(x)[1] == out) return x;
    ValueId d = conv(x, "downsample.0", out, 1, stride, 0);  // (B, out, H/stride, W/stride)
    return bn(d, "downsample.1");
  }

  // BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).
  ValueId basic_block(ValueId x, int64_t planes, int64_t stride) {
    ValueId h = conv(x, "conv1", planes, 3, stride, 1);  // (B, planes, H/stride, W/stride)
    h = b_.op("relu", {bn(h, "bn1")}, {}, path("relu1"));
    h = bn(conv(h, "conv2", planes, 3, 1, 1), "bn2");  // (B, planes, H/stride, W/stride)
    h = b_.op("add", {h, shortcut(x, planes, stride)}, {}, path("residual"));
    return b_.op("relu", {h}, {}, path("out"));
  }

  // Bottleneck (torchvision v1.5: the stride on the 3x3 conv), expansion 4:
  // 1x1 to `planes`, 3x3 (stride), 1x1 to 4 planes, plus the shortcut.
  ValueId bottleneck(ValueId x, int64_t planes, int64_t stride) {
    ValueId h = conv(x, "conv1", planes, 1, 1, 0);  // (B, planes, H, W)
    h = b_.op("relu", {bn(h, "bn1")}, {}, path("relu1"));
    h = conv(h, "conv2", planes, 3, stride, 1);  // (B, planes, H/stride, W/stride)
    h = b_.op("relu", {bn(h, "bn2")}, {}, path("relu2"));
    h = bn(conv(h, "conv3", 4 * planes, 1, 1, 0), "bn3");  // (B, 4 planes, H/stride, W/stride)
    h = b_.op("add", {h, shortcut(x, 4 * planes, stride)}, {}, path("residual"));
    return b_.op("relu", {h}, {}, path("out"));
  }

  const ResnetConfig& c_;
  ops::Builder b_;
};

}  // namespace

Model build_resnet(const ResnetConfig& c) {
  arch_of(c.depth);
  MUTWO_CHECK(c.batch > 0, "batch must be positive, got {}", c.batch);
  MUTWO_CHECK(c.classes > 1, "classes must be at least 2, got {}", c.classes);
  MUTWO_CHECK(c.image_size > 0, "image size must be positive, got {}", c.image_size);
  MUTWO_CHECK(ir::is_floating(c.dtype), "resnet needs a floating-point dtype, got {}", ir::to_string(c.dtype));
  Model m;
  m.graph.name = fmt::format("resnet-{}", c.depth);
  ResnetBuilder rb(c, m.graph);
  ops::Builder b(m.graph);
  // images: (B, 3, H, W), labels: (B)
  ValueId images = b.input("images", TensorType{{c.batch, 3, c.image_size, c.image_size}, c.dtype}, Role::input,
                           {ir::Init::normal, 0, 1});
  ValueId labels = b.input("labels", TensorType{{c.batch}, ir::DType::i64}, Role::input,
                           {ir::Init::randint, 0, static_cast<double>(c.classes)});
  ValueId logits = rb.build(images);  // (B, classes)

  b.phase = ir::Phase::loss;
  ops::Builder::Scope s(b, "loss");
  m.loss = cross_entropy_loss(b, logits, labels, CrossEntropyForm::two_ops);
  return m;
}

}  // namespace mutwo::models
