// Shape inference helpers (see infer.h).
#include "ops/infer.h"

#include <algorithm>

namespace mutwo::ops::infer {

void require_float(const TensorType& t, std::string_view what) {
  MUTWO_CHECK(ir::is_floating(t.dtype), "{} must be a floating-point tensor, got {}", what, ir::to_string(t));
}

void require_dtype(const TensorType& t, DType d, std::string_view what) {
  MUTWO_CHECK(t.dtype == d, "{} must have element type {}, got {}", what, ir::to_string(d), ir::to_string(t));
}

void require_same_dtype(const TensorType& a, const TensorType& b, std::string_view what) {
  MUTWO_CHECK(a.dtype == b.dtype, "{}: element types differ ({} and {}); insert a cast", what, ir::to_string(a),
              ir::to_string(b));
}

void require_rank(const TensorType& t, int64_t rank, std::string_view what) {
  MUTWO_CHECK(t.rank() == rank, "{} must have {} dimensions, got {}", what, rank, ir::to_string(t));
}

void require_shape(const TensorType& t, const Shape& s, std::string_view what) {
  MUTWO_CHECK(t.shape == s, "{} must have shape {}, got {}", what, ir::shape_string(s), ir::to_string(t));
}

Types same_as_input0(const InferArgs& a) {
  require_float(a.input(0), "input");
  return {a.input(0)};
}

Types pair_same_shape(const InferArgs& a) {
  require_float(a.input(0), "gradient");
  require_shape(a.input(1), a.input(0).shape, "saved tensor");
  require_same_dtype(a.input(0), a.input(1), "gradient and saved tensor");
  return {a.input(0)};
}

Shape broadcast(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MUTWO_CHECK(da == db || da == 1 || db == 1, "shapes {} and {} do not broadcast (dimension {}: {} vs {})",
                ir::shape_string(a), ir::shape_string(b), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t dim(int64_t d, int64_t rank, std::string_view what) {
  int64_t r = d < 0 ? d + rank : d;
  MUTWO_CHECK(r >= 0 && r < std::max<int64_t>(rank, 1), "{}: dimension {} is out of range for rank {}", what, d,
              rank);
  return r;
}

std::vector<int64_t> reduce_dims(const ir::Attrs& attrs, int64_t rank) {
  std::vector<int64_t> dims;
  if (attrs.has("dims"))
    for (int64_t d : attrs.ints("dims")) dims.push_back(dim(d, rank, "reduction"));
  if (dims.empty())
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  std::sort(dims.begin(), dims.end());
  MUTWO_CHECK(std::adjacent_find(dims.begin(), dims.end()) == dims.end(), "reduction: a dimension is repeated");
  return dims;
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    bool reduced = std::binary_search(dims.begin(), dims.end(), d);
    if (!reduced) out.push_back(s[static_cast<size_t>(d)]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

}  // namespace mutwo::ops::infer
