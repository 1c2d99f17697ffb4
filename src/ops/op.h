// The op table: one row per op, holding everything about it but its kernel in
// one place: name, tags, arity, shape inference, derivative and FLOP estimate.
// The rows are defined in the op family files (elementwise.cpp, nn.cpp, ...).
// The table is ATen-free, and so is everything that links only it; the ATen
// kernels are a table of their own, one per row, in src/kernels.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/verify.h"

namespace mutwo::ops {

// What a planner or pass may do with an op (PyTorch's tags.yaml, ours).
enum Tag : uint32_t {
  kPointwise = 1u << 0,  // elementwise: cheap to recompute
  kRandom = 1u << 1,     // draws random numbers: recomputed only with its generator state (rng_save, rng_replay)
  kView = 1u << 2,       // output 0 aliases input 0's storage
  kReduction = 1u << 3,  // reduces over dimensions
  kHeavy = 1u << 4,      // matmul/conv class: expensive per byte
  kInplace = 1u << 5,    // writes into some inputs (optimizer steps); see OpDef::mutated_inputs
  kStepCount = 1u << 6,  // its arithmetic depends on the step number (Adam's bias correction): a captured CUDA graph cannot replay it
  kOverwrite = 1u << 7,  // with kView: output 0 is written over input 0, whose storage no later node may read
  kHost = 1u << 8,       // output 0 lives in host memory (swap_out): no device bytes
  kCollective = 1u << 9,  // talks to the other ranks (comm.cpp): never recomputed, run in graph order on every rank
  kRngState = 1u << 10,   // reads the generator's state without drawing (rng_save): never recomputed
};

class Builder;

// Shape inference input: the node (for attributes) and its input types
// (nullptr for an absent optional input). Throws UserError with a message that
// says what is wrong and what would be accepted.
struct InferArgs {
  const ir::Node& node;
  std::vector<const ir::TensorType*> in;
  const ir::Graph* graph = nullptr;  // where known: lets messages name inputs
  const ir::TensorType& input(size_t i) const { return *in[i]; }
  bool has(size_t i) const { return i < in.size() && in[i] != nullptr; }
  std::string name(size_t i) const;  // "%<input i's name>", or "input i" without the graph
};
using Types = std::vector<ir::TensorType>;  // what shape inference returns: one type per output
using InferFn = Types (*)(const InferArgs&);

// Derivative input: the forward node, the gradients of its outputs (kNoValue
// where none flows), and a builder positioned in the backward pass. Returns one
// gradient per input (kNoValue where none). A gradient may have a broadcast
// shape; the autodiff driver reduces it to the input's shape in one place.
// Rules emit nodes only for inputs that need a gradient (`needs(i)`).
struct GradArgs {
  const ir::Node& node;
  std::vector<ir::ValueId> grad_out;
  std::vector<bool> needs_grad;  // per input: does autodiff want its gradient?
  Builder& b;
  bool needs(size_t i) const { return i < needs_grad.size() && needs_grad[i]; }
  ir::ValueId in(size_t i) const { return node.inputs[i]; }
  ir::ValueId out(size_t i) const { return node.outputs[i]; }
  ir::ValueId g(size_t i = 0) const { return grad_out[i]; }
  std::string grad_name(size_t i) const;  // "<input i's name>.grad"
};
using Grads = std::vector<ir::ValueId>;  // what a derivative returns: one gradient per input
// Renames `v`, one output of a multi-output backward node, "<input>.grad".
void name_gradient(GradArgs& a, ir::ValueId v, size_t input);
using GradFn = Grads (*)(GradArgs&);

// FLOP estimate from the node and its resolved types.
struct FlopArgs {
  const ir::Node& node;
  std::vector<const ir::TensorType*> in;
  std::vector<const ir::TensorType*> out;
};
using FlopsFn = double (*)(const FlopArgs&);
// Bytes a node's kernel holds while it runs beyond its inputs and outputs
// (temporaries it makes and frees itself), where the op can say: the planners
// scale a profile's measured workspace by it when they change the node's
// attributes (linear_cross_entropy's chunk_rows). Same arguments as FLOPs.
using WorkspaceFn = int64_t (*)(const FlopArgs&);

// Input positions a node writes in place, for ops whose positions depend on
// the node (variadic ops); called only on nodes that passed shape inference.
using MutatesFn = std::vector<int> (*)(const ir::Node&);
// Tags of one node, for ops whose tags depend on the node (the generic `aten`
// op: random, view or in-place by its schema).
using TagsFn = uint32_t (*)(const ir::Node&);

// An attribute a node of the op may carry, by the reader that takes it
// (ir::Attrs::i, f, s, ints): a number may be written as an integer. The row
// declares every attribute its shape inference, derivative, FLOPs and kernel
// read; ops::check refuses a node that lacks a required one or holds one of
// another type, before anything reads them.
enum AttrKind : uint8_t { kIntAttr, kNumberAttr, kStringAttr, kIntsAttr };
inline constexpr bool kOptional = false;  // AttrSpec::required: a reader supplies a default
struct AttrSpec {
  std::string_view name;
  AttrKind kind;
  bool required = true;
};

// max_inputs of a variadic op: any number from min_inputs up; the op's shape
// inference checks the count.
inline constexpr int kVariadic = std::numeric_limits<int>::max();

struct OpDef {
  std::string_view name;
  uint32_t tags = 0;
  int min_inputs = 0;
  int max_inputs = 0;
  InferFn infer = nullptr;
  GradFn grad = nullptr;    // nullptr: no input is differentiable through this op
  FlopsFn flops = nullptr;  // nullptr: numel of the outputs
  std::vector<AttrSpec> attrs = {};  // the attributes its nodes carry
  std::vector<int> mutates = {};  // input positions written in place
  MutatesFn mutates_of = nullptr;  // instead of `mutates` where the positions depend on the node
  // The op's variant that writes output 0 over input 0 (tags kView | kOverwrite,
  // same inputs and arithmetic), taken where input 0 dies here (analysis::reinplace).
  std::string_view overwriting = {};
  TagsFn tags_of = nullptr;  // instead of `tags` where they depend on the node
  WorkspaceFn workspace = nullptr;  // nullptr: none declared (the profile's measurement alone)

