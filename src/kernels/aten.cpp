// The generic op's kernel (its row is src/ops/aten.cpp): any ATen operator
// through the c10 dispatcher by its schema, for steps captured from PyTorch
// (docs/step-file.md). prepare() resolves a node's schema and decodes its JSON
// arguments once (constants, or where to find a tensor at run time); the
// kernel fills a stack from them, makes the boxed call and puts the returned
// tensors into the node's outputs, checking their types against the captured
// ones on the first run.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/GradMode.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <optional>
#include <string_view>

#ifdef MUTWO_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include "kernels/kernel.h"
#include "kernels/kernels.h"
#include "ops/attrs.h"
#include "ops/op.h"
#include "support/error.h"

namespace mutwo::kernels {

namespace {

using json = nlohmann::json;
using ops::display_name;

// One schema argument, resolved once: a constant, or where to find a tensor at run time.
struct Arg {
  // number: a Python number where ATen wants a tensor, wrapped at each call (not
  // held: a recomputation's copy of the node then allocates what the original did).
  enum Kind { constant, number, tensor, tensor_list, optional_tensor_list, device, generator } kind = constant;
  c10::IValue value;         // constant
  std::vector<int> inputs;   // tensor: one; lists: one per element (-1: None)
};

struct Prepared {
  explicit Prepared(c10::OperatorHandle h) : op(std::move(h)) {}
  c10::OperatorHandle op;
  std::vector<Arg> args;
  std::vector<int64_t> returns;
  std::vector<ir::TensorType> types;  // the captured output types
  bool default_generator = false;     // random, with no generator argument (torch 2's native_dropout)
  bool grad_mode = false;             // one of kGradModeOps
  mutable bool checked = false;  // output types compared with the captured ones (first run)
};

// Kernels that make what their backward reads only under grad mode (oneDNN's
// LSTM layer: its workspace), as mutwo.capture's GRAD_MODE_OPS: run with grad
// mode on and autograd below it, so that nothing is recorded.
constexpr std::string_view kGradModeOps[] = {"aten::mkldnn_rnn_layer"};

c10::TypePtr unwrap_optional(c10::TypePtr t) {
  if (auto o = t->cast<c10::OptionalType>()) return o->getElementType();
  return t;
}

bool is_tensor_type(const c10::TypePtr& t) { return t->kind() == c10::TypeKind::TensorType; }

// A Python number where ATen wants a tensor: a 0-dim wrapped number, as PyTorch makes.
at::Tensor wrapped_number(const c10::Scalar& s) {
  at::Tensor t = at::scalar_tensor(s, at::TensorOptions().dtype(s.type()));
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

int input_index(const json& j, size_t num_inputs, const std::string& where) {
  const std::string& s = j.get_ref<const std::string&>();
  const std::optional<size_t> i = ops::aten_input_ref(s);
  MUTWO_CHECK(i, "{}: expected a tensor reference \"%i\", got \"{}\"", where, s);
  MUTWO_CHECK(*i < num_inputs, "{}: tensor reference {} is not one of the node's {} inputs", where, s, num_inputs);
  return static_cast<int>(*i);
}

double decode_float(const json& j, const std::string& where) {
  const json& f = j.at("f");
  if (f.is_number()) return f.get<double>();
  MUTWO_CHECK(f.is_string(), "{}: a float is {{\"f\": number}} or {{\"f\": \"inf\"|\"-inf\"|\"nan\"}}", where);
  const std::string& s = f.get_ref<const std::string&>();
  if (s == "inf") return INFINITY;
  if (s == "-inf") return -INFINITY;
  if (s == "nan") return NAN;
  MUTWO_FAIL("{}: unknown float \"{}\" (inf, -inf, nan)", where, s);
}

c10::ScalarType decode_dtype(const std::string& s, const std::string& where) {
  auto t = ir::parse_dtype(s);
  MUTWO_CHECK(t, "{}: unknown dtype \"{}\" (f32, f64, f16, bf16, i64, i32, bool, u8)", where, s);
  return to_aten(*t);
}

// A scalar-like JSON value as an IValue for schema type `t` (unwrapped).
c10::IValue decode_scalar(const json& j, const c10::TypePtr& t, const std::string& where) {
  const bool want_float = t->kind() == c10::TypeKind::FloatType;
  if (j.is_boolean()) {
    bool b = j.get<bool>();
    return b;
  }
  if (j.is_number_integer()) {
    int64_t i = j.get<int64_t>();
    if (want_float) return static_cast<double>(i);
    return i;
  }
  MUTWO_CHECK(j.is_object() && j.size() == 1, "{}: unsupported argument {}", where, j.dump());
  const auto it = j.begin();
  const std::string key = it.key();
  const json& v = it.value();
  if (key == "f") {
    double d = decode_float(j, where);
    return d;
  }
  if (key == "s") return v.get<std::string>();
  if (key == "dtype") return static_cast<int64_t>(decode_dtype(v.get<std::string>(), where));
  if (key == "layout") {
    MUTWO_CHECK(v == "strided", "{}: only the strided layout is supported, got {}", where, v.dump());
    return static_cast<int64_t>(at::kStrided);
  }
  if (key == "memory_format") {
    const std::string& m = v.get_ref<const std::string&>();
    if (m == "contiguous") return static_cast<int64_t>(at::MemoryFormat::Contiguous);
    if (m == "preserve") return static_cast<int64_t>(at::MemoryFormat::Preserve);
    if (m == "channels_last") return static_cast<int64_t>(at::MemoryFormat::ChannelsLast);
    if (m == "channels_last_3d") return static_cast<int64_t>(at::MemoryFormat::ChannelsLast3d);
    MUTWO_FAIL("{}: unknown memory format {}", where, v.dump());
  }
  MUTWO_FAIL("{}: unsupported argument {}", where, j.dump());
}

Arg decode_arg(const json& j, const c10::Argument& schema_arg, size_t num_inputs, const std::string& where) {
  Arg a;
  const c10::TypePtr t = unwrap_optional(schema_arg.type());
  if (j.is_null()) {  // None; a generator left to the default becomes the executor's
    a.kind = t->kind() == c10::TypeKind::GeneratorType ? Arg::generator : Arg::constant;
    // None for a tensor the schema does not mark optional: an undefined tensor,
    // as PyTorch's Python binding passes (attn_bias of the efficient attention's backward).
    if (schema_arg.type()->kind() == c10::TypeKind::TensorType) a.value = at::Tensor();
    return a;
  }
  if (j.is_string()) {
    MUTWO_CHECK(is_tensor_type(t), "{}: a tensor where the schema wants {}", where, schema_arg.type()->str());
    a.kind = Arg::tensor;
    a.inputs.push_back(input_index(j, num_inputs, where));
    return a;
  }
  if (j.is_object() && j.contains("device")) {
    a.kind = Arg::device;
    return a;
  }
  if (j.is_array()) {
    auto list = t->cast<c10::ListType>();
    MUTWO_CHECK(list, "{}: a list where the schema wants {}", where, schema_arg.type()->str());
    const c10::TypePtr elem = list->getElementType();
    if (is_tensor_type(unwrap_optional(elem))) {
      a.kind = elem->kind() == c10::TypeKind::OptionalType ? Arg::optional_tensor_list : Arg::tensor_list;
      for (const json& e : j) a.inputs.push_back(e.is_null() ? -1 : input_index(e, num_inputs, where));
      MUTWO_CHECK(a.kind == Arg::optional_tensor_list || std::find(a.inputs.begin(), a.inputs.end(), -1) == a.inputs.end(),
                  "{}: None in a list of tensors that may not hold None", where);
      return a;
    }
    switch (elem->kind()) {
      case c10::TypeKind::BoolType: {
        c10::List<bool> l;
        for (const json& e : j) l.push_back(e.get<bool>());
        a.value = l;
        break;
      }
      case c10::TypeKind::FloatType: {
        std::vector<double> l;
        for (const json& e : j) l.push_back(decode_scalar(e, elem, where).toDouble());
        a.value = l;
        break;
      }
      default: {  // int[], SymInt[]
        std::vector<int64_t> l;
        for (const json& e : j) {
          MUTWO_CHECK(e.is_number_integer(), "{}: expected a list of integers, got {}", where, j.dump());
          l.push_back(e.get<int64_t>());
        }
        a.value = l;
      }
    }
    return a;
  }
  a.value = decode_scalar(j, t, where);
  if (is_tensor_type(t)) a.kind = Arg::number;
  return a;
}

std::shared_ptr<const void> aten_prepare(const ir::Graph& g, const ir::Node& n) {
  const std::string name = display_name(n);
  auto handle = c10::Dispatcher::singleton().findSchema({n.attrs.s("target"), n.attrs.s("overload") == "default" ? "" : n.attrs.s("overload")});
  MUTWO_CHECK(handle.has_value(), "{}: the dispatcher knows no such operator (captured with another torch version?)", name);
  auto p = std::make_shared<Prepared>(*handle);
  const auto& schema = p->op.schema();
  json args;
  try {
    args = json::parse(n.attrs.s("args"));
  } catch (const json::exception& e) {
    MUTWO_FAIL("{}: its args are not JSON: {}", name, e.what());
  }
  MUTWO_CHECK(args.is_array() && args.size() == schema.arguments().size(), "{}: {} arguments given, the schema `{}` has {}",
              name, args.is_array() ? args.size() : 0, toString(schema), schema.arguments().size());
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string where = fmt::format("{} argument {} ({})", name, i, schema.arguments()[i].name());
    try {
      p->args.push_back(decode_arg(args[i], schema.arguments()[i], n.inputs.size(), where));
    } catch (const json::exception& e) {
      MUTWO_FAIL("{}: {}", where, e.what());
    }
  }
  p->returns = n.attrs.ints("returns");
  p->default_generator = ops::has(n, ops::kRandom) &&
                         std::none_of(schema.arguments().begin(), schema.arguments().end(), [](const c10::Argument& a) {
                           return unwrap_optional(a.type())->kind() == c10::TypeKind::GeneratorType;
                         });
  p->grad_mode = std::find(std::begin(kGradModeOps), std::end(kGradModeOps), n.attrs.s("target")) != std::end(kGradModeOps);
  for (ir::ValueId v : n.outputs) p->types.push_back(g.type(v));
  return p;
}

// While alive, the device's default generator continues the executor's
// sequence, for an op that draws from the default generator (it takes no
// generator argument: torch 2's native_dropout, rand_like); the executor's
// generator takes the advanced state back after, and the default one is left
// as it was. CUDA: Philox's seed and offset. CPU: the Mersenne Twister engine
// and the cached normal samples, copied by value (no tensor is allocated, so
// nothing shows in the measured memory). A no-op where the executor's
// generator is the default one (mutwo.torch, a captured CUDA graph).
class DefaultGeneratorSwap {
 public:
  DefaultGeneratorSwap(bool needed, KernelCall& k) {
    if (!needed) return;
    if (k.options.device().is_cpu()) {
      def_ = at::detail::getDefaultCPUGenerator();
      if (def_ == k.generator) return;
      mine_ = &k.generator;
      saved_cpu_ = cpu_state(def_);
      set_cpu_state(def_, cpu_state(*mine_));
      return;
    }
#ifdef MUTWO_WITH_CUDA
    const auto index = k.options.device().has_index() ? k.options.device().index() : c10::DeviceIndex(0);
    def_ = at::cuda::detail::getDefaultCUDAGenerator(index);
    if (def_ == k.generator) return;
    mine_ = &k.generator;
    // Not locked across the op, which takes the generator's mutex itself (a
    // deadlock, seen on CUDA dropout); the executor runs on one thread.
    seed_ = def_.current_seed();
    offset_ = def_.get_offset();
    def_.set_current_seed(mine_->current_seed());
    def_.set_offset(mine_->get_offset());
#endif
  }
  ~DefaultGeneratorSwap() {
    if (!mine_) return;
    if (def_.device().is_cpu()) {
      set_cpu_state(*mine_, cpu_state(def_));
      set_cpu_state(def_, saved_cpu_);
      return;
    }
#ifdef MUTWO_WITH_CUDA
    mine_->set_offset(def_.get_offset());
    def_.set_current_seed(seed_);
    def_.set_offset(offset_);
#endif
  }
  DefaultGeneratorSwap(const DefaultGeneratorSwap&) = delete;
  DefaultGeneratorSwap& operator=(const DefaultGeneratorSwap&) = delete;

