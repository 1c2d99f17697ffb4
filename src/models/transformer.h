// Building blocks shared by the BERT and GPT builders (bert.cpp, gpt.cpp):
// parameters named by module path, linear, LayerNorm, dropout and eager
// multi-head attention, each a few nodes of the op table.
#pragma once

#include <cmath>
#include <string>
#include <string_view>

#include "ops/builder.h"
#include "support/error.h"

namespace mutwo::models::transformer {

struct Blocks {
  ops::Builder& b;
  ir::DType dtype;
  double dropout;  // probability of every dropout of the model; 0: no dropout nodes at all

  std::string here(std::string_view name) const { return b.scope + "." + std::string(name); }

  // A parameter named "<scope>.<name>".
  ir::ValueId param(std::string_view name, ir::Shape shape, ir::Init init) {
    return b.input(here(name), ir::TensorType{std::move(shape), dtype}, ir::Role::parameter, init);
  }

  // torch.nn.Linear(in, out) in the current scope: weight (out, in) ~ N(0, stddev), bias 0.
  ir::ValueId linear(ir::ValueId x, int64_t in, int64_t out, double stddev) {
    ir::ValueId w = param("weight", {out, in}, {ir::Init::normal, 0, stddev});
    ir::ValueId bias = param("bias", {out}, {ir::Init::zeros});
    return b.op("linear", {x, w, bias}, {}, here("out"));  // (..., out)
  }

  // torch.nn.LayerNorm(c, eps) in the current scope: weight 1, bias 0.
  ir::ValueId layer_norm(ir::ValueId x, int64_t c, double eps) {
    ir::ValueId w = param("weight", {c}, {ir::Init::ones});
    ir::ValueId bias = param("bias", {c}, {ir::Init::zeros});
    auto outs = b.call("layer_norm", {x, w, bias}, {{"eps", eps}}, here("out"));  // y (..., c); mean, rstd (..., 1)
    b.graph().rename(outs[1], b.graph().unique_name(here("mean")));
    b.graph().rename(outs[2], b.graph().unique_name(here("rstd")));
    return outs[0];
  }

  // torch.nn.Dropout(p) as a random mask (recomputed by replaying the
  // generator) and a pointwise mask-and-scale.
  ir::ValueId drop(ir::ValueId x, std::string_view name) {
    if (dropout <= 0) return x;
    ir::ValueId mask = b.op("dropout_mask", {x}, {{"p", dropout}}, here(std::string(name) + "_mask"));
    return b.op("dropout_apply", {x, mask}, {{"p", dropout}}, here(name));
  }

  // Eager multi-head attention, as Hugging Face's eager BERT and GPT-2 do it:
  // q, k, v (B, T, C), contiguous -> context (B, T, C).
  //   heads: view (B, T, H, D), permute to (B, H, T, D)
  //   softmax(q k^T / sqrt(D) [causal mask]) -> dropout -> @ v -> (B, T, H, D) -> (B, T, C)
  // padding (B, T) i64, optional: keys where it is 0 get weight 0 (padding_mask_fill).
  ir::ValueId attention(ir::ValueId q, ir::ValueId k, ir::ValueId v, int64_t heads, bool causal,
                        ir::ValueId padding = ir::kNoValue) {
    const ir::Shape s = b.shape(q);
    MUTWO_ASSERT(s.size() == 3 && s[2] % heads == 0, "attention: bad q {}", ir::shape_string(s));
    const int64_t B = s[0], T = s[1], C = s[2], D = C / heads;
    auto split_heads = [&](ir::ValueId x, const std::string& name) {
      ir::ValueId r = b.op("reshape", {x}, {{"shape", ir::Shape{B, T, heads, D}}}, here(name + "_heads"));  // (B, T, H, D)
      return b.op("permute", {r}, {{"dims", ir::Shape{0, 2, 1, 3}}}, here(name + "_t"));                     // (B, H, T, D)
    };
    ir::ValueId qh = split_heads(q, "query"), kh = split_heads(k, "key"), vh = split_heads(v, "value");
    ir::ValueId scores = b.op("matmul", {qh, kh}, {{"transpose_b", int64_t{1}}}, here("scores"));  // (B, H, T, T)
    scores = b.op("scale", {scores}, {{"alpha", 1.0 / std::sqrt(static_cast<double>(D))}}, here("scaled"));
    if (causal) scores = b.op("causal_mask_fill", {scores}, {}, here("masked"));
    if (padding != ir::kNoValue) scores = b.op("padding_mask_fill", {scores, padding}, {}, here("padding_masked"));
    ir::ValueId probs = b.op("softmax", {scores}, {{"dim", int64_t{3}}}, here("probs"));  // (B, H, T, T)
    probs = drop(probs, "attn_dropout");
    ir::ValueId ctx = b.op("matmul", {probs, vh}, {}, here("context"));                // (B, H, T, D)
    ctx = b.op("permute", {ctx}, {{"dims", ir::Shape{0, 2, 1, 3}}}, here("context_t"));  // (B, T, H, D), a view
    ctx = b.op("contiguous", {ctx}, {}, here("context_c"));                              // (B, T, H, D)
    return b.op("reshape", {ctx}, {{"shape", ir::Shape{B, T, C}}}, here("merged"));      // (B, T, C)
  }
};

// The checks every transformer config shares, with messages naming the option.
inline void check_sizes(std::string_view model, int64_t batch, int64_t seq, int64_t max_positions, int64_t hidden,
                        int64_t heads, double dropout) {
  MUTWO_CHECK(batch > 0, "{}: batch must be positive, got {}", model, batch);
  MUTWO_CHECK(seq > 0 && seq <= max_positions, "{}: sequence length must be in 1..{} (its position table), got {}",
              model, max_positions, seq);
  MUTWO_CHECK(hidden > 0 && heads > 0 && hidden % heads == 0, "{}: hidden size {} is not a multiple of {} heads",
              model, hidden, heads);
  MUTWO_CHECK(dropout >= 0 && dropout < 1, "{}: dropout must be in [0, 1), got {}", model, dropout);
}

}  // namespace mutwo::models::transformer
