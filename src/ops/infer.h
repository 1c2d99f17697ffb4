// Helpers shared by the op rows' shape inference (ATen-free); the reduction
// kernels (src/kernels/shape.cpp) read their dims with reduce_dims too.
#pragma once

#include <string_view>

#include "ir/graph.h"
#include "ops/op.h"
#include "support/error.h"

namespace mutwo::ops::infer {

using ir::DType;
using ir::Shape;
using ir::TensorType;

// A floating-point element type this op supports (f32, f64; f16/bf16 on CUDA).
void require_float(const TensorType& t, std::string_view what);
void require_dtype(const TensorType& t, DType d, std::string_view what);
void require_same_dtype(const TensorType& a, const TensorType& b, std::string_view what);
void require_rank(const TensorType& t, int64_t rank, std::string_view what);
void require_shape(const TensorType& t, const Shape& s, std::string_view what);

// Shape inference of an op whose one output is like its floating input 0.
Types same_as_input0(const InferArgs& a);
// Of a pointwise backward op: inputs 0 (a gradient) and 1 (a saved tensor) of
// one shape and dtype; its output is like input 0.
Types pair_same_shape(const InferArgs& a);

// Numpy-style broadcast; throws UserError naming both shapes.
Shape broadcast(const Shape& a, const Shape& b);

// Normalises a possibly negative dimension against a rank.
int64_t dim(int64_t d, int64_t rank, std::string_view what);

// Dims of a reduction attribute ("dims"; empty = all), normalised and sorted.
std::vector<int64_t> reduce_dims(const ir::Attrs& attrs, int64_t rank);
Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim);

}  // namespace mutwo::ops::infer
