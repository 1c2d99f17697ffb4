// The IR's small vocabulary: element types, tensor types, phases and roles.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mutwo::ir {

enum class DType : uint8_t { f32, f64, f16, bf16, i64, i32, boolean, u8 };  // u8: a kernel's workspace (oneDNN's LSTM)

int64_t element_size(DType t);
std::string_view to_string(DType t);
std::optional<DType> parse_dtype(std::string_view s);
bool is_floating(DType t);

using Shape = std::vector<int64_t>;

struct TensorType {
  Shape shape;
  DType dtype = DType::f32;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const;
  int64_t bytes() const { return numel() * element_size(dtype); }
  bool operator==(const TensorType& o) const { return shape == o.shape && dtype == o.dtype; }
  bool operator!=(const TensorType& o) const { return !(*this == o); }
};

std::string to_string(const TensorType& t);  // "f32[64,784]", scalars "f32[]"
std::string shape_string(const Shape& s);    // "[64,784]"

// Where in the training step a node runs. The order of a graph's nodes is the
// schedule; phases label it (and are checked to be in this order, recompute
// nodes living inside the backward part).
enum class Phase : uint8_t { forward, loss, backward, optimizer, recompute };

// The two halves of the step that recomputation is about, each defined once:
// the forward part (forward and loss nodes) makes activations; the backward
// part (backward nodes and the recompute nodes living among them) reads them.
// The optimizer phase is neither.
inline bool is_forward(Phase p) { return p == Phase::forward || p == Phase::loss; }
inline bool is_backward(Phase p) { return p == Phase::backward || p == Phase::recompute; }

// What a value is, for memory accounting and for what a planner may touch.
//   input            fed from outside each step (images, token ids, labels)
//   parameter        trained weights; persist across steps
//   gradient         gradient of a parameter (made in backward, used by the optimizer)
//   activation       made in forward/loss, used there and again in backward: the planner's candidates
//   optimizer_state  momentum, Adam moments; persist across steps
//   buffer           persistent non-trained state (batch-norm running statistics)
//   other            everything else: temporaries, gradients of activations, the loss
enum class Role : uint8_t { input, parameter, gradient, activation, optimizer_state, buffer, other };

inline constexpr int kNumRoles = 7;

std::string_view to_string(Phase p);
std::string_view to_string(Role r);
std::optional<Phase> parse_phase(std::string_view s);
std::optional<Role> parse_role(std::string_view s);

// Values that live across steps (never freed by the executor, never recomputed).
inline bool is_persistent(Role r) {
  return r == Role::input || r == Role::parameter || r == Role::optimizer_state || r == Role::buffer;
}

}  // namespace mutwo::ir
