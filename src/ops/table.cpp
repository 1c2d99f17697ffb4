// The op table itself: collects the rows of every op family once, and answers
// lookups, shape checks and FLOP estimates for nodes.
#include <algorithm>
#include <unordered_map>

#include "ops/builder.h"
#include "ops/op.h"
#include "support/error.h"

namespace mutwo::ops {

namespace {

struct Table {
  std::vector<OpDef> rows;
  std::unordered_map<std::string_view, size_t> index;
  Table() {
    add_elementwise_ops(rows);
    add_shape_ops(rows);
    add_nn_ops(rows);
    add_optim_ops(rows);
    add_conv_ops(rows);
    add_attention_ops(rows);
    add_layout_ops(rows);
    add_aten_ops(rows);
    add_swap_ops(rows);
    add_comm_ops(rows);
    for (size_t i = 0; i < rows.size(); ++i) {
      MUTWO_ASSERT(rows[i].infer, "op {} lacks shape inference", rows[i].name);
      MUTWO_ASSERT(index.emplace(rows[i].name, i).second, "op {} is in the table twice", rows[i].name);
    }
  }
};

const Table& table() {
  static const Table t;  // built on first use, not by static registration
  return t;
}

std::vector<const ir::TensorType*> input_types(const ir::Graph& g, const ir::Node& n) {
  std::vector<const ir::TensorType*> in;
  in.reserve(n.inputs.size());
  for (ir::ValueId v : n.inputs) in.push_back(v == ir::kNoValue ? nullptr : &g.type(v));
  return in;
}

FlopArgs flop_args(const ir::Graph& g, const ir::Node& n) {
  FlopArgs args{n, input_types(g, n), {}};
  for (ir::ValueId v : n.outputs) args.out.push_back(&g.type(v));
  return args;
}

std::string_view kind_name(AttrKind k) {
  switch (k) {
    case kIntAttr: return "an integer";
    case kNumberAttr: return "a number";
    case kStringAttr: return "a string";
    case kIntsAttr: return "a list of integers";
  }
  return "?";
}

bool holds(AttrKind k, const ir::Attr& a) {
  switch (k) {
    case kIntAttr: return std::holds_alternative<int64_t>(a);
    case kNumberAttr: return std::holds_alternative<int64_t>(a) || std::holds_alternative<double>(a);
    case kStringAttr: return std::holds_alternative<std::string>(a);
    case kIntsAttr: return std::holds_alternative<std::vector<int64_t>>(a);
  }
  return false;
}

static_assert(std::variant_size_v<ir::Attr> == 4, "held_name names each of ir::Attr's alternatives");
std::string_view held_name(const ir::Attr& a) {
  constexpr std::string_view kNames[] = {"an integer", "a floating-point number", "a list", "a string"};
  return kNames[a.index()];  // ir::Attr's alternatives in order
}

// The node's attributes against its row's declaration (OpDef::attrs), first of
// all checks: the readers (ir::Attrs::i, ...) assert what this refuses.
void check_attrs(const OpDef& d, const ir::Node& n) {
  for (const AttrSpec& s : d.attrs) {
    const ir::Attr* a = n.attrs.find(s.name);
    MUTWO_CHECK(a || !s.required, "op {} needs the attribute '{}' ({}), which the node lacks: add {{{}=...}}", d.name,
                s.name, kind_name(s.kind), s.name);
    MUTWO_CHECK(!a || holds(s.kind, *a), "op {}: attribute '{}' must be {}, got {}", d.name, s.name,
                kind_name(s.kind), held_name(*a));
  }
}

}  // namespace

std::string GradArgs::grad_name(size_t i) const { return b.graph().value(node.inputs[i]).name + ".grad"; }

void name_gradient(GradArgs& a, ir::ValueId v, size_t input) {
  ir::Graph& g = a.b.graph();
  if (g.value(v).name != a.grad_name(input)) g.rename(v, g.unique_name(a.grad_name(input)));
}

std::string InferArgs::name(size_t i) const {
  if (!graph || i >= node.inputs.size() || node.inputs[i] == ir::kNoValue) return fmt::format("input {}", i);
  return "%" + graph->value(node.inputs[i]).name;
}

const std::vector<OpDef>& all_ops() { return table().rows; }

uint32_t tags(const ir::Node& n) {
  const OpDef& d = op(n.op);
  return d.tags_of ? d.tags_of(n) : d.tags;
}

const OpDef* find_op(std::string_view name) {
  const auto& t = table();
  auto it = t.index.find(name);
  return it == t.index.end() ? nullptr : &t.rows[it->second];
}

const OpDef& op(std::string_view name) {
  if (const OpDef* d = find_op(name)) return *d;
  std::vector<std::string_view> names;
  for (const auto& r : all_ops()) names.push_back(r.name);
  std::sort(names.begin(), names.end());
  MUTWO_FAIL("unknown op '{}'; known ops: {}", name, fmt::join(names, ", "));
}

bool replays_rng(const ir::Node& n) { return n.attrs.has(kRngReplayAttr) && n.attrs.i(kRngReplayAttr) != 0; }

int64_t seed_offset(const ir::Node& n) { return n.attrs.i_or(kSeedOffsetAttr, 0); }

ir::TensorType rng_state_type() { return ir::TensorType{{kRngStateWords}, ir::DType::i64}; }

namespace {

// A recomputed random node draws again, so it must replay the generator state
// rng_save took before the forward node (its last input, attribute rng_replay).
// Returns the node as its op sees it: without that input.
const ir::Node& without_replayed_state(const ir::Graph& g, const ir::Node& n, ir::Node& scratch) {
  const bool replay = replays_rng(n);
  if (n.phase == ir::Phase::recompute && has(n, kRandom))
    MUTWO_CHECK(replay, "{} may not be recomputed without its generator state: it is random (its draws would differ "
                "from the forward pass's); a recomputation takes the state an rng_save node made before the forward "
                "node as its last input, with attribute {}=1", display_name(n), kRngReplayAttr);
  if (!replay) return n;
  MUTWO_CHECK(has(n, kRandom) && n.phase == ir::Phase::recompute,
              "{}: attribute {} is for recomputations of random nodes (phase recompute)", display_name(n), kRngReplayAttr);
  MUTWO_CHECK(!n.inputs.empty() && n.inputs.back() != ir::kNoValue && g.type(n.inputs.back()) == rng_state_type(),
              "{}: a replayed random node takes the generator state (rng_save's {}) as its last input",
              display_name(n), ir::to_string(rng_state_type()));
  scratch = n;
  scratch.inputs.pop_back();
  return scratch;
}

}  // namespace

ir::OpCheck check(const ir::Graph& g, const ir::Node& node) {
  const OpDef& d = op(node.op);
  check_attrs(d, node);  // first: tags(n) below reads the generic op's attributes
  // A recomputation repeats a node's work exactly; a random op replays its state.
  ir::Node scratch;
  const ir::Node& n = without_replayed_state(g, node, scratch);
  MUTWO_CHECK(n.phase != ir::Phase::recompute || recomputable(n), "{} may not be recomputed: {}", display_name(n),
              has(n, kRngState) ? "it reads the generator's state where it runs"
                                : "it writes in place (a repeat would apply the write twice)");
  auto count = static_cast<int>(n.inputs.size());
  MUTWO_CHECK(count >= d.min_inputs && count <= d.max_inputs, "op {} takes {} inputs, got {}", d.name,
              d.min_inputs == d.max_inputs ? fmt::format("{}", d.min_inputs)
              : d.max_inputs == kVariadic  ? fmt::format("at least {}", d.min_inputs)
                                           : fmt::format("{} to {}", d.min_inputs, d.max_inputs),
              count);
  InferArgs args{n, input_types(g, n), &g};
  std::vector<ir::TensorType> outputs = d.infer(args);  // first: mutated_inputs may assume a well-formed node
  return ir::OpCheck{std::move(outputs), d.mutated_inputs(n)};
}

double flops(const ir::Graph& g, const ir::Node& n) {
  const OpDef& d = op(n.op);
  FlopArgs args = flop_args(g, n);
  if (d.flops) return d.flops(args);
  double total = 0;
  for (const auto* t : args.out) total += static_cast<double>(t->numel());
  return total;
}

int64_t workspace_bytes(const ir::Graph& g, const ir::Node& n) {
  const OpDef& d = op(n.op);
  return d.workspace ? d.workspace(flop_args(g, n)) : 0;
}

int64_t bytes_moved(const ir::Graph& g, const ir::Node& n) {
  int64_t total = 0;
  for (ir::ValueId v : n.inputs)
    if (v != ir::kNoValue) total += g.type(v).bytes();
  if (!has(n, kView))
    for (ir::ValueId v : n.outputs) total += g.type(v).bytes();
  return total;
}

std::string display_name(const ir::Node& n) {
  const ir::Attr* target = n.attrs.find("target");
  const ir::Attr* overload = n.attrs.find("overload");
  if (!target || !std::holds_alternative<std::string>(*target)) return n.op;
  std::string name = std::get<std::string>(*target);
  if (overload && std::holds_alternative<std::string>(*overload) && std::get<std::string>(*overload) != "default" &&
      !std::get<std::string>(*overload).empty())
    name += "." + std::get<std::string>(*overload);
  return name;
}

std::string op_name(const ir::Node& n) {
  const ir::Attr* target = n.attrs.find("target");
  if (!target || !std::holds_alternative<std::string>(*target)) return n.op;
  const std::string& t = std::get<std::string>(*target);
  const size_t colons = t.rfind("::");
  return colons == std::string::npos ? t : t.substr(colons + 2);
}

std::string node_label(const ir::Node& n) { return n.scope.empty() ? op_name(n) : n.scope + ": " + op_name(n); }

void verify(const ir::Graph& g) { ir::verify(g, check); }

}  // namespace mutwo::ops
