// Loading a step file (see step_file.h and docs/step-file.md).
#include "stepfile/step_file.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unordered_map>
#include <unordered_set>

#include "analysis/liveness.h"
#include "analysis/reinplace.h"
#include "ir/text.h"
#include "ops/op.h"
#include "stepfile/fuse_loss.h"
#include "support/error.h"
#include "support/json_input.h"
#include "support/files.h"

namespace mutwo::stepfile {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kMaxTensorHeader = uint64_t{100} << 20;  // safetensors' own bound on a header: 100 MB

// The step file names ir's types; the tensor file safetensors' names.
constexpr std::pair<ir::DType, std::string_view> kSafetensorsTypes[] = {
    {ir::DType::f32, "F32"}, {ir::DType::f64, "F64"}, {ir::DType::f16, "F16"},    {ir::DType::bf16, "BF16"},
    {ir::DType::i64, "I64"}, {ir::DType::i32, "I32"}, {ir::DType::boolean, "BOOL"}, {ir::DType::u8, "U8"}};

ir::DType parse_dtype(const std::string& s, const std::string& where) {
  auto d = ir::parse_dtype(s);
  MUTWO_CHECK(d, "{}: unsupported dtype '{}' (f32, f64, f16, bf16, i64, i32, bool, u8)", where, s);
  return *d;
}

ir::DType parse_safetensors_dtype(const std::string& s, const std::string& where) {
  for (const auto& [t, name] : kSafetensorsTypes)
    if (s == name) return t;
  MUTWO_FAIL("{}: unsupported dtype '{}' (F32, F64, F16, BF16, I64, I32, BOOL)", where, s);
}

// Typed field access with messages that name the field.
const json& field(const json& j, const char* key, const std::string& where) {
  MUTWO_CHECK(j.is_object(), "{}: expected an object", where);
  auto it = j.find(key);
  MUTWO_CHECK(it != j.end(), "{}: missing field '{}'", where, key);
  return *it;
}
std::string str(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  MUTWO_CHECK(v.is_string(), "{}: field '{}' must be a string, got {}", where, key, v.dump());
  return v.get<std::string>();
}
ir::Shape ints(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  MUTWO_CHECK(v.is_array(), "{}: field '{}' must be a list of integers", where, key);
  ir::Shape out;
  for (const json& e : v) {
    MUTWO_CHECK(e.is_number_integer() && e.get<int64_t>() >= 0, "{}: field '{}' must hold integers >= 0, got {}", where,
                key, e.dump());
    out.push_back(e.get<int64_t>());
  }
  return out;
}

bool valid_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

struct Loader {
  ir::Graph g;
  std::unordered_map<std::string, ir::ValueId> by_step_name;  // the step file's names -> values
  std::vector<bool> defined;                                  // made by a node loaded so far, or a graph input

