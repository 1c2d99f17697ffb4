// Fusing a captured step's vocabulary head and its loss into
// linear_cross_entropy (see fuse_loss.h, docs/step-file.md).
#include "stepfile/fuse_loss.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "ops/attrs.h"
#include "ops/op.h"
#include "support/error.h"

namespace mutwo::stepfile {

namespace {

using json = nlohmann::json;
using ir::kNoValue;
using ir::ValueId;

// The graph's aten nodes with their arguments decoded, and who makes and reads each value.
struct View {
  const ir::Graph& g;
  std::vector<json> args;  // per node: the `args` attribute, parsed (null for other ops)
  ir::UseIndex uses;

  explicit View(const ir::Graph& graph) : g(graph), uses(graph) {
    for (const ir::Node& n : g.nodes())
      args.push_back(n.op == "aten" && n.attrs.has("args") ? json::parse(n.attrs.s("args"), nullptr, false) : json());
  }
  const ir::Node& node(size_t i) const { return g.nodes()[i]; }
  int32_t producer(ValueId v) const { return v == kNoValue ? -1 : uses.producer[static_cast<size_t>(v)]; }
  const std::vector<int32_t>& users(ValueId v) const { return uses.users[static_cast<size_t>(v)]; }
  const ir::Shape& shape(ValueId v) const { return g.type(v).shape; }

