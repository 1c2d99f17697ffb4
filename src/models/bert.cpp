// BERT for masked-LM pre-training, as Hugging Face's BertForMaskedLM (eager
// attention, no pooler, decoder tied to the word embedding), in the sizes of
// Google's BERT release: bert-tiny (L2 H128 A2) to bert-large (L24 H1024 A16).
#include "models/loss.h"
#include "models/model.h"
#include "models/transformer.h"
#include "support/error.h"

namespace mutwo::models {

using ir::Role;
using ir::TensorType;
using ir::ValueId;

BertConfig bert_config(const ModelOptions& o) {
  struct Size {
    const char* name;
    int64_t layers, hidden, heads;
  };
  static const Size sizes[] = {{"bert-tiny", 2, 128, 2},   {"bert-mini", 4, 256, 4},  {"bert-small", 4, 512, 8},
                               {"bert-medium", 8, 512, 8}, {"bert-base", 12, 768, 12}, {"bert-large", 24, 1024, 16}};
  BertConfig c;
  const Size* size = nullptr;
  for (const Size& s : sizes)
    if (o.name == s.name) size = &s;
  MUTWO_CHECK(size != nullptr,
              "unknown model '{}'; the BERTs are bert-tiny, bert-mini, bert-small, bert-medium, bert-base and bert-large",
              o.name);
  MUTWO_CHECK(!o.classes, "{}: --classes does not apply (its vocabulary of {} is the class count)", o.name, c.vocab);
  MUTWO_CHECK(!o.image_size, "{} takes token sequences; use --seq, not --image-size", o.name);
  MUTWO_CHECK(o.data.empty(), "{}: --data is for transformer-lm and gpt2-*; BERT trains on synthetic token ids", o.name);
  c.name = o.name;
  c.layers = size->layers;
  c.hidden = size->hidden;
  c.heads = size->heads;
  c.intermediate = 4 * size->hidden;
  c.batch = o.batch;
  if (o.seq) c.seq = *o.seq;
  if (o.dropout) c.dropout = *o.dropout;
  c.dtype = o.dtype;
  c.whole_logits = o.whole_logits;
  if (o.pad) c.pad = *o.pad;
  if (o.head) {
    MUTWO_CHECK(*o.head == "mlm" || *o.head == "none", "{}: --head must be mlm or none, got '{}'", o.name, *o.head);
    c.mlm_head = *o.head == "mlm";
  }
  return c;
}

namespace {

constexpr double kInitStd = 0.02;  // initializer_range

// The embeddings: word, token type and position, summed, normalized, dropped
// out. Returns the word table (the decoder ties to it) and h: (B, T, C).
std::pair<ValueId, ValueId> bert_embeddings(ops::Builder& b, transformer::Blocks& k, const BertConfig& c, ValueId ids,
                                            ValueId types) {
  const int64_t T = c.seq, C = c.hidden, V = c.vocab;
  ops::Builder::Scope s(b, "bert.embeddings");
  ValueId word = b.input("bert.embeddings.word_embeddings.weight", TensorType{{V, C}, c.dtype}, Role::parameter,
                         {ir::Init::normal, 0, kInitStd});
  ValueId pos_table = b.input("bert.embeddings.position_embeddings.weight", TensorType{{c.max_positions, C}, c.dtype},
                              Role::parameter, {ir::Init::normal, 0, kInitStd});
  ValueId type_table = b.input("bert.embeddings.token_type_embeddings.weight", TensorType{{c.type_vocab, C}, c.dtype},
                               Role::parameter, {ir::Init::normal, 0, kInitStd});
  ValueId pos_ids = b.op("arange", {}, {{"end", T}}, k.here("position_ids"));  // (T)
  ValueId emb = b.op("embedding", {word, ids}, {{"padding_idx", int64_t{0}}}, k.here("word"));  // (B, T, C)
  ValueId type_emb = b.op("embedding", {type_table, types}, {}, k.here("token_type"));         // (B, T, C)
  ValueId pos_emb = b.op("embedding", {pos_table, pos_ids}, {}, k.here("position"));           // (T, C)
  ValueId h = b.op("add", {emb, type_emb}, {}, k.here("sum"));
  h = b.op("add", {h, pos_emb}, {}, k.here("sum_pos"));  // (B, T, C)
  {
    ops::Builder::Scope ln(b, "LayerNorm");
    h = k.layer_norm(h, C, c.eps);
  }
  return {word, k.drop(h, "dropout")};
}

// Encoder layer l: self-attention (keys masked by `padding` when given) and
// the feed-forward block, each with its residual and LayerNorm. h: (B, T, C).
ValueId bert_layer(ops::Builder& b, transformer::Blocks& k, const BertConfig& c, int64_t l, ValueId h, ValueId padding) {
  const int64_t C = c.hidden;
  ops::Builder::Scope layer(b, fmt::format("bert.encoder.layer.{}", l));
  ValueId attn_out;
  {
    ops::Builder::Scope attention(b, "attention");
    ValueId ctx;
    {
      ops::Builder::Scope self(b, "self");
      auto proj = [&](const char* name) {
        ops::Builder::Scope p(b, name);
        return k.linear(h, C, C, kInitStd);  // (B, T, C)
      };
      ValueId q = proj("query"), key = proj("key"), v = proj("value");
      ctx = k.attention(q, key, v, c.heads, /*causal=*/false, padding);  // (B, T, C); probs dropout "attn_dropout"
    }
    ops::Builder::Scope out(b, "output");
    ValueId a;
    {
      ops::Builder::Scope dense(b, "dense");
      a = k.linear(ctx, C, C, kInitStd);
    }
    a = k.drop(a, "dropout");
    a = b.op("add", {a, h}, {}, k.here("residual"));
    ops::Builder::Scope ln(b, "LayerNorm");
    attn_out = k.layer_norm(a, C, c.eps);  // (B, T, C)
  }
  ValueId inter;
  {
    ops::Builder::Scope s(b, "intermediate");
    {
      ops::Builder::Scope dense(b, "dense");
      inter = k.linear(attn_out, C, c.intermediate, kInitStd);  // (B, T, 4C)
    }
    inter = b.op("gelu", {inter}, {{"approximate", std::string("none")}}, k.here("gelu"));
  }
  ops::Builder::Scope out(b, "output");
  ValueId o;
  {
    ops::Builder::Scope dense(b, "dense");
    o = k.linear(inter, c.intermediate, C, kInitStd);  // (B, T, C)
  }
  o = k.drop(o, "dropout");
  o = b.op("add", {o, attn_out}, {}, k.here("residual"));
  ops::Builder::Scope ln(b, "LayerNorm");
  return k.layer_norm(o, C, c.eps);  // (B, T, C)
}

// The masked-LM head on h (B, T, C) and its loss against the input ids (padded
// positions ignored), the decoder tied to the word table.
ValueId mlm_loss(ops::Builder& b, transformer::Blocks& k, const BertConfig& c, ValueId h, ValueId word, ValueId ids,
                 ValueId padding) {
  const int64_t B = c.batch, T = c.seq, C = c.hidden, V = c.vocab;
  ValueId t, bias;
  {
    ops::Builder::Scope s(b, "cls.predictions");
    {
      ops::Builder::Scope transform(b, "transform");
      {
        ops::Builder::Scope dense(b, "dense");
        t = k.linear(h, C, C, kInitStd);
      }
      t = b.op("gelu", {t}, {{"approximate", std::string("none")}}, k.here("gelu"));
      ops::Builder::Scope ln(b, "LayerNorm");
      t = k.layer_norm(t, C, c.eps);  // (B, T, C)
    }
    bias = k.param("bias", {V}, {ir::Init::zeros});  // cls.predictions.bias
  }

  // The targets, (B*T): padded positions -100, which the loss ignores.
  auto loss_labels = [&] {
    ValueId targets = ids;  // (B, T)
    if (padding != ir::kNoValue)
      targets = b.op("padding_mask_fill", {ids, padding}, {{"value", int64_t{-100}}}, "loss.targets");
    return b.op("reshape", {targets}, {{"shape", ir::Shape{B * T}}}, "loss.labels");
  };
  if (c.whole_logits) {
    ValueId logits;
    {
      ops::Builder::Scope s(b, "cls.predictions");
      logits = b.op("linear", {t, word, bias}, {}, k.here("decoder.out"));  // (B, T, V), weight tied
    }
    b.phase = ir::Phase::loss;
    ops::Builder::Scope s(b, "loss");
    ValueId flat = b.op("reshape", {logits}, {{"shape", ir::Shape{B * T, V}}}, "loss.logits");  // (B*T, V)
    return cross_entropy_loss(b, flat, loss_labels(), CrossEntropyForm::fused);
  }
  b.phase = ir::Phase::loss;
  ops::Builder::Scope s(b, "loss");
  ValueId flat = b.op("reshape", {t}, {{"shape", ir::Shape{B * T, C}}}, "loss.hidden");  // (B*T, C)
  return linear_cross_entropy_loss(b, flat, word, bias, loss_labels());                  // decoder tied to word
}

}  // namespace

Model build_bert(const BertConfig& c) {
  transformer::check_sizes(c.name, c.batch, c.seq, c.max_positions, c.hidden, c.heads, c.dropout);
  MUTWO_CHECK(c.layers > 0 && c.intermediate > 0 && c.vocab > 1 && c.type_vocab > 0,
              "{}: layers, intermediate size, vocabulary and token types must be positive", c.name);
  MUTWO_CHECK(c.pad >= 0 && c.pad < c.seq, "{}: --pad {} must leave at least one of the {} positions unpadded",
              c.name, c.pad, c.seq);
  const int64_t B = c.batch, T = c.seq, V = c.vocab;
  Model m;
  m.graph.name = c.name;
  ops::Builder b(m.graph);
  transformer::Blocks k{b, c.dtype, c.dropout};

  // input_ids, token_type_ids: (B, T)
  ValueId ids = b.input("input_ids", TensorType{{B, T}, ir::DType::i64}, Role::input,
                        {ir::Init::randint, 0, static_cast<double>(V)});
  ValueId types = b.input("token_type_ids", TensorType{{B, T}, ir::DType::i64}, Role::input, {ir::Init::zeros});
  // attention_mask: (B, T), 1 for tokens, 0 for the last `pad` positions (padding)
  ValueId padding = ir::kNoValue;
  if (c.pad > 0) {
    std::vector<int64_t> mask;
    mask.reserve(static_cast<size_t>(B * T));
    for (int64_t i = 0; i < B; ++i)
      for (int64_t t = 0; t < T; ++t) mask.push_back(t < T - c.pad ? 1 : 0);
    padding = b.op("int_constant", {}, {{"shape", ir::Shape{B, T}}, {"values", mask}}, "attention_mask");
  }

  auto [word, h] = bert_embeddings(b, k, c, ids, types);
  for (int64_t l = 0; l < c.layers; ++l) h = bert_layer(b, k, c, l, h, padding);

  if (!c.mlm_head) {  // the encoder alone: loss = last_hidden_state.sum()
    b.phase = ir::Phase::loss;
    m.loss = b.op("sum", {h}, {}, "loss");  // ()
    return m;
  }
  m.loss = mlm_loss(b, k, c, h, word, ids, padding);
  return m;
}

}  // namespace mutwo::models