  ir::ValueId value(const std::string& name, const std::string& where) const {
    auto it = by_step_name.find(name);
    MUTWO_CHECK(it != by_step_name.end(), "{}: no value named '{}' in values", where, name);
    return it->second;
  }
};

// Replaces every {"t": name} in `arg` by "%i", appending the value to the node's inputs.
json bind_tensors(Loader& L, const json& arg, ir::Node& node, const std::string& where) {
  if (arg.is_array()) {
    json out = json::array();
    for (const json& e : arg) out.push_back(bind_tensors(L, e, node, where));
    return out;
  }
  if (!arg.is_object() || !arg.contains("t")) return arg;
  MUTWO_CHECK(arg.size() == 1 && arg["t"].is_string(), "{}: a tensor argument is {{\"t\": name}}, got {}", where, arg.dump());
  ir::ValueId v = L.value(arg["t"].get<std::string>(), where);
  MUTWO_CHECK(L.defined[static_cast<size_t>(v)], "{}: %{} is used before any node makes it", where, arg["t"].get<std::string>());
  node.inputs.push_back(v);
  return "%" + std::to_string(node.inputs.size() - 1);
}

// `data_name` empty: the tensors come from the caller (mutwo.torch), not a file.
void load_values(Loader& L, const json& values, const fs::path& dir, const std::string& data_name) {
  MUTWO_CHECK(values.is_array(), "values: expected a list");
  const std::string data_path = data_name.empty() ? std::string() : (dir / data_name).string();
  const auto index = data_name.empty() ? std::map<std::string, TensorEntry>() : read_tensor_index(data_path);
  for (size_t i = 0; i < values.size(); ++i) {
    const json& v = values[i];
    std::string where = fmt::format("values[{}]", i);
    const std::string name = str(v, "name", where);
    where = fmt::format("value '{}'", name);
    MUTWO_CHECK(valid_name(name), "{}: names are letters, digits, '_', '.' and '-'", where);
    MUTWO_CHECK(!L.by_step_name.count(name), "{}: defined twice", where);
    const std::string role = str(v, "role", where);
    ir::TensorType type{ints(v, "shape", where), parse_dtype(str(v, "dtype", where), where)};
    try {
      type.numel();  // bounded now: a value the loss fusion removes is never sized later
    } catch (const UserError& e) {
      MUTWO_FAIL("{}: field 'shape': {}", where, e.what());
    }
    std::string graph_name = name;
    ir::Role r = ir::Role::other;
    ir::Init init;
    bool from_data = false;
    if (role == "parameter" || role == "buffer") {
      graph_name = str(v, "qualname", where);
      r = role == "parameter" ? ir::Role::parameter : ir::Role::buffer;
      from_data = true;
    } else if (role == "input") {
      const json& idx = field(v, "index", where);
      MUTWO_CHECK(idx.is_number_integer(), "{}: field 'index' must be an integer", where);
      graph_name = fmt::format("input{}", idx.get<int64_t>());
      r = ir::Role::input;
      from_data = true;
    } else if (role == "constant") {
      r = ir::Role::buffer;
      from_data = true;
    } else if (role == "tangent") {
      r = ir::Role::input;
      init.kind = ir::Init::ones;
    } else if (role == "gradient") {
      r = ir::Role::gradient;
    } else {
      MUTWO_CHECK(role == "intermediate", "{}: unknown role '{}' (parameter, buffer, input, constant, tangent, gradient, intermediate)",
                  where, role);
    }
    if (from_data) init.kind = ir::Init::data;
    if (from_data && !data_path.empty()) {
      auto it = index.find(graph_name);
      MUTWO_CHECK(it != index.end(), "{}: no tensor '{}' in {}", where, graph_name, data_path);
      MUTWO_CHECK(it->second.shape == type.shape && it->second.dtype == type.dtype,
                  "{}: {} declares {}{} but values declares {}", where, data_path, ir::to_string(it->second.dtype),
                  ir::shape_string(it->second.shape), ir::to_string(type));
    }
    MUTWO_CHECK(valid_name(graph_name) && L.g.find(graph_name) == ir::kNoValue, "{}: its name '{}' is invalid or taken", where,
                graph_name);
    ir::ValueId id = L.g.add_value(graph_name, type, r, init);
    L.by_step_name.emplace(name, id);
    L.defined.push_back(ir::is_persistent(r));
  }
  if (!data_path.empty()) {
    // Counts that agree: every tensor of the file is a value's (a stray one is a file of another step).
    for (const auto& [tensor, entry] : index)
      MUTWO_CHECK(L.g.find(tensor) != ir::kNoValue && L.g.value(L.g.find(tensor)).init.kind == ir::Init::data,
                  "{} holds tensor '{}', which no parameter, buffer, input or constant of values names", data_path, tensor);
  }
  if (!data_path.empty()) L.g.data_file = fs::absolute(data_path).lexically_normal().string();  // rewritten.ir may be run from elsewhere
}

// The node's tags for the generic op, from what the step file says of its schema.
std::string node_tags(Loader& L, const json& n, ir::Node& node, const std::vector<int>& first_input_of_arg,
                      const std::string& where) {
  std::vector<std::string> tags;
  bool view = false, inplace = false, random = false;
  for (const json& t : field(n, "tags", where)) {
    MUTWO_CHECK(t.is_string(), "{}: tags must be strings", where);
    if (t == "nondeterministic_seeded") random = true;
    else if (t == "view") view = true;
    else if (t == "inplace") inplace = true;
  }
  const json& alias = field(n, "alias_of", where);
  MUTWO_CHECK(alias.is_null() || alias.is_number_integer(), "{}: alias_of must be an integer or null", where);
  MUTWO_CHECK(alias.is_null() || alias.get<int64_t>() == 0,
              "{}: its outputs alias argument {}; mutwo supports ops whose outputs alias their first argument only", where,
              alias.is_null() ? 0 : alias.get<int64_t>());
  MUTWO_CHECK(!(view || inplace) || !alias.is_null(), "{}: a view or in-place op needs alias_of", where);
  MUTWO_CHECK(alias.is_null() || (!first_input_of_arg.empty() && first_input_of_arg[0] == 0),
              "{}: its outputs alias argument 0, which is not a tensor", where);
  std::vector<int64_t> mutates;
  for (const json& m : field(n, "mutates", where)) {
    MUTWO_CHECK(m.is_number_integer() && m.get<int64_t>() >= 0 &&
                    static_cast<size_t>(m.get<int64_t>()) < first_input_of_arg.size() &&
                    first_input_of_arg[static_cast<size_t>(m.get<int64_t>())] >= 0,
                "{}: mutates {} does not name a tensor argument", where, m.dump());
    int in = first_input_of_arg[static_cast<size_t>(m.get<int64_t>())];
    if (inplace && in == 0) continue;  // the aliased argument: resolve_inplace
    ir::ValueId v = node.inputs[static_cast<size_t>(in)];
    MUTWO_CHECK(ir::is_persistent(L.g.value(v).role) && L.g.value(v).role != ir::Role::input,
                "{}: writes into %{}, which is not a parameter or buffer; capture the step functionalised (torch 2.x)",
                where, L.g.value(v).name);
    mutates.push_back(in);
  }
  if (random) tags.push_back("random");
  if (view || inplace) tags.push_back("view");  // an in-place write over argument 0 returns it: resolve_inplace
  if (inplace) tags.push_back("inplace");
  if (!mutates.empty()) node.attrs.set("mutates", mutates);
  std::string out;
  for (const auto& t : tags) out += (out.empty() ? "" : ",") + t;
  return out;
}

// A random op is recomputed only by replaying its generator state, and
// dropout's output need not be random: `out, mask = native_dropout(x, p,
// true)` becomes the draw (its output, read by nobody, freed at once, and the
// mask) and `out = native_dropout_backward(x, mask, 1/(1-p))`, x * mask *
// scale as the forward kernel computes it, which recomputation repeats
// without the generator: a bool mask is kept (or replayed) instead of the
// scaled output (the zoo's dropout_mask and dropout_apply).
void split_dropout(Loader& L, ir::Node node, const json& args) {
  const bool train = args.size() == 3 && args[2].is_boolean() && args[2].get<bool>();
  const double p = args.size() == 3 && args[1].is_object() && args[1].contains("f") && args[1]["f"].is_number()
                       ? args[1]["f"].get<double>()
                       : 1.0;
  if (!train || !(p > 0 && p < 1) || node.outputs.size() != 2 || node.inputs.size() != 1) {
    L.g.append(std::move(node));
    return;
  }
  const ir::ValueId out = node.outputs[0], mask = node.outputs[1];
  ir::Node apply;
  apply.op = "aten";
  apply.inputs = {node.inputs[0], mask};
  apply.outputs = {out};
  apply.scope = node.scope;
  apply.attrs = {{"target", std::string("aten::native_dropout_backward")}, {"overload", std::string("default")},
                 {"args", json::array({"%0", "%1", {{"f", 1.0 / (1.0 - p)}}}).dump()}, {"returns", std::vector<int64_t>{0}}};
  const ir::ValueId draw = L.g.add_value(L.g.unique_name(L.g.value(out).name + ".draw"), L.g.type(out), ir::Role::other);
  L.defined.push_back(true);
  node.outputs[0] = draw;
  L.g.append(std::move(node));
  L.g.append(std::move(apply));
}

// Arguments that ATen's kernels use without checking them first, so that a
// bad value crashes the process instead of raising an error: refused here.
// (The fuzzer found convolution's groups: 0 divides by zero, SIGFPE.)
void check_kernel_preconditions(const std::string& target, const json& args, const std::string& where) {
  // groups' position in convolution(input, weight, bias, stride, padding,
  // dilation, transposed, output_padding, groups) and convolution_backward
  // (grad_output, input, weight, bias_sizes, stride, padding, dilation,
  // transposed, output_padding, groups, output_mask).
  const size_t groups = target == "aten::convolution" ? 8 : target == "aten::convolution_backward" ? 9 : 0;
  if (groups && args.size() > groups)
    MUTWO_CHECK(args[groups].is_number_integer() && args[groups].get<int64_t>() >= 1,
                "{}: groups (argument {}) must be a positive integer, got {}", where, groups, args[groups].dump());
}

void load_node(Loader& L, const json& n, size_t index) {
  std::string where = fmt::format("nodes[{}]", index);
  const std::string target = str(n, "target", where);
  const std::string overload = str(n, "overload", where);
  where = fmt::format("node {} ({}.{})", index, target, overload);
  MUTWO_CHECK(target.rfind("aten::", 0) == 0 || target.rfind("prims::", 0) == 0,
              "{}: not an ATen operator; mutwo runs ATen ops only (a higher-order op or a graph break?)", where);
  ir::Node node;
  node.op = "aten";
  const json& args = field(n, "args", where);
  MUTWO_CHECK(args.is_array(), "{}: args must be a list", where);
  check_kernel_preconditions(target, args, where);
  json bound = json::array();
  std::vector<int> first_input_of_arg;
  for (const json& a : args) {
    size_t before = node.inputs.size();
    bound.push_back(bind_tensors(L, a, node, where));
    first_input_of_arg.push_back(node.inputs.size() > before ? static_cast<int>(before) : -1);
  }
  node.attrs.set("target", target);
  node.attrs.set("overload", overload);
  node.attrs.set("args", bound.dump());
  std::string tags = node_tags(L, n, node, first_input_of_arg, where);
  if (!tags.empty()) node.attrs.set("tags", tags);
  const json& outs = field(n, "outputs", where);
  MUTWO_CHECK(outs.is_array(), "{}: outputs must be a list", where);
  std::vector<int64_t> returns;
  for (const json& o : outs) {
    if (o.is_null()) {
      returns.push_back(-1);
      continue;
    }
    MUTWO_CHECK(o.is_string(), "{}: an output is a value name or null, got {}", where, o.dump());
    ir::ValueId v = L.value(o.get<std::string>(), where);
    MUTWO_CHECK(!L.defined[static_cast<size_t>(v)], "{}: output %{} is a graph input or made twice", where, o.get<std::string>());
    L.defined[static_cast<size_t>(v)] = true;
    returns.push_back(static_cast<int64_t>(node.outputs.size()));
    node.outputs.push_back(v);
  }
  node.attrs.set("returns", returns);
  if (auto it = n.find("scope"); it != n.end() && !it->is_null()) {
    MUTWO_CHECK(it->is_string(), "{}: scope must be a string, got {}", where, it->dump());
    node.scope = it->get<std::string>();
    MUTWO_CHECK(node.scope.empty() || valid_name(node.scope), "{}: scope '{}' is not a module path (letters, digits, '_', "
                "'.' and '-')", where, node.scope);
  }
  if (target == "aten::native_dropout") return split_dropout(L, std::move(node), bound);
  L.g.append(std::move(node));
}

// An in-place write over argument 0, loaded as a view: into persistent state
// it is an update that is never repeated (mutates input 0); into a temporary,
// a buffer reused (overwrite: liveness checks that nothing reads the old
// contents after it). Which of the two, the storage aliasing says.
void resolve_inplace(ir::Graph& g) {
  const analysis::Liveness L = analysis::analyze_liveness(g);
  for (ir::Node& n : g.nodes()) {
    if (!ops::has(n, ops::kInplace) || !ops::has(n, ops::kView)) continue;
    const ir::Value& root = g.value(L.storage[static_cast<size_t>(n.inputs[0])]);
    if (!ir::is_persistent(root.role)) {
      std::string tags = n.attrs.s("tags");
      tags.replace(tags.find("view"), 4, "overwrite");
      n.attrs.set("tags", tags);
      continue;
    }
    MUTWO_CHECK(root.role != ir::Role::input, "{} writes into the input %{}", ops::display_name(n), root.name);
    std::vector<int64_t> mutates = n.attrs.has("mutates") ? n.attrs.ints("mutates") : std::vector<int64_t>{};
    mutates.insert(mutates.begin(), 0);
    n.attrs.set("mutates", mutates);
  }
}

// Phases from structure: a node is forward if a root (the loss, or a module's
// outputs) depends on it, else backward. The forward nodes go first, each part
// in the captured order (a node no root depends on feeds nothing a root
// depends on, so moving it later keeps every use after its definition).
void order_by_phase(ir::Graph& g, std::vector<ir::ValueId> roots) {
  ir::UseIndex uses(g);
  auto& nodes = g.nodes();
  std::vector<bool> feeds(nodes.size(), false);
  std::vector<ir::ValueId> work = std::move(roots);
  while (!work.empty()) {
    ir::ValueId v = work.back();
    work.pop_back();
    int32_t p = uses.producer[static_cast<size_t>(v)];
    if (p < 0 || feeds[static_cast<size_t>(p)]) continue;
    feeds[static_cast<size_t>(p)] = true;
    for (ir::ValueId in : nodes[static_cast<size_t>(p)].inputs)
      if (in != ir::kNoValue) work.push_back(in);
  }
  std::vector<ir::Node> ordered;
  ordered.reserve(nodes.size());
  std::vector<size_t> backward;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!feeds[i]) {
      backward.push_back(i);
      continue;
    }
    ordered.push_back(nodes[i]);
    ordered.back().phase = ir::Phase::forward;
  }
  // In the backward part a view waits for its first reader: the joint graph
  // makes views of saved activations (torch 1.13's detach chains) in the
  // forward part, and a view read at the start of the backward pass would
  // make a recomputation of what it shows run there, at the loss's peak,
  // instead of where the gradient needs it.
  std::vector<bool> sinks(nodes.size(), false), emitted(nodes.size(), false);
  for (size_t i : backward) {
    const uint32_t t = ops::tags(nodes[i]);
    sinks[i] = (t & ops::kView) && !(t & (ops::kInplace | ops::kOverwrite | ops::kRandom));
  }
  auto emit = [&](auto&& self, size_t i) -> void {
    if (emitted[i]) return;
    emitted[i] = true;
    for (ir::ValueId in : nodes[i].inputs) {
      if (in == ir::kNoValue) continue;
      int32_t p = uses.producer[static_cast<size_t>(in)];
      if (p >= 0 && sinks[static_cast<size_t>(p)]) self(self, static_cast<size_t>(p));
    }
    ordered.push_back(nodes[i]);
    ordered.back().phase = ir::Phase::backward;
  };
  for (size_t i : backward)
    if (!sinks[i]) emit(emit, i);
  for (size_t i : backward) emit(emit, i);  // views nobody reads, at the end
  nodes = std::move(ordered);
}