  // True if node i calls `target` (with its overload).
  bool is(size_t i, std::string_view target, std::string_view overload = "default") const {
    const ir::Node& n = node(i);
    return n.op == "aten" && args[i].is_array() && n.attrs.s("target") == target && n.attrs.s("overload") == overload;
  }
  // Argument k of node i, if any.
  const json* arg(size_t i, size_t k) const { return args[i].is_array() && k < args[i].size() ? &args[i][k] : nullptr; }
  // The value a tensor argument names ("%j": the node's input j), else kNoValue.
  ValueId tensor(size_t i, size_t k) const {
    const json* a = arg(i, k);
    if (!a || !a->is_string()) return kNoValue;
    const std::optional<size_t> j = ops::aten_input_ref(a->get_ref<const std::string&>());
    return j && *j < node(i).inputs.size() ? node(i).inputs[*j] : kNoValue;
  }
  std::optional<int64_t> integer(size_t i, size_t k) const {
    const json* a = arg(i, k);
    if (a && a->is_number_integer()) return a->get<int64_t>();
    return std::nullopt;
  }
  // A number argument equal to 1 (1, or {"f": 1.0}).
  bool is_one(size_t i, size_t k) const {
    const json* a = arg(i, k);
    if (a && a->is_number()) return a->get<double>() == 1.0;
    return a && a->is_object() && a->contains("f") && (*a)["f"].is_number() && (*a)["f"].get<double>() == 1.0;
  }
  bool is_null(size_t i, size_t k) const {
    const json* a = arg(i, k);
    return a && a->is_null();
  }
  // The node that makes v, if it is an aten node.
  std::optional<size_t> made_by(ValueId v) const {
    const int32_t p = producer(v);
    if (p < 0 || !args[static_cast<size_t>(p)].is_array()) return std::nullopt;
    return static_cast<size_t>(p);
  }
};

// A dim argument of a tensor of `rank` dimensions, made non-negative.
int64_t dim_of(int64_t d, size_t rank) { return d < 0 ? d + static_cast<int64_t>(rank) : d; }

ir::Shape contiguous_strides(const ir::Shape& s) {
  ir::Shape out(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) out[d - 1] = out[d] * s[d];
  return out;
}

// Node i changes only the shape of its input, keeping the row-major order of
// the elements: view, _unsafe_view, reshape, and _reshape_alias with the
// contiguous strides of its size (what torch 1.13's reshape decomposes into).
bool is_reshape(const View& v, size_t i) {
  if (v.is(i, "aten::view") || v.is(i, "aten::_unsafe_view") || v.is(i, "aten::reshape")) return v.tensor(i, 0) != kNoValue;
  if (!v.is(i, "aten::_reshape_alias") || v.node(i).outputs.size() != 1) return false;
  const json* strides = v.arg(i, 2);
  if (!strides || !strides->is_array() ||
      !std::all_of(strides->begin(), strides->end(), [](const json& s) { return s.is_number_integer(); }))
    return false;
  return strides->get<ir::Shape>() == contiguous_strides(v.shape(v.node(i).outputs[0]));
}

// Node i transposes a 2-D tensor: t, transpose(0, 1), permute([1, 0]).
bool is_transpose(const View& v, size_t i) {
  const ValueId in = v.tensor(i, 0);
  if (in == kNoValue || v.shape(in).size() != 2) return false;
  if (v.is(i, "aten::t")) return true;
  if (v.is(i, "aten::transpose", "int")) {
    auto a = v.integer(i, 1), b = v.integer(i, 2);
    return a && b && ((*a % 2) + 2) % 2 != ((*b % 2) + 2) % 2;
  }
  if (v.is(i, "aten::permute")) {
    const json* dims = v.arg(i, 1);
    return dims && dims->is_array() && dims->size() == 2 && (*dims)[0].is_number_integer() &&
           (*dims)[1].is_number_integer() && dim_of((*dims)[0].get<int64_t>(), 2) == 1 &&
           dim_of((*dims)[1].get<int64_t>(), 2) == 0;
  }
  return false;
}
// Views that show their input as it is (detach, alias).
bool is_alias(const View& v, size_t i) { return v.is(i, "aten::detach") || v.is(i, "aten::alias"); }

// The value v shows through reshapes (and aliases): same elements, same order.
ValueId reshape_root(const View& v, ValueId x) {
  for (auto p = v.made_by(x); p && (is_reshape(v, *p) || is_alias(v, *p)); p = v.made_by(x)) x = v.tensor(*p, 0);
  return x;
}
bool same_tensor(const View& v, ValueId a, ValueId b) {
  return a == b || (v.shape(a) == v.shape(b) && reshape_root(v, a) == reshape_root(v, b));
}
// The value x is a transpose of (an odd count) or shows (an even count).
std::pair<ValueId, bool> transpose_root(const View& v, ValueId x) {
  bool odd = false;
  for (auto p = v.made_by(x); p && (is_transpose(v, *p) || is_alias(v, *p)); p = v.made_by(x)) {
    odd ^= is_transpose(v, *p);
    x = v.tensor(*p, 0);
  }
  return {x, odd};
}
// Values that hold x's elements in x's order: x and the reshapes of it, transitively.
std::vector<ValueId> reshapes_of(const View& v, ValueId x) {
  std::vector<ValueId> out{x};
  for (size_t k = 0; k < out.size(); ++k)
    for (int32_t u : v.users(out[k]))
      if ((is_reshape(v, static_cast<size_t>(u)) || is_alias(v, static_cast<size_t>(u))) &&
          v.tensor(static_cast<size_t>(u), 0) == out[k])
        out.push_back(v.node(static_cast<size_t>(u)).outputs[0]);
  return out;
}
bool contains(const std::vector<ValueId>& vs, ValueId x) { return std::find(vs.begin(), vs.end(), x) != vs.end(); }

// Node i converts a tensor to `to` and changes nothing else: `_to_copy(x,
// dtype=to)`, layout absent or strided, no pinning, blocking, memory format
// absent; the device absent, or (autograd's own cast back, `any_device`) any.
bool is_cast(const View& v, size_t i, ir::DType to, bool any_device) {
  if (!v.is(i, "aten::_to_copy") || v.tensor(i, 0) == kNoValue || v.node(i).outputs.size() != 1 ||
      v.g.type(v.node(i).outputs[0]).dtype != to)
    return false;
  const json* dtype = v.arg(i, 1);
  const json* layout = v.arg(i, 2);
  const json* device = v.arg(i, 3);
  const json* blocking = v.arg(i, 5);
  return dtype && dtype->is_object() && dtype->size() == 1 && dtype->value("dtype", "") == ir::to_string(to) && layout &&
         (layout->is_null() || *layout == json{{"layout", "strided"}}) && device &&
         (device->is_null() || (any_device && device->is_object() && device->contains("device"))) &&
         (v.is_null(i, 4) || *v.arg(i, 4) == false) && blocking && *blocking == false &&
         (!v.arg(i, 6) || v.is_null(i, 6)) && !v.arg(i, 7);
}
// `logits.float()` of a bf16 or f16 head: a cast to f32 (Hugging Face's LLaMA family).
bool is_upcast(const View& v, size_t i) {
  if (!is_cast(v, i, ir::DType::f32, /*any_device=*/false)) return false;
  const ir::DType from = v.g.type(v.tensor(i, 0)).dtype;
  return from == ir::DType::bf16 || from == ir::DType::f16;
}

// One `linear -> cross_entropy` and its backward, as found.
struct Match {
  size_t loss_node = 0, grad_node = 0;  // nll_loss_forward, nll_loss_backward
  ValueId hidden = kNoValue, weight = kNoValue, bias = kNoValue, target = kNoValue, seed = kNoValue;
  int64_t ignore_index = -100;
  bool upcast = false;  // the head's logits cast to f32 before the loss (is_upcast)
  // What the fused backward makes, under these existing ids (kNoValue: nobody reads it, a new value).
  ValueId d_hidden = kNoValue, d_weight = kNoValue, d_bias = kNoValue;
  std::set<size_t> replaced;  // the compute nodes the fused pair stands for
};

// The logits' producer: addmm(bias, hidden, weightᵀ), mm(hidden, weightᵀ),
// or add(mm(hidden, weightᵀ) reshaped, bias) (torch's linear on a 3-D input
// where it cannot flatten it first), possibly upcast to f32 (is_upcast).
// `logits` is (N, V).
bool match_linear(const View& v, ValueId logits, Match& m) {
  const int64_t n = v.shape(logits)[0], vocab = v.shape(logits)[1];
  ValueId x = logits;
  for (auto p = v.made_by(x); p && is_reshape(v, *p); p = v.made_by(x)) x = v.tensor(*p, 0);
  auto c = v.made_by(x);
  if (c && is_upcast(v, *c)) {
    m.upcast = true;
    m.replaced.insert(*c);
    x = v.tensor(*c, 0);
    for (auto p = v.made_by(x); p && is_reshape(v, *p); p = v.made_by(x)) x = v.tensor(*p, 0);
    c = v.made_by(x);
  }
  if (!c) return false;
  if (v.is(*c, "aten::add", "Tensor") && v.is_one(*c, 2)) {
    m.bias = v.tensor(*c, 1);
    if (m.bias == kNoValue || v.shape(m.bias) != ir::Shape{vocab} || v.shape(x).empty() || v.shape(x).back() != vocab)
      return false;
    m.replaced.insert(*c);
    x = v.tensor(*c, 0);
    if (x == kNoValue) return false;
    for (auto p = v.made_by(x); p && is_reshape(v, *p); p = v.made_by(x)) x = v.tensor(*p, 0);
    c = v.made_by(x);
    if (!c || !v.is(*c, "aten::mm")) return false;
  }
  size_t first = 0;
  if (v.is(*c, "aten::addmm")) {
    if (m.bias != kNoValue || !v.is_one(*c, 3) || !v.is_one(*c, 4)) return false;
    m.bias = v.tensor(*c, 0);
    if (m.bias == kNoValue || v.shape(m.bias) != ir::Shape{vocab}) return false;
    first = 1;
  } else if (!v.is(*c, "aten::mm")) {
    return false;
  }
  m.replaced.insert(*c);
  m.hidden = v.tensor(*c, first);
  const ValueId wt = v.tensor(*c, first + 1);
  if (m.hidden == kNoValue || wt == kNoValue || v.shape(x) != ir::Shape{n, vocab}) return false;
  auto [w, odd] = transpose_root(v, wt);
  m.weight = w;
  const ir::Shape& h = v.shape(m.hidden);
  if (!odd || h.size() != 2 || h[0] != n || v.shape(w) != ir::Shape{vocab, h[1]}) return false;
  const ir::DType dt = v.g.type(x).dtype;  // the head's (the logits' unless upcast)
  return v.g.type(m.hidden).dtype == dt && v.g.type(w).dtype == dt &&
         (m.bias == kNoValue || v.g.type(m.bias).dtype == dt);
}

// The forward part at nll_loss_forward node i: log_softmax over the logits'
// rows, mean reduction, no class weights.
bool match_forward(const View& v, size_t i, Match& m) {
  const ir::Node& nll = v.node(i);
  if (!v.is(i, "aten::nll_loss_forward") || nll.outputs.size() != 2 || !v.is_null(i, 2) || v.integer(i, 3) != 1)
    return false;
  auto ignore = v.integer(i, 4);
  const ValueId logp = v.tensor(i, 0);
  m.target = v.tensor(i, 1);
  if (!ignore || logp == kNoValue || m.target == kNoValue || v.shape(logp).size() != 2) return false;
  m.ignore_index = *ignore;
  m.loss_node = i;
  if (v.g.type(m.target).dtype != ir::DType::i64 || v.shape(m.target) != ir::Shape{v.shape(logp)[0]}) return false;
  auto ls = v.made_by(logp);
  if (!ls || !v.is(*ls, "aten::_log_softmax") || dim_of(v.integer(*ls, 1).value_or(0), 2) != 1) return false;
  const json* half = v.arg(*ls, 2);
  if (!half || !half->is_boolean() || half->get<bool>()) return false;
  m.replaced.insert(*ls);
  const ValueId logits = v.tensor(*ls, 0);
  return logits != kNoValue && v.shape(logits) == v.shape(logp) && match_linear(v, logits, m);
}

// The gradient of the head's logits, from the log-softmax's gradient G: G and
// its reshapes, or with an upcast, those of G's one cast back to the head's
// dtype (autograd's backward of the upcast); none if that cast is not one.
std::vector<ValueId> logits_gradient(const View& v, Match& m, ValueId g) {
  std::vector<ValueId> grad = reshapes_of(v, g);
  if (!m.upcast) return grad;
  std::optional<size_t> down;
  for (ValueId x : grad)
    for (int32_t u : v.users(x))
      if (is_cast(v, static_cast<size_t>(u), v.g.type(m.hidden).dtype, /*any_device=*/true)) {
        if (down) return {};
        down = static_cast<size_t>(u);
      }
  if (!down) return {};
  m.replaced.insert(*down);
  return reshapes_of(v, v.node(*down).outputs[0]);
}

// The backward part: nll_loss_backward of the forward's total weight, then
// _log_softmax_backward_data (the logits' gradient G), and what the linear's
// backward makes of G: d_hidden = G @ weight, d_weight = Gᵀ @ hidden (or
// (hiddenᵀ @ G)ᵀ), d_bias = G summed over its rows.
bool match_backward(const View& v, Match& m) {
  const ir::Node& nll = v.node(m.loss_node);
  const ValueId logp = nll.inputs[0], total = nll.outputs[1];
  std::optional<size_t> back;
  for (int32_t u : v.users(total)) {
    if (back || !v.is(static_cast<size_t>(u), "aten::nll_loss_backward")) return false;
    back = static_cast<size_t>(u);
  }
  if (!back) return false;
  const size_t b = *back;
  m.grad_node = b;
  m.seed = v.tensor(b, 0);
  const ValueId target = v.tensor(b, 2);
  if (m.seed == kNoValue || !v.shape(m.seed).empty() || v.g.type(m.seed).dtype != v.g.type(logp).dtype ||
      reshape_root(v, v.tensor(b, 1)) != logp || target == kNoValue || !same_tensor(v, target, m.target) ||
      !v.is_null(b, 3) || v.integer(b, 4) != 1 || v.integer(b, 5) != m.ignore_index || v.tensor(b, 6) != total ||
      v.node(b).outputs.size() != 1)
    return false;
  const ValueId g1 = v.node(b).outputs[0];
  if (v.users(g1).size() != 1) return false;
  const size_t sb = static_cast<size_t>(v.users(g1)[0]);
  const json* dtype = v.arg(sb, 3);
  if (!v.is(sb, "aten::_log_softmax_backward_data") || v.tensor(sb, 0) != g1 || reshape_root(v, v.tensor(sb, 1)) != logp ||
      dim_of(v.integer(sb, 2).value_or(0), 2) != 1 || !dtype || !dtype->is_object() ||
      dtype->value("dtype", "") != ir::to_string(v.g.type(logp).dtype) || v.node(sb).outputs.size() != 1)
    return false;
  m.replaced.insert(sb);
  const std::vector<ValueId> grad = logits_gradient(v, m, v.node(sb).outputs[0]);  // G (N, V) and its reshapes
  if (grad.empty()) return false;
  const int64_t n = v.shape(logp)[0], vocab = v.shape(logp)[1], h = v.shape(m.hidden)[1];
  // The one node among the readers of `vs` that `is_it` accepts; false if two are.
  auto find_one = [&](const std::vector<ValueId>& vs, auto&& is_it, std::optional<size_t>& found) {
    std::set<size_t> hits;
    for (ValueId x : vs)
      for (int32_t u : v.users(x))
        if (is_it(static_cast<size_t>(u))) hits.insert(static_cast<size_t>(u));
    if (hits.size() > 1) return false;
    if (!hits.empty()) found = *hits.begin();
    return true;
  };
  auto single_output = [&](size_t i) { return v.node(i).outputs.size() == 1 ? v.node(i).outputs[0] : kNoValue; };
  // d_hidden = mm(G, weight) with the weight shown through an even count of transposes.
  std::optional<size_t> dh;
  auto is_dh = [&](size_t i) {
    if (!v.is(i, "aten::mm") || !contains(grad, v.tensor(i, 0)) || v.shape(v.tensor(i, 0)) != ir::Shape{n, vocab})
      return false;
    auto [w, odd] = transpose_root(v, v.tensor(i, 1));
    return w == m.weight && !odd;
  };
  if (!find_one(grad, is_dh, dh)) return false;
  if (dh) {
    m.replaced.insert(*dh);
    m.d_hidden = single_output(*dh);
  }
  // d_weight = mm(Gᵀ, hidden) (V, H), or mm(hiddenᵀ, G) (H, V) read by one transpose alone.
  std::vector<ValueId> grad_t;
  for (ValueId x : grad)
    if (v.shape(x) == ir::Shape{n, vocab})
      for (int32_t u : v.users(x))
        if (is_transpose(v, static_cast<size_t>(u))) grad_t.push_back(v.node(static_cast<size_t>(u)).outputs[0]);
  std::optional<size_t> dw;
  auto is_dw = [&](size_t i) {
    if (!v.is(i, "aten::mm")) return false;
    const ValueId a = v.tensor(i, 0), c = v.tensor(i, 1);
    if (contains(grad_t, a)) return c != kNoValue && same_tensor(v, c, m.hidden);
    if (!contains(grad, c) || v.shape(c) != ir::Shape{n, vocab} || a == kNoValue) return false;
    auto p = v.made_by(a);
    return p && is_transpose(v, *p) && same_tensor(v, v.tensor(*p, 0), m.hidden);
  };
  if (!find_one(grad, is_dw, dw) || !find_one(grad_t, is_dw, dw)) return false;
  if (dw) {
    m.replaced.insert(*dw);
    m.d_weight = single_output(*dw);
    if (m.d_weight != kNoValue && v.shape(m.d_weight) == ir::Shape{h, vocab}) {  // (hiddenᵀ @ G), transposed once more
      const auto& us = v.users(m.d_weight);
      if (us.size() != 1 || !is_transpose(v, static_cast<size_t>(us[0]))) return false;
      m.replaced.insert(static_cast<size_t>(us[0]));
      m.d_weight = single_output(static_cast<size_t>(us[0]));
    }
    if (m.d_weight == kNoValue || v.shape(m.d_weight) != ir::Shape{vocab, h}) return false;
  }
  // d_bias = sum(G, every dimension but the last), (V) or kept dimensions reshaped to (V).
  std::optional<size_t> db;
  auto is_db = [&](size_t i) {
    const ValueId x = v.tensor(i, 0);
    const json* dims = v.arg(i, 1);
    if (!v.is(i, "aten::sum", "dim_IntList") || !contains(grad, x) || !dims || !dims->is_array() || !v.is_null(i, 3))
      return false;
    const size_t rank = v.shape(x).size();
    std::set<int64_t> summed;  // must be 0 .. rank - 2: every dimension but the last
    for (const json& d : *dims)
      if (d.is_number_integer()) summed.insert(dim_of(d.get<int64_t>(), rank));
    return rank >= 2 && summed.size() + 1 == rank && dims->size() == summed.size() && *summed.begin() == 0 &&
           *summed.rbegin() == static_cast<int64_t>(rank) - 2;
  };
  if (!find_one(grad, is_db, db)) return false;
  if (db && m.bias == kNoValue) return false;
  if (db) {
    m.replaced.insert(*db);
    m.d_bias = single_output(*db);
    if (m.d_bias != kNoValue && v.shape(m.d_bias) != ir::Shape{vocab}) {  // keepdim: (1, V) then a reshape
      const auto& us = v.users(m.d_bias);
      if (us.size() != 1 || !is_reshape(v, static_cast<size_t>(us[0]))) return false;
      m.replaced.insert(static_cast<size_t>(us[0]));
      m.d_bias = single_output(static_cast<size_t>(us[0]));
    }
    if (m.d_bias == kNoValue || v.shape(m.d_bias) != ir::Shape{vocab}) return false;
  }
  return true;
}

bool pure_view(const ir::Node& n) {
  const uint32_t t = ops::tags(n);
  return (t & ops::kView) && !(t & (ops::kInplace | ops::kOverwrite | ops::kRandom)) && n.inputs.size() >= 1;
}

// The nodes of `g` with m's fused pair in place of what it replaces, and the
// views that served only the replaced nodes removed; nullopt if a value the
// replaced nodes made is still read (the logits or log-probabilities are read
// elsewhere: not an exact match).
std::optional<std::vector<ir::Node>> rewrite(ir::Graph& g, const Match& m, const std::set<ValueId>& kept) {
  const auto& nodes = g.nodes();
  const ir::Node& loss_node = nodes[m.loss_node];
  const ValueId loss = loss_node.outputs[0];
  ir::Node fwd;
  fwd.op = "linear_cross_entropy";
  fwd.inputs = {m.hidden, m.weight, m.target};
  if (m.bias != kNoValue) fwd.inputs.push_back(m.bias);
  const ir::TensorType h = g.type(m.hidden);  // a copy: add_value below may move the table
  const ir::DType logits = g.type(loss).dtype;  // the head's, or f32 when upcast
  const ValueId lse = g.add_value(g.unique_name(g.value(loss).name + ".logsumexp"), {{h.shape[0]}, logits}, ir::Role::other);
  fwd.outputs = {loss, lse};
  fwd.attrs = {{"chunk_rows", int64_t{0}}, {"ignore_index", m.ignore_index}};
  if (m.upcast) fwd.attrs.set("logits_dtype", std::string(ir::to_string(logits)));
  fwd.scope = loss_node.scope;
  for (size_t i : m.replaced)
    if (!nodes[i].scope.empty() && (nodes[i].op != "aten" || nodes[i].attrs.s("target") != "aten::_log_softmax")) {
      fwd.scope = nodes[i].scope;  // the head's module (torch 2.x records it), not the loss function's
      break;
    }
  ir::Node bwd;
  bwd.op = "linear_cross_entropy_backward";
  bwd.inputs = {m.hidden, m.weight, m.target, lse, m.seed};
  if (m.bias != kNoValue) bwd.inputs.push_back(m.bias);
  auto made = [&](ValueId v, const ir::TensorType& t, const char* suffix) {
    return v != kNoValue ? v : g.add_value(g.unique_name(g.value(loss).name + suffix), t, ir::Role::other);
  };
  bwd.outputs = {made(m.d_hidden, h, ".d_hidden"), made(m.d_weight, g.type(m.weight), ".d_weight")};
  if (m.bias != kNoValue) bwd.outputs.push_back(made(m.d_bias, g.type(m.bias), ".d_bias"));
  bwd.attrs = fwd.attrs;
  bwd.scope = nodes[m.grad_node].scope;
  bwd.phase = ir::Phase::backward;

  std::vector<bool> removed(nodes.size(), false);
  std::set<ValueId> lost;  // values the removed nodes made and the fused pair does not
  for (size_t i : m.replaced) removed[i] = true;
  removed[m.loss_node] = removed[m.grad_node] = true;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (removed[i])
      for (ValueId o : nodes[i].outputs) lost.insert(o);
  for (ValueId o : fwd.outputs) lost.erase(o);
  for (ValueId o : bwd.outputs) lost.erase(o);
  // The views around the replaced nodes (t(weight), the log-probabilities'
  // detach chain, reshapes of G): removed once nobody reads them.
  std::set<ValueId> near;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (removed[i]) {
      near.insert(nodes[i].inputs.begin(), nodes[i].inputs.end());
      near.insert(nodes[i].outputs.begin(), nodes[i].outputs.end());
    }
  std::vector<bool> candidate(nodes.size(), false);
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (removed[i] || candidate[i] || !pure_view(nodes[i])) continue;
      if (near.count(nodes[i].inputs[0]) || std::any_of(nodes[i].outputs.begin(), nodes[i].outputs.end(),
                                                          [&](ValueId o) { return near.count(o) > 0; })) {
        candidate[i] = grew = true;
        near.insert(nodes[i].inputs[0]);
        near.insert(nodes[i].outputs.begin(), nodes[i].outputs.end());
      }
    }
  }
  std::vector<int> readers(g.num_values(), 0);
  auto count_reads = [&](const ir::Node& n, int d) {
    for (ValueId in : n.inputs)
      if (in != kNoValue) readers[static_cast<size_t>(in)] += d;
  };
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!removed[i]) count_reads(nodes[i], 1);
  count_reads(fwd, 1);
  count_reads(bwd, 1);
  for (bool shrank = true; shrank;) {
    shrank = false;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (removed[i] || !candidate[i]) continue;
      if (std::any_of(nodes[i].outputs.begin(), nodes[i].outputs.end(),
                      [&](ValueId o) { return readers[static_cast<size_t>(o)] > 0 || kept.count(o); }))
        continue;
      removed[i] = shrank = true;
      count_reads(nodes[i], -1);
    }
  }
  for (ValueId v : lost)
    if (readers[static_cast<size_t>(v)] > 0 || kept.count(v)) return std::nullopt;
  std::vector<ir::Node> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i == m.loss_node) out.push_back(fwd);
    if (i == m.grad_node) out.push_back(bwd);
    if (!removed[i]) out.push_back(nodes[i]);
  }
  return out;
}

}  // namespace

