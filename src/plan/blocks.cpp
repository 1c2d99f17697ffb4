// What a block is, and the drops inside blocks (see blocks.h).
#include "plan/blocks.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "plan/input.h"

namespace mutwo::plan {

std::string block_of(const std::string& scope) {
  size_t start = 0;
  while (start < scope.size()) {
    size_t dot = scope.find('.', start);
    size_t end = dot == std::string::npos ? scope.size() : dot;
    bool digits = end > start && std::all_of(scope.begin() + static_cast<long>(start), scope.begin() + static_cast<long>(end),
                                             [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
    if (digits) return scope.substr(0, end);
    start = end + 1;
  }
  return {};
}

std::vector<ir::ValueId> drop_inside_blocks(const PlanInput& in, const std::vector<std::string>& blocks,
                                            const std::vector<std::string>& keep_outputs_of) {
  const ir::Graph& g = in.graph;
  const auto& nodes = g.nodes();
  ir::UseIndex uses(g);
  std::set<std::string> inside(blocks.begin(), blocks.end());
  std::set<std::string> keep(keep_outputs_of.begin(), keep_outputs_of.end());
  std::vector<ir::ValueId> drop;
  for (const Candidate& c : candidates(in)) {
    const ir::Node& made_by = nodes[static_cast<size_t>(uses.producer[static_cast<size_t>(c.owner)])];
    std::string b = block_of(made_by.scope);
    if (b.empty() || !inside.count(b)) continue;
    bool is_output = false;  // read by a forward node of another block
    for (ir::ValueId m : c.members)
      for (int32_t u : uses.users[static_cast<size_t>(m)]) {
        const ir::Node& user = nodes[static_cast<size_t>(u)];
        is_output |= ir::is_forward(user.phase) && block_of(user.scope) != b;
      }
    if (is_output && keep.count(b)) continue;
    drop.insert(drop.end(), c.members.begin(), c.members.end());
  }
  return drop;
}

}  // namespace mutwo::plan