  // The op's own tags; for a node, ask ops::has(node, tag).
  bool has(Tag t) const { return (tags & t) != 0; }
  std::vector<int> mutated_inputs(const ir::Node& n) const { return mutates_of ? mutates_of(n) : mutates; }
};

// The table. Lookup throws UserError for an unknown name (listing near names).
const OpDef& op(std::string_view name);
const OpDef* find_op(std::string_view name);
const std::vector<OpDef>& all_ops();

// A node's tags: its op's, or for ops with per-node tags (tags_of), the node's.
uint32_t tags(const ir::Node& n);
inline bool has(const ir::Node& n, Tag t) { return (tags(n) & t) != 0; }
// The one rule for what recomputation may repeat: neither in-place ops (a
// second write moves state) nor collectives (every rank would have to repeat
// them) nor rng_save (it reads the generator where it runs). Their outputs are
// kept when needed in the backward pass. A random op is recomputable, but only
// with its generator state: its clone reads the state an rng_save node took
// just before it in the forward pass and runs with attribute rng_replay
// (rewrite/recompute.h), so it draws what the forward pass drew.
inline bool recomputable(const ir::Node& n) { return (tags(n) & (kInplace | kCollective | kRngState)) == 0; }
// A recompute clone of a random node: its last input is the generator state
// (rng_save's output) it replays; the op's own inputs come before it.
inline constexpr const char* kRngReplayAttr = "rng_replay";
bool replays_rng(const ir::Node& n);
// A node that draws from the generator (tag random, or rng_save) with
// attribute seed_offset=k draws from the executor's generator k, seeded
// seed + k; without it, from generator 0: copy k of N steps composed into one
// graph draws what a lone step from seed + k draws (models/copies.h).
inline constexpr const char* kSeedOffsetAttr = "seed_offset";
int64_t seed_offset(const ir::Node& n);
// The state rng_save takes: the bytes of at::CPUGeneratorImpl's state
// (5056: the Mersenne Twister's legacy layout), the larger of CPU's and CUDA's
// (Philox seed and offset, 16 bytes, in its first two words).
inline constexpr int64_t kRngStateWords = 632;
ir::TensorType rng_state_type();

// Checks arity and infers output types for a node as it stands in a graph.
ir::OpCheck check(const ir::Graph& g, const ir::Node& n);
double flops(const ir::Graph& g, const ir::Node& n);
// The node's declared workspace (OpDef::workspace), 0 where its op declares none.
int64_t workspace_bytes(const ir::Graph& g, const ir::Node& n);
// Bytes a node reads and writes: its inputs, and the outputs it does not alias
// (a view moves nothing). The cost measure of ops that are not FLOP-bound.
int64_t bytes_moved(const ir::Graph& g, const ir::Node& n);
// The op as people know it: the row's name, or for the generic op its ATen
// schema ("aten::addmm", "aten::add.Tensor").
std::string display_name(const ir::Node& n);
// The op as a model's author knows it: the row's name, or for the generic op
// the ATen name without namespace or overload ("silu", "convolution").
std::string op_name(const ir::Node& n);
// Where a node is in the user's model and what it does: "layers.3.mlp.act_fn:
// silu" (its module path, then op_name), the op alone outside any module.
std::string node_label(const ir::Node& n);
// ir::verify with the op table as the type oracle.
void verify(const ir::Graph& g);

// Row lists of the op families, collected once by the table (no static
// registration: the order of the table is the order of these calls).
void add_elementwise_ops(std::vector<OpDef>& t);
void add_shape_ops(std::vector<OpDef>& t);
void add_nn_ops(std::vector<OpDef>& t);
void add_optim_ops(std::vector<OpDef>& t);
void add_conv_ops(std::vector<OpDef>& t);       // conv.cpp: conv2d, batch_norm, pooling
void add_attention_ops(std::vector<OpDef>& t);  // attention.cpp: embedding, layer_norm, softmax, matmul, ...
void add_layout_ops(std::vector<OpDef>& t);     // layout.cpp: permute, contiguous, split, cat, token helpers
void add_aten_ops(std::vector<OpDef>& t);       // aten.cpp: the generic op, any ATen schema through the dispatcher
void add_swap_ops(std::vector<OpDef>& t);       // swap.cpp: swap_out, swap_in, swap_wait (host memory)
void add_comm_ops(std::vector<OpDef>& t);       // comm.cpp: data-parallel buckets, shards and collectives

}  // namespace mutwo::ops