// Scopes where the capture gave none (torch 1.13 records no module path), so
// that the layer-wise planners find blocks: a forward node that reads a
// parameter or buffer takes its module ("layers.3.attention.wq" from
// "layers.3.attention.wq.weight"); any other forward node the scope of its
// latest-made input. A heuristic: a norm that opens a block belongs to the
// block before it until it reads its own weight.
void infer_scopes(ir::Graph& g) {
  auto& nodes = g.nodes();
  for (const ir::Node& n : nodes)
    if (!n.scope.empty()) return;
  std::vector<std::string> scope_of(g.num_values());
  std::vector<int32_t> made_at(g.num_values(), -1);
  for (size_t i = 0; i < nodes.size() && nodes[i].phase == ir::Phase::forward; ++i) {
    ir::Node& n = nodes[i];
    int32_t latest = -1;
    for (ir::ValueId v : n.inputs) {
      if (v == ir::kNoValue) continue;
      const ir::Value& val = g.value(v);
      const size_t dot = val.name.rfind('.');
      if ((val.role == ir::Role::parameter || val.role == ir::Role::buffer) && dot != std::string::npos) {
        n.scope = val.name.substr(0, dot);
        break;
      }
      if (made_at[static_cast<size_t>(v)] > latest && !scope_of[static_cast<size_t>(v)].empty()) {
        latest = made_at[static_cast<size_t>(v)];
        n.scope = scope_of[static_cast<size_t>(v)];
      }
    }
    for (ir::ValueId o : n.outputs) {
      scope_of[static_cast<size_t>(o)] = n.scope;
      made_at[static_cast<size_t>(o)] = static_cast<int32_t>(i);
    }
  }
}

}  // namespace

