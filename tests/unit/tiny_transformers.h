// Tiny transformers for the tests: BERT's and GPT-2's structure at toy width
// (2 layers, hidden 32, 2 heads, vocabulary 50, batch 2, sequence 8), quick
// on the CPU (test_transformers.cpp, test_rng_replay.cpp).
#pragma once

#include "models/model.h"

namespace mutwo::testing {

// A tiny model of either family (BERT and GPT configs name these fields alike).
template <class Config>
Config tiny(const char* name, double dropout) {
  Config c;
  c.name = name;
  c.batch = 2;
  c.seq = 8;
  c.vocab = 50;
  c.max_positions = 16;
  c.hidden = 32;
  c.layers = 2;
  c.heads = 2;
  c.intermediate = 128;
  c.dropout = dropout;
  return c;
}
inline models::BertConfig tiny_bert(double dropout) { return tiny<models::BertConfig>("bert-test", dropout); }
inline models::GptConfig tiny_gpt(double dropout) { return tiny<models::GptConfig>("gpt2-test", dropout); }

}  // namespace mutwo::testing