 private:
  struct CpuState {
    at::mt19937 engine;
    std::optional<float> next_float;
    std::optional<double> next_double;
  };
  static CpuState cpu_state(const at::Generator& g) {
    auto* impl = at::check_generator<at::CPUGeneratorImpl>(g);
    return {impl->engine(), impl->next_float_normal_sample(), impl->next_double_normal_sample()};
  }
  static void set_cpu_state(at::Generator& g, const CpuState& s) {
    auto* impl = at::check_generator<at::CPUGeneratorImpl>(g);
    impl->set_engine(s.engine);
    impl->set_next_float_normal_sample(s.next_float);
    impl->set_next_double_normal_sample(s.next_double);
  }

  at::Generator def_;
  at::Generator* mine_ = nullptr;
  CpuState saved_cpu_;
  uint64_t seed_ = 0, offset_ = 0;
};

// Whether `t` holds a storage of its own larger than its elements: a new
// tensor laid out like a view (aten::copy of a slice returns self's strides
// and storage offset in a storage of the whole base: 1024 B for an i64
// [8, 15] slice of [8, 16], seen in T5's captured label shift). Every value
// is charged its elements' bytes (analysis::liveness), so it is made compact.
bool owns_more_than_its_elements(const KernelCall& k, const at::Tensor& t) {
  if (!t.defined() || ops::has(k.node, ops::kView) || ops::has(k.node, ops::kInplace)) return false;
  if (t.storage().nbytes() <= static_cast<size_t>(t.numel()) * t.element_size()) return false;
  for (size_t i = 0; i < k.node.inputs.size(); ++i)
    if (k.input(i).defined() && k.input(i).has_storage() && k.input(i).storage().is_alias_of(t.storage()))
      return false;  // an output that aliases an input (an op the capture did not mark a view)
  return true;
}

void put_output(KernelCall& k, const Prepared& p, size_t& flat, const at::Tensor& t) {
  MUTWO_CHECK(flat < p.returns.size(), "{}: returned more tensors than the capture recorded ({})", display_name(k.node),
              p.returns.size());
  int64_t slot = p.returns[flat++];
  if (slot < 0) return;
  MUTWO_CHECK(t.defined(), "{}: output {} is undefined, but the capture recorded a tensor", display_name(k.node), slot);
  k.output(static_cast<size_t>(slot)) = owns_more_than_its_elements(k, t) ? t.clone(at::MemoryFormat::Contiguous) : t;
}

void aten_kernel(KernelCall& k) {
  const auto& p = *static_cast<const Prepared*>(k.state);
  torch::jit::Stack stack;
  stack.reserve(p.args.size());
  for (const Arg& a : p.args) {
    switch (a.kind) {
      case Arg::constant: stack.push_back(a.value); break;
      case Arg::number: stack.emplace_back(wrapped_number(a.value.toScalar())); break;
      case Arg::tensor: {
        const at::Tensor& t = k.input(static_cast<size_t>(a.inputs[0]));
        if (t.defined()) stack.emplace_back(t);
        else stack.emplace_back();  // an optional input the rewrite left out (running statistics of a recomputation)
        break;
      }
      case Arg::tensor_list: {
        c10::List<at::Tensor> l;
        for (int i : a.inputs) l.push_back(k.input(static_cast<size_t>(i)));
        stack.emplace_back(l);
        break;
      }
      case Arg::optional_tensor_list: {
        c10::List<c10::optional<at::Tensor>> l;
        for (int i : a.inputs) l.push_back(i < 0 ? c10::optional<at::Tensor>() : c10::optional<at::Tensor>(k.input(static_cast<size_t>(i))));
        stack.emplace_back(l);
        break;
      }
      case Arg::device: stack.emplace_back(k.options.device()); break;
      case Arg::generator: stack.emplace_back(k.generator); break;
    }
  }
  {
    // A random op without a generator argument draws from the device's
    // default generator: it draws the executor's numbers instead, so that
    // two executors from one seed agree (--check) whatever ran between them.
    DefaultGeneratorSwap swap(p.default_generator, k);
    std::optional<c10::AutoGradMode> grad;
    std::optional<at::AutoDispatchBelowADInplaceOrView> below_autograd;
    if (p.grad_mode) {
      grad.emplace(true);
      below_autograd.emplace();
    }
    p.op.callBoxed(&stack);
  }
  size_t flat = 0;
  for (const c10::IValue& r : stack) {
    if (r.isTensor()) put_output(k, p, flat, r.toTensor());
    else if (r.isTensorList())
      for (const at::Tensor& t : r.toTensorVector()) put_output(k, p, flat, t);
    else put_output(k, p, flat, at::Tensor());  // None, or a scalar (its readers got its captured value)
  }
  MUTWO_CHECK(flat == p.returns.size(), "{}: returned {} tensors, the capture recorded {}", display_name(k.node), flat,
              p.returns.size());
  if (p.checked) return;
  // The first run checks the captured types.
  for (size_t i = 0; i < k.node.outputs.size(); ++i) {
    const at::Tensor& t = k.output(i);
    MUTWO_CHECK(t.defined(), "{}: output {} was not produced", display_name(k.node), i);
    const ir::TensorType& want = p.types[i];
    MUTWO_CHECK(t.sizes().vec() == want.shape && t.scalar_type() == to_aten(want.dtype),
                "{}: output {} is {}{} but the step file declares {}", display_name(k.node), i,
                c10::toString(t.scalar_type()), t.sizes(), ir::to_string(want));
  }
  p.checked = true;
}

}  // namespace

void add_aten_kernels(KernelRows& t) { t.push_back({"aten", {aten_kernel, aten_prepare}}); }

}  // namespace mutwo::kernels