std::string tensor_file_header(const std::vector<std::pair<std::string, TensorEntry>>& tensors) {
  json header = {{"__metadata__", {{"format", "mutwo-step-data"}, {"version", "1"}}}};
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    std::string_view dtype;
    for (const auto& [d, st] : kSafetensorsTypes)
      if (d == t.dtype) dtype = st;
    header[name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  const std::string h = header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  return out + h;
}

bool is_step_file(const std::string& path) { return fs::path(path).extension() == ".json"; }

std::map<std::string, TensorEntry> read_tensor_index(const std::string& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  MUTWO_CHECK(!ec && fs::exists(status),
              "cannot open the tensor file {}: no such file; it must lie next to the step file, as capture wrote it", path);
  MUTWO_CHECK(fs::is_regular_file(status), "the tensor file {} is not a regular file (a folder or a device?)", path);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  MUTWO_CHECK(in, "cannot open the tensor file {}", path);
  const auto size = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  uint64_t header_len = 0;
  unsigned char len_bytes[8];
  MUTWO_CHECK(size >= 8 && in.read(reinterpret_cast<char*>(len_bytes), 8), "{}: truncated (no header length)", path);
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | len_bytes[i];
  MUTWO_CHECK(header_len <= static_cast<uint64_t>(size - 8), "{}: truncated (header of {} bytes in a file of {})", path,
              header_len, size);
  MUTWO_CHECK(header_len <= kMaxTensorHeader, "{}: a header of {} bytes, more than the {} a tensor file's index takes", path,
              header_len, kMaxTensorHeader);
  std::string header(header_len, '\0');
  MUTWO_CHECK(in.read(header.data(), static_cast<std::streamsize>(header_len)), "{}: truncated in its header", path);
  const json h = parse_json_input(header, path + " (its header)");
  MUTWO_CHECK(h.is_object(), "{}: its header is not a JSON object", path);
  const json meta = h.contains("__metadata__") ? h["__metadata__"] : json();
  MUTWO_CHECK(json_tag_is(meta, "format", "mutwo-step-data") && json_tag_is(meta, "version", "1"),
              "{}: its header's __metadata__ is not {{\"format\": \"mutwo-step-data\", \"version\": \"1\"}} (write "
              "tensor files with python/mutwo/capture.py or mutwo run --save)", path);
  const int64_t data_start = 8 + static_cast<int64_t>(header_len);
  const int64_t data_bytes = size - data_start;
  std::map<std::string, TensorEntry> out;
  for (const auto& [name, e] : h.items()) {
    if (name == "__metadata__") continue;
    const std::string where = fmt::format("{}: tensor '{}'", path, name);
    TensorEntry t;
    t.dtype = parse_safetensors_dtype(str(e, "dtype", where), where);
    t.shape = ints(e, "shape", where);
    ir::Shape range = ints(e, "data_offsets", where);
    MUTWO_CHECK(range.size() == 2 && range[0] <= range[1], "{}: data_offsets must be [begin, end]", where);
    MUTWO_CHECK(range[1] <= data_bytes, "{}: truncated (its bytes end at {} of a data section of {})", where, range[1],
                data_bytes);
    t.offset = data_start + range[0];
    t.bytes = range[1] - range[0];
    const ir::TensorType type{t.shape, t.dtype};
    int64_t expected = 0;
    try {
      expected = type.bytes();
    } catch (const UserError& e) {
      MUTWO_FAIL("{}: {}", where, e.what());
    }
    MUTWO_CHECK(t.bytes == expected, "{}: {} bytes for {} elements of {}", where, t.bytes, type.numel(),
                ir::to_string(t.dtype));
    out.emplace(name, std::move(t));
  }
  // The tensors' bytes tile the data section, as safetensors has it (and
  // python/mutwo/_files.py reads it): no gap, no overlap, nothing after the
  // last. A header length a byte short, ending in the header's padding, would
  // otherwise shift every tensor by a byte (the fuzzer found it accepted).
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) in the data section
  for (const auto& [name, t] : out) ranges.emplace_back(t.offset - data_start, t.offset - data_start + t.bytes);
  std::sort(ranges.begin(), ranges.end());
  int64_t end = 0;
  for (const auto& [begin, stop] : ranges) {
    MUTWO_CHECK(begin == end, "{}: its tensors' bytes {} at byte {} of the data section", path,
                begin > end ? "leave a gap" : "overlap", std::min(begin, end));
    end = stop;
  }
  MUTWO_CHECK(end == data_bytes, "{}: {} bytes after its last tensor's, in a data section of {} (a wrong header length?)",
              path, data_bytes - end, data_bytes);
  return out;
}