int fuse_linear_cross_entropy(ir::Graph& g, const std::vector<ir::ValueId>& keep) {
  std::set<ValueId> kept(keep.begin(), keep.end());
  for (const ir::Value& val : g.values())
    if (val.role == ir::Role::gradient) kept.insert(val.id);
  int fused = 0;
  std::set<size_t> tried;  // nll_loss_forward nodes that did not match, by their loss value
  for (bool again = true; again;) {
    again = false;
    const View v(g);
    for (size_t i = 0; i < g.nodes().size() && !again; ++i) {
      if (!v.is(i, "aten::nll_loss_forward") || tried.count(static_cast<size_t>(g.nodes()[i].outputs[0]))) continue;
      tried.insert(static_cast<size_t>(g.nodes()[i].outputs[0]));
      Match m;
      if (!match_forward(v, i, m) || !match_backward(v, m)) continue;
      if (auto nodes = rewrite(g, m, kept)) {
        g.nodes() = std::move(*nodes);
        ++fused;
        again = true;  // node indices moved: look again
      }
    }
  }
  return fused;
}

std::vector<ir::ValueId> remove_unused_values(ir::Graph& g) {
  std::vector<bool> used(g.num_values(), false);
  for (const ir::Node& n : g.nodes()) {
    for (ValueId v : n.inputs)
      if (v != kNoValue) used[static_cast<size_t>(v)] = true;
    for (ValueId v : n.outputs) used[static_cast<size_t>(v)] = true;
  }
  for (ValueId v : g.outputs) used[static_cast<size_t>(v)] = true;
  std::vector<ValueId> remap(g.num_values(), kNoValue);
  ir::Graph out;
  out.name = g.name;
  out.data_file = g.data_file;
  for (const ir::Value& val : g.values())
    if (used[static_cast<size_t>(val.id)] || ir::is_persistent(val.role))
      remap[static_cast<size_t>(val.id)] = out.add_value(val.name, val.type, val.role, val.init);
  if (out.num_values() == g.num_values()) return remap;
  for (ir::Node n : g.nodes()) {
    for (ValueId& v : n.inputs)
      if (v != kNoValue) v = remap[static_cast<size_t>(v)];
    for (ValueId& v : n.outputs) v = remap[static_cast<size_t>(v)];
    out.append(std::move(n));
  }
  for (ValueId v : g.outputs) out.outputs.push_back(remap[static_cast<size_t>(v)]);
  g = std::move(out);
  return remap;
}

}  // namespace mutwo::stepfile
