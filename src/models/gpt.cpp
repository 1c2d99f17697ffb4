// GPT-2 as Hugging Face's GPT2LMHeadModel (gpt2-small, gpt2-medium) and
// transformer-lm, a small byte-level decoder of the same design, trained on a
// text file (--data) or on synthetic tokens. Both are built by build_gpt.
//
// transformer-lm (the seed's Penn Treebank experiment, made byte-level):
//   vocabulary 256 (bytes), hidden 32, 2 layers of 2 heads, MLP 128, LayerNorm
//   eps 1e-5, gelu tanh, learned positions for exactly `seq` positions,
//   dropout 0.1, output layer tied to the token embedding; sequence 20 and
//   batch 256 by default. 34,304 parameters at seq 20.
#include <fstream>
#include <iterator>
#include <random>

#include "models/loss.h"
#include "models/model.h"
#include "models/transformer.h"
#include "support/error.h"
#include "support/files.h"

namespace mutwo::models {

using ir::Role;
using ir::TensorType;
using ir::ValueId;

GptConfig gpt_config(const ModelOptions& o) {
  GptConfig c;
  if (o.name == "gpt2-small") {
    // the defaults: L12 H768 A12, vocabulary 50257, 1024 positions
  } else if (o.name == "gpt2-medium") {
    c.layers = 24;
    c.hidden = 1024;
    c.heads = 16;
    c.intermediate = 4096;
  } else if (o.name == "transformer-lm") {
    c.vocab = 256;
    c.hidden = 32;
    c.layers = 2;
    c.heads = 2;
    c.intermediate = 128;
    c.seq = 20;
  } else {
    MUTWO_FAIL("unknown model '{}'; the decoders are gpt2-small, gpt2-medium and transformer-lm", o.name);
  }
  MUTWO_CHECK(!o.classes, "{}: --classes does not apply (its vocabulary of {} is the class count)", o.name, c.vocab);
  MUTWO_CHECK(!o.image_size, "{} takes token sequences; use --seq, not --image-size", o.name);
  c.name = o.name;
  c.batch = o.batch;
  if (o.seq) c.seq = *o.seq;
  if (o.name == "transformer-lm") c.max_positions = c.seq;  // its position table covers the sequence exactly
  if (o.dropout) c.dropout = *o.dropout;
  c.data = o.data;
  c.dtype = o.dtype;
  c.whole_logits = o.whole_logits;
  return c;
}

namespace {

// `batch` windows of `seq` bytes of the file, at offsets drawn uniformly with
// `seed`: the token ids of one fixed batch, row by row.
std::vector<int64_t> byte_windows(const std::string& path, int64_t batch, int64_t seq, uint64_t seed) {
  std::string bytes;
  try {
    bytes = read_file(path);  // a regular file of at most 1 GiB: never a device read without end
  } catch (const UserError& e) {
    MUTWO_FAIL("--data: {}", e.what());
  }
  const auto n = static_cast<int64_t>(bytes.size());
  MUTWO_CHECK(n >= seq, "--data {}: the file has {} bytes, fewer than one sequence of {}; use a longer file or a smaller --seq",
              path, n, seq);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> offset(0, n - seq);
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(batch * seq));
  for (int64_t i = 0; i < batch; ++i) {
    int64_t at = offset(rng);
    for (int64_t t = 0; t < seq; ++t) ids.push_back(static_cast<unsigned char>(bytes[static_cast<size_t>(at + t)]));
  }
  return ids;
}

}  // namespace