namespace {

json parse_json(const std::string& text, const std::string& source) { return parse_json_input(text, source); }

// The new buffer values of a functionalised graph (torch 2.x) copied into
// the buffers; returns the copies' outputs.
std::vector<ir::ValueId> append_buffer_updates(Loader& L, const json& doc) {
  std::vector<ir::ValueId> out;
  auto it = doc.find("buffer_updates");
  if (it == doc.end()) return out;
  MUTWO_CHECK(it->is_array(), "field 'buffer_updates': expected a list");
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string where = fmt::format("buffer_updates[{}]", i);
    ir::ValueId buf = L.value(str((*it)[i], "buffer", where), where);
    ir::ValueId val = L.value(str((*it)[i], "value", where), where);
    MUTWO_CHECK(L.g.value(buf).role == ir::Role::buffer, "{}: %{} is not a buffer", where, L.g.value(buf).name);
    MUTWO_CHECK(L.g.type(buf) == L.g.type(val), "{}: %{} is {}, its update {}", where, L.g.value(buf).name,
                ir::to_string(L.g.type(buf)), ir::to_string(L.g.type(val)));
    ir::Node copy;
    copy.op = "aten";
    copy.inputs = {buf, val};
    copy.outputs = {L.g.add_value(L.g.unique_name(L.g.value(buf).name + ".updated"), L.g.type(buf), ir::Role::other)};
    copy.attrs = {{"target", std::string("aten::copy_")}, {"overload", std::string("default")},
                  {"args", std::string(R"(["%0","%1",false])")}, {"tags", std::string("view,inplace")},
                  {"returns", std::vector<int64_t>{0}}};
    out.push_back(copy.outputs[0]);
    L.g.append(std::move(copy));
  }
  return out;
}

