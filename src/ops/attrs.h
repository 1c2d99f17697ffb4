// Node attribute readers that an op's row (shape inference, FLOPs) and its
// kernel (src/kernels) both use, so that the two read an attribute and its
// default one way. ATen-free; each is defined in its family's row file.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace mutwo::ops {

// aten.cpp: a tensor argument of the generic op's `args` ("%i": node input
// i, docs/step-file.md), i; nullopt for anything else.
std::optional<size_t> aten_input_ref(std::string_view s);

// elementwise.cpp: gelu's {approximate}, "none" (the default) or "tanh".
std::string gelu_mode(const ir::Node& n);

// nn.cpp: nll_loss's {reduction}: 0 none, 1 mean (the default), 2 sum.
int64_t nll_reduction(const ir::Node& n);
// nn.cpp: linear_cross_entropy's rows per chunk of logits, for `rows` rows
// over a vocabulary of `vocab` entries of `elem_bytes`: {chunk_rows} where set
// (> 0), else about kVocabChunkBytes of logits; rounded down to a multiple of
// kVocabBlockRows (at least one block), and at most `rows`. The backward adds
// the weight's (and bias's) gradient block by block of kVocabBlockRows rows, in
// row order, whatever the chunk: gradients are the same bits at every chunk size.
inline constexpr int64_t kVocabBlockRows = 32;
inline constexpr int64_t kVocabChunkBytes = int64_t{32} << 20;
int64_t vocab_chunk_rows(const ir::Node& n, int64_t rows, int64_t vocab, int64_t elem_bytes);
// nn.cpp: the dtype linear_cross_entropy reduces its logits in, {logits_dtype}:
// "f32" for a bf16 or f16 head whose logits are upcast before the loss (Hugging
// Face's `logits.float()`); absent, the hidden state's `hidden`.
ir::DType vocab_logits_dtype(const ir::Node& n, ir::DType hidden);

// optim.cpp: what each input list of an optimizer step holds, in input order.
using OptimLists = std::vector<std::string_view>;
OptimLists sgd_lists(const ir::Attrs& a);   // the momentum buffers only with momentum != 0
OptimLists adam_lists(const ir::Attrs& a);
// A node's lists if it is a multi-tensor optimizer step (sgd_step, adam_step),
// else none: the one test of "an optimizer node" the passes share.
OptimLists optimizer_lists(const ir::Node& n);
// The optimizer node `n` over the parameters at `params` alone (positions in
// its lists, in the order given): every list cut to those entries, the rest of
// the node as it is. The arithmetic per parameter is the same.
ir::Node optimizer_part(const ir::Node& n, const std::vector<size_t>& params);
// Those parameters' share of `n`'s parameter bytes (of its time, as the
// rewrites that split it charge it).
double optimizer_share(const ir::Graph& g, const ir::Node& n, const std::vector<size_t>& params);

// conv.cpp: a spatial attribute of two entries (stride, padding, dilation,
// kernel); `dflt` when absent. Throws UserError for a bad length or a value below `min`.
ir::Shape pair_attr(const ir::Node& n, std::string_view key, ir::Shape dflt, int64_t min);
ir::Shape stride_of(const ir::Node& n);    // default [1, 1]
ir::Shape padding_of(const ir::Node& n);   // default [0, 0]
ir::Shape dilation_of(const ir::Node& n);  // default [1, 1]
// output_mask [input, weight, bias] of a backward node: which gradients it makes.
std::array<bool, 3> output_mask(const ir::Node& n);

// attention.cpp: embedding's {padding_idx} (-1, the default: none); layer_norm's
// {eps} (default 1e-5); layer_norm_backward's {mask}: [dx, dweight, dbias].
int64_t padding_idx(const ir::Node& n);
double ln_eps(const ir::Node& n);
std::array<bool, 3> ln_mask(const ir::Node& n);

// comm.cpp: a data-parallel node's {world} (at least 1); a bucket's tensor
// shapes, {shapes} = each tensor's rank then its dimensions; a bucket's element
// count padded to a multiple of the world size (what a sharded bucket holds).
int64_t world_of(const ir::Node& n);
std::vector<ir::Shape> bucket_shapes(const ir::Node& n);
std::vector<int64_t> encode_shapes(const std::vector<ir::Shape>& shapes);
int64_t padded_numel(int64_t numel, int64_t world);

}  // namespace mutwo::ops
