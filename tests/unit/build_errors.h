// Build-time error tests: build one node on inputs of given types and return
// the UserError's message; a rejected node must not be appended.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/builder.h"
#include "support/error.h"

namespace mutwo::testing {

// Builds `op(inputs){attrs}` in `scope` on graph inputs of types `ins`.
inline std::string build_error_in(const std::string& scope, const std::vector<ir::TensorType>& ins,
                                  const std::string& op, ir::Attrs attrs) {
  ir::Graph g;
  ops::Builder b(g);
  ops::Builder::Scope s(b, scope);
  std::vector<ir::ValueId> ids;
  for (size_t i = 0; i < ins.size(); ++i) ids.push_back(b.input("in" + std::to_string(i), ins[i], ir::Role::input));
  try {
    b.call(op, ids, std::move(attrs));
  } catch (const UserError& e) {
    EXPECT_TRUE(g.nodes().empty()) << "a rejected node was appended";
    return e.what();
  }
  ADD_FAILURE() << op << " was accepted";
  return "";
}

inline void expect_substrings(const std::string& msg, const std::vector<std::string>& subs) {
  for (const std::string& s : subs) EXPECT_NE(msg.find(s), std::string::npos) << "'" << s << "' not in: " << msg;
}

}  // namespace mutwo::testing