// The vocabulary head fused (fuse_loss.h): `kept` (the loss or the module's
// outputs, the buffer updates, the values the caller holds) is read after it,
// as are the gradients; the values it left unmade are dropped, and the
// loader's names and `kept` follow the renumbering.
void fuse_loss(Loader& L, const std::vector<ir::ValueId*>& kept) {
  std::vector<ir::ValueId> keep;
  for (const ir::ValueId* v : kept) keep.push_back(*v);
  if (fuse_linear_cross_entropy(L.g, keep) == 0) return;
  const std::vector<ir::ValueId> remap = remove_unused_values(L.g);
  for (auto it = L.by_step_name.begin(); it != L.by_step_name.end();) {
    it->second = remap[static_cast<size_t>(it->second)];
    it = it->second == ir::kNoValue ? L.by_step_name.erase(it) : std::next(it);
  }
  for (ir::ValueId* v : kept) *v = remap[static_cast<size_t>(*v)];
}

// (primal, gradient) for every value with role "gradient", in the file's order.
// `inputs_too`: a gradient may be of an input (mutwo.torch), not only of a parameter.
std::vector<std::pair<ir::ValueId, ir::ValueId>> gradients(const Loader& L, const json& doc, bool inputs_too) {
  std::vector<std::pair<ir::ValueId, ir::ValueId>> grads;
  for (const json& v : doc["values"]) {
    if (v.value("role", "") != "gradient") continue;
    const std::string where = fmt::format("value '{}'", v.value("name", ""));
    ir::ValueId p = L.value(str(v, "of", where), where + ": field 'of'");
    const ir::Role r = L.g.value(p).role;
    MUTWO_CHECK(r == ir::Role::parameter || (inputs_too && r == ir::Role::input),
                "{}: 'of' names %{}, which is not a parameter{}", where, L.g.value(p).name, inputs_too ? " or input" : "");
    ir::ValueId gv = L.value(v["name"].get<std::string>(), where);
    MUTWO_CHECK(L.g.type(gv) == L.g.type(p), "{}: a gradient of type {} for a parameter of type {}", where,
                ir::to_string(L.g.type(gv)), ir::to_string(L.g.type(p)));
    grads.emplace_back(p, gv);
  }
  return grads;
}

