// Builder: appends nodes to a graph with the op table's shape inference, so a
// bad shape or dtype is rejected when the graph is built, with the node's scope
// in the message. Model builders and derivative rules both use it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace mutwo::ops {

class Builder {
 public:
  explicit Builder(ir::Graph& g) : g_(g) {}

  ir::Graph& graph() { return g_; }
  const ir::TensorType& type(ir::ValueId v) const { return g_.type(v); }
  const ir::Shape& shape(ir::ValueId v) const { return g_.type(v).shape; }

  ir::Phase phase = ir::Phase::forward;
  std::string scope;

  // A value without a producer: a graph input, parameter, buffer or optimizer state.
  ir::ValueId input(std::string_view name, ir::TensorType type, ir::Role role, ir::Init init = {});

  // Appends `op(inputs) {attrs}` and returns its outputs, named `name` (or
  // "<scope>.<op>" when empty; further outputs get ".1", ".2" suffixes).
  std::vector<ir::ValueId> call(std::string_view op, std::vector<ir::ValueId> inputs, ir::Attrs attrs = {},
                                std::string_view name = {});
  // The same for a single-output op.
  ir::ValueId op(std::string_view op, std::vector<ir::ValueId> inputs, ir::Attrs attrs = {},
                 std::string_view name = {});

  // Enters a module scope for the builder's lifetime: "encoder" then "layer.3" -> "encoder.layer.3".
  class Scope {
   public:
    Scope(Builder& b, std::string_view part);
    ~Scope() { b_.scope = std::move(saved_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Builder& b_;
    std::string saved_;
  };

 private:
  ir::Graph& g_;
};

}  // namespace mutwo::ops