Model build_gpt(const GptConfig& c) {
  transformer::check_sizes(c.name, c.batch, c.seq, c.max_positions, c.hidden, c.heads, c.dropout);
  MUTWO_CHECK(c.layers > 0 && c.intermediate > 0 && c.vocab > 1,
              "{}: layers, intermediate size and vocabulary must be positive", c.name);
  MUTWO_CHECK(c.data.empty() || c.vocab >= 256, "{}: --data gives byte tokens 0..255, but the vocabulary has {}",
              c.name, c.vocab);
  const int64_t B = c.batch, T = c.seq, C = c.hidden, V = c.vocab;
  const double init_std = 0.02;                                                  // initializer_range
  const double proj_std = init_std / std::sqrt(2.0 * static_cast<double>(c.layers));  // HF: every c_proj.weight
  Model m;
  m.graph.name = c.name;
  ops::Builder b(m.graph);
  transformer::Blocks k{b, c.dtype, c.dropout};

  // input_ids: (B, T), synthetic or one fixed batch of byte windows of the file.
  // An if, not a conditional expression: GCC 12's ASan reported a
  // stack-use-after-scope when byte_windows threw inside the conditional's
  // arm (its cleanup of the attribute temporaries is mis-scoped; a false
  // positive), and the statement form says the same more plainly.
  ValueId ids;
  if (c.data.empty()) {
    ids = b.input("input_ids", TensorType{{B, T}, ir::DType::i64}, Role::input,
                  {ir::Init::randint, 0, static_cast<double>(V)});
  } else {
    std::vector<int64_t> windows = byte_windows(c.data, B, T, c.data_seed);
    ids = b.op("int_constant", {}, {{"shape", ir::Shape{B, T}}, {"values", std::move(windows)}}, "input_ids");
  }

  ValueId wte, h;
  {
    ops::Builder::Scope s(b, "transformer");
    wte = k.param("wte.weight", {V, C}, {ir::Init::normal, 0, init_std});
    ValueId wpe = k.param("wpe.weight", {c.max_positions, C}, {ir::Init::normal, 0, init_std});
    ValueId pos_ids = b.op("arange", {}, {{"end", T}}, k.here("position_ids"));  // (T)
    ValueId tok = b.op("embedding", {wte, ids}, {}, k.here("wte.out"));       // (B, T, C)
    ValueId pos = b.op("embedding", {wpe, pos_ids}, {}, k.here("wpe.out"));   // (T, C)
    h = b.op("add", {tok, pos}, {}, k.here("embeddings"));                     // (B, T, C)
    h = k.drop(h, "drop");

    for (int64_t l = 0; l < c.layers; ++l) {
      ops::Builder::Scope block(b, fmt::format("h.{}", l));
      ValueId a;
      {
        ops::Builder::Scope ln(b, "ln_1");
        a = k.layer_norm(h, C, c.eps);
      }
      {
        ops::Builder::Scope attn(b, "attn");
        ValueId qkv;
        {
          ops::Builder::Scope c_attn(b, "c_attn");
          qkv = k.linear(a, C, 3 * C, init_std);  // qkv: (B, T, 3C)
        }
        auto parts = b.call("split", {qkv}, {{"dim", int64_t{2}}, {"sizes", ir::Shape{C, C, C}}}, k.here("query"));
        b.graph().rename(parts[1], b.graph().unique_name(k.here("key")));
        b.graph().rename(parts[2], b.graph().unique_name(k.here("value")));
        a = k.attention(parts[0], parts[1], parts[2], c.heads, /*causal=*/true);  // (B, T, C)
        {
          ops::Builder::Scope c_proj(b, "c_proj");
          a = k.linear(a, C, C, proj_std);
        }
        a = k.drop(a, "resid_dropout");
      }
      h = b.op("add", {h, a}, {}, k.here("residual_attn"));  // (B, T, C)
      ValueId f;
      {
        ops::Builder::Scope ln(b, "ln_2");
        f = k.layer_norm(h, C, c.eps);
      }
      {
        ops::Builder::Scope mlp(b, "mlp");
        {
          ops::Builder::Scope c_fc(b, "c_fc");
          f = k.linear(f, C, c.intermediate, init_std);  // (B, T, 4C)
        }
        f = b.op("gelu", {f}, {{"approximate", std::string("tanh")}}, k.here("gelu"));
        {
          ops::Builder::Scope c_proj(b, "c_proj");
          f = k.linear(f, c.intermediate, C, proj_std);  // (B, T, C)
        }
        f = k.drop(f, "dropout");
      }
      h = b.op("add", {h, f}, {}, k.here("residual_mlp"));  // (B, T, C)
    }
    ops::Builder::Scope ln(b, "ln_f");
    h = k.layer_norm(h, C, c.eps);
  }
  ValueId logits = ir::kNoValue;
  if (c.whole_logits) {
    ops::Builder::Scope s(b, "lm_head");
    logits = b.op("linear", {h, wte}, {}, "lm_head.out");  // (B, T, V), weight tied to wte
  }

  b.phase = ir::Phase::loss;
  ops::Builder::Scope s(b, "loss");
  ValueId labels = b.op("shift_left", {ids}, {{"fill", int64_t{-100}}}, "loss.labels");         // (B, T)
  ValueId flat_labels = b.op("reshape", {labels}, {{"shape", ir::Shape{B * T}}}, "loss.labels_flat");  // (B*T)
  if (c.whole_logits) {
    ValueId flat = b.op("reshape", {logits}, {{"shape", ir::Shape{B * T, V}}}, "loss.logits");  // (B*T, V)
    m.loss = cross_entropy_loss(b, flat, flat_labels, CrossEntropyForm::fused);
    return m;
  }
  ValueId flat = b.op("reshape", {h}, {{"shape", ir::Shape{B * T, C}}}, "loss.hidden");  // (B*T, C)
  m.loss = linear_cross_entropy_loss(b, flat, wte, ir::kNoValue, flat_labels);          // lm_head tied to wte
  return m;
}

}  // namespace mutwo::models