// The values, nodes and buffer updates of a step file (both kinds).
Loader load_graph(const json& doc, const fs::path& dir, bool module) {
  const bool is_step = json_tag_is(doc, "format", "mutwo-step");
  MUTWO_CHECK(is_step, "field 'format': expected \"mutwo-step\" (write step files with python/mutwo/capture.py)");
  const json& version = field(doc, "version", "top level");
  MUTWO_CHECK(version == kVersion, "field 'version': {} is not supported; this mutwo reads version {}", version.dump(), kVersion);
  Loader L;
  L.g.name = doc.contains("name") ? str(doc, "name", "top level") : "step";
  MUTWO_CHECK(valid_name(L.g.name), "field 'name': '{}' is not a name (letters, digits, '_', '.' and '-')", L.g.name);
  load_values(L, field(doc, "values", "top level"), dir, module ? std::string() : str(doc, "data", "top level"));
  const json& nodes = field(doc, "nodes", "top level");
  MUTWO_CHECK(nodes.is_array() && !nodes.empty(), "field 'nodes': expected a non-empty list");
  for (size_t i = 0; i < nodes.size(); ++i) load_node(L, nodes[i], i);
  return L;
}

}  // namespace

ir::Graph load_step(const std::string& path, const autodiff::OptimizerConfig& optimizer, const LoadOptions& options) {
  const json doc = parse_json(read_file(path), path);
  try {
    MUTWO_CHECK(!doc.is_object() || !doc.contains("loss") || !doc["loss"].is_null(),
                "field 'loss' is null: this step was captured for mutwo.torch (a module's outputs, no loss); "
                "capture it with a loss_fn for the command line");
    Loader L = load_graph(doc, fs::path(path).parent_path(), /*module=*/false);
    if (!doc.contains("name")) {  // the file's stem, made a name (the IR's text form has no spaces in one)
      L.g.name = fs::path(path).stem().string();
      for (char& c : L.g.name)
        if (!valid_name(std::string(1, c))) c = '_';
      if (L.g.name.empty()) L.g.name = "step";
    }
    ir::ValueId loss = L.value(str(doc, "loss", "top level"), "field 'loss'");
    MUTWO_CHECK(L.g.type(loss).shape.empty() && ir::is_floating(L.g.type(loss).dtype),
                "field 'loss': %{} must be a floating-point scalar, not {}", L.g.value(loss).name, ir::to_string(L.g.type(loss)));
    std::vector<ir::ValueId> updates = append_buffer_updates(L, doc);
    if (options.fuse_loss) {
      std::vector<ir::ValueId*> kept{&loss};
      for (ir::ValueId& u : updates) kept.push_back(&u);
      fuse_loss(L, kept);
    }
    resolve_inplace(L.g);
    order_by_phase(L.g, {loss});
    infer_scopes(L.g);
    const auto grads = gradients(L, doc, /*inputs_too=*/false);
    autodiff::assign_roles(L.g);
    autodiff::append_optimizer(L.g, grads, optimizer);
    L.g.outputs = {loss};
    analysis::reinplace(L.g);
    ops::verify(L.g);
    return std::move(L.g);
  } catch (const UserError& e) {
    MUTWO_FAIL("{}: {}", path, e.what());
  }
}

