// The training-step graph: values (typed, named, with a role) and nodes in
// execution order. The order of `nodes` is the schedule that the profiler,
// simulator, rewriter and executor all share.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "ir/types.h"

namespace mutwo::ir {

using ValueId = int32_t;
inline constexpr ValueId kNoValue = -1;

// How a value without a producer is filled before the first step. Printed in
// the text form after the role: init=uniform(-0.1,0.1).
struct Init {
  // data: read by the value's name from the graph's tensor file (Graph::data_file).
  enum Kind : uint8_t { none, zeros, ones, uniform, normal, randint, data } kind = none;
  double a = 0;  // uniform: low;  normal: mean
  double b = 0;  // uniform: high; normal: std; randint: high (exclusive)
  bool operator==(const Init& o) const { return kind == o.kind && a == o.a && b == o.b; }
};

struct Value {
  ValueId id = kNoValue;
  std::string name;  // unique, printed as %name: "fc1.out", "fc1.weight.grad", "fc1.weight.adam_m"
  TensorType type;
  Role role = Role::other;
  Init init;  // for values without a producer; optimizer state defaults to zeros
};

// Node attributes: a small ordered list (ops have a handful), printed as {k=v, ...}.
using Attr = std::variant<int64_t, double, std::vector<int64_t>, std::string>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, Attr>> kv) : items_(kv) {}

  Attrs& set(std::string key, Attr value);
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const Attr* find(std::string_view key) const;

  // Typed getters: missing keys or wrong types are internal errors (the op
  // table's shape inference checks attributes before any kernel runs).
  int64_t i(std::string_view key) const;
  double f(std::string_view key) const;  // accepts an int too
  const std::vector<int64_t>& ints(std::string_view key) const;
  const std::string& s(std::string_view key) const;
  int64_t i_or(std::string_view key, int64_t dflt) const;
  double f_or(std::string_view key, double dflt) const;

  const std::vector<std::pair<std::string, Attr>>& items() const { return items_; }
  bool operator==(const Attrs& o) const { return items_ == o.items_; }

 private:
  std::vector<std::pair<std::string, Attr>> items_;
};

struct Node {
  std::string op;                // a row of the op table ("linear", "relu_backward", ...)
  std::vector<ValueId> inputs;   // kNoValue marks an absent optional input
  std::vector<ValueId> outputs;
  Attrs attrs;
  Phase phase = Phase::forward;
  std::string scope;             // module path: "encoder.layer.3.attention"
};

class Graph {
 public:
  std::string name = "graph";
  // The tensor file (safetensors layout) that values with Init::data are read
  // from: a captured step's parameters, buffers and inputs. Empty if none.
  std::string data_file;

  ValueId add_value(std::string name, TensorType type, Role role, Init init = {});
  // This graph's values become `other`'s (same ids and names, same data file); its nodes are
  // left alone. A rewrite that keeps every value id copies them at once this way.
  void copy_values_from(const Graph& other) {
    values_ = other.values_;
    by_name_ = other.by_name_;
    data_file = other.data_file;
  }
  // Makes a unique name from `base` ("x", "x.1", "x.2", ...).
  std::string unique_name(std::string_view base) const;
  void append(Node node) { nodes_.push_back(std::move(node)); }

  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& nodes() { return nodes_; }
  const std::vector<Value>& values() const { return values_; }
  const Value& value(ValueId id) const { return values_.at(static_cast<size_t>(id)); }
  Value& value(ValueId id) { return values_.at(static_cast<size_t>(id)); }
  const TensorType& type(ValueId id) const { return value(id).type; }
  size_t num_values() const { return values_.size(); }

  ValueId find(std::string_view name) const;  // kNoValue if absent
  void rename(ValueId id, std::string name);

  // Values that are results of the step (the loss): kept alive until the end.
  std::vector<ValueId> outputs;

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::unordered_map<std::string, ValueId> by_name_;
};

// Where each value is defined and used, for a fixed node order.
struct UseIndex {
  std::vector<int32_t> producer;            // node index, -1 for graph inputs
  std::vector<std::vector<int32_t>> users;  // node indices in increasing order, each node once
  explicit UseIndex(const Graph& g);
};

}  // namespace mutwo::ir
