// Names and sizes of the IR's element types, phases and roles.
#include "ir/types.h"

#include <fmt/format.h>

#include "support/error.h"

namespace mutwo::ir {

namespace {
struct DTypeInfo {
  DType t;
  std::string_view name;
  int64_t size;
  bool floating;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::f32, "f32", 4, true},  {DType::f64, "f64", 8, true},  {DType::f16, "f16", 2, true},
    {DType::bf16, "bf16", 2, true}, {DType::i64, "i64", 8, false}, {DType::i32, "i32", 4, false},
    {DType::boolean, "bool", 1, false}, {DType::u8, "u8", 1, false},
};
constexpr std::string_view kPhases[] = {"fwd", "loss", "bwd", "optim", "recompute"};
constexpr std::string_view kRoles[] = {"input",           "parameter", "gradient", "activation",
                                       "optimizer_state", "buffer",    "other"};
}  // namespace

int64_t element_size(DType t) { return kDTypes[static_cast<int>(t)].size; }
std::string_view to_string(DType t) { return kDTypes[static_cast<int>(t)].name; }
bool is_floating(DType t) { return kDTypes[static_cast<int>(t)].floating; }

std::optional<DType> parse_dtype(std::string_view s) {
  for (const auto& d : kDTypes)
    if (d.name == s) return d.t;
  return std::nullopt;
}

int64_t TensorType::numel() const {
  // Overflow-checked: a shape no machine could hold (--batch 2^62) is the
  // user's error, not a wrapped-around size.
  constexpr int64_t kMaxBytes = int64_t{1} << 50;  // 1 PiB, so that bytes() cannot overflow either
  int64_t n = 1;
  for (int64_t d : shape)
    MUTWO_CHECK(d >= 0 && !__builtin_mul_overflow(n, d, &n) && n <= kMaxBytes,
                "a tensor of shape {} has more than 2^50 elements; lower the batch or the sizes", shape_string(shape));
  return n;
}

std::string shape_string(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ",")); }
std::string to_string(const TensorType& t) { return fmt::format("{}{}", to_string(t.dtype), shape_string(t.shape)); }

std::string_view to_string(Phase p) { return kPhases[static_cast<int>(p)]; }
std::string_view to_string(Role r) { return kRoles[static_cast<int>(r)]; }

std::optional<Phase> parse_phase(std::string_view s) {
  for (int i = 0; i < 5; ++i)
    if (kPhases[i] == s) return static_cast<Phase>(i);
  return std::nullopt;
}
std::optional<Role> parse_role(std::string_view s) {
  for (int i = 0; i < kNumRoles; ++i)
    if (kRoles[i] == s) return static_cast<Role>(i);
  return std::nullopt;
}

}  // namespace mutwo::ir