ir::Graph load_graph_file(const std::string& path, const autodiff::OptimizerConfig& optimizer,
                          const LoadOptions& options) {
  if (is_step_file(path)) return load_step(path, optimizer, options);
  try {
    ir::Graph g = ir::parse(read_file(path));
    MUTWO_CHECK(!g.outputs.empty(), "the graph names no outputs (a last line 'outputs %loss')");
    ops::verify(g);
    return g;
  } catch (const UserError& e) {
    MUTWO_FAIL("--graph {}: {}", path, e.what());
  }
}

ModuleStep load_module_step(const std::string& text, const std::string& source) {
  const json doc = parse_json(text, source);
  try {
    Loader L = load_graph(doc, {}, /*module=*/true);
    ModuleStep m;
    const json& outs = field(doc, "outputs", "top level");
    MUTWO_CHECK(outs.is_array() && !outs.empty(), "field 'outputs': expected a non-empty list of value names");
    for (const json& o : outs) {
      MUTWO_CHECK(o.is_string(), "field 'outputs': names are strings, got {}", o.dump());
      const ir::ValueId v = L.value(o.get<std::string>(), "field 'outputs'");
      MUTWO_CHECK(!ir::is_persistent(L.g.value(v).role), "field 'outputs': %{} is a graph input, not made by a node",
                  L.g.value(v).name);
      MUTWO_CHECK(std::find(m.outputs.begin(), m.outputs.end(), v) == m.outputs.end(), "field 'outputs': %{} twice",
                  L.g.value(v).name);
      m.outputs.push_back(v);
    }
    for (size_t i = 0; i < doc["values"].size(); ++i) {
      const json& v = doc["values"][i];
      const std::string role = v.value("role", "");
      const ir::ValueId id = static_cast<ir::ValueId>(i);  // values are added in the file's order
      if (role == "parameter" || role == "buffer" || role == "input") m.primals.push_back(id);
      if (role == "constant") m.constants.push_back(id);
      if (role != "tangent") continue;
      const std::string where = fmt::format("value '{}'", v.value("name", ""));
      const ir::ValueId of = L.value(str(v, "of", where), where + ": field 'of'");
      auto pos = std::find(m.outputs.begin(), m.outputs.end(), of);
      MUTWO_CHECK(pos != m.outputs.end(), "{}: 'of' names %{}, which is not an output", where, L.g.value(of).name);
      MUTWO_CHECK(L.g.type(of) == L.g.type(id), "{}: a tangent of type {} for an output of type {}", where,
                  ir::to_string(L.g.type(id)), ir::to_string(L.g.type(of)));
      m.tangents.emplace_back(static_cast<size_t>(pos - m.outputs.begin()), id);
    }
    std::vector<ir::ValueId> roots = m.outputs;
    for (ir::ValueId v : append_buffer_updates(L, doc)) roots.push_back(v);  // updated in the forward pass, as eager does
    {  // a module that returns the loss of its vocabulary head (not the logits): fused as for the command line
      std::vector<ir::ValueId*> kept;
      for (auto* list : {&roots, &m.outputs, &m.primals, &m.constants})
        for (ir::ValueId& v : *list) kept.push_back(&v);
      for (auto& [pos, t] : m.tangents) kept.push_back(&t);
      fuse_loss(L, kept);
    }
    resolve_inplace(L.g);
    order_by_phase(L.g, roots);
    infer_scopes(L.g);
    m.gradients = gradients(L, doc, /*inputs_too=*/true);
    autodiff::assign_roles(L.g);
    L.g.outputs = m.outputs;
    for (const auto& [p, gv] : m.gradients) L.g.outputs.push_back(gv);
    analysis::reinplace(L.g);
    ops::verify(L.g);
    m.graph = std::move(L.g);
    return m;
  } catch (const UserError& e) {
    MUTWO_FAIL("{}: {}", source, e.what());
  }
}

}  // namespace mutwo::stepfile
