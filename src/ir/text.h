// The IR's text form: prints a graph and parses it back (a round trip), for
// golden tests, bug reports and `mutwo show`.
//
//   graph mlp
//   data "step.safetensors"        (only where values have init=data)
//   %x : f32[64,784] input
//   %fc1.weight : f32[256,784] parameter
//   %fc1.out : f32[64,256] activation = linear(%x, %fc1.weight, %fc1.bias) fwd scope=fc1
//   %loss : f32[] other, %loss.total_weight : f32[] other = nll_loss(%logp, %y) {reduction=1} loss
//   _ = sgd_step(%fc1.weight, %fc1.weight.grad, %fc1.weight.momentum) {lr=0.01, momentum=0.9} optim
//   outputs %loss
//
// Values without a producer (inputs, parameters, optimizer state, buffers) are
// declared on lines of their own, in order; `_` in an input list is an absent
// optional input, and `_ =` a node without outputs (an in-place update).
#pragma once

#include <string>
#include <string_view>

#include "ir/graph.h"

namespace mutwo::ir {

std::string print(const Graph& g);
std::string print_node(const Graph& g, const Node& n);

// Throws UserError("line N: ...") on malformed text. Types are taken as
// written; run the verifier to check them against the op table.
Graph parse(std::string_view text);

// The graph's identity for saved plans: a 64-bit FNV-1a hash of its text
// form, as 16 hex digits, with the tensor file's path left out (a captured
// step moved to another folder is the same step).
std::string fingerprint(const Graph& g);

}  // namespace mutwo::ir
