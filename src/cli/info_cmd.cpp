// mutwo info: the sizes of a model's training step, counted from its types
// (no tensor is made): parameters, nodes by phase, bytes by role.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <iostream>

#include "cli/commands.h"
#include "support/units.h"

namespace mutwo::cli {

void InfoCommand::add_to(CLI::App& app) {
  step.add_to(app);
  output.add_to(app, "end with one JSON line", /*with_quiet=*/false);
}

int InfoCommand::run() const {
  using nlohmann::json;
  ir::Graph g = step.build();
  int64_t parameters = 0;
  std::array<int64_t, ir::kNumRoles> bytes{};
  for (const ir::Value& v : g.values()) {
    if (v.role == ir::Role::parameter) parameters += v.type.numel();
    bytes[static_cast<size_t>(v.role)] += v.type.bytes();
  }
  std::array<int64_t, 5> phases{};
  for (const ir::Node& n : g.nodes()) ++phases[static_cast<size_t>(n.phase)];
  fmt::print("{}: {} parameters, {} nodes (fwd {}, loss {}, bwd {}, optim {})\n", step.what(),
             parameters, g.nodes().size(), phases[0], phases[1], phases[2], phases[3]);
  for (int r = 0; r < ir::kNumRoles; ++r)
    fmt::print("  {:<16} {:>12}\n", ir::to_string(static_cast<ir::Role>(r)), format_bytes(bytes[static_cast<size_t>(r)]));
  fmt::print("  (activation and other bytes are totals over the step, not what is live at once)\n");
  if (output.json) {
    auto of = [&](ir::Role r) { return bytes[static_cast<size_t>(r)]; };
    json j{{"command", "info"},
           {"model", step.name(g)},
           {"batch", step.graph.empty() ? json(step.batch) : json()},
           {"parameters", parameters},
           {"nodes", g.nodes().size()},
           {"parameter_bytes", of(ir::Role::parameter)},
           {"gradient_bytes", of(ir::Role::gradient)},
           {"optimizer_state_bytes", of(ir::Role::optimizer_state)},
           {"activation_bytes", of(ir::Role::activation)},
           {"buffer_bytes", of(ir::Role::buffer)},
           {"input_bytes", of(ir::Role::input)}};
    std::cout << j.dump() << std::endl;
  }
  return 0;
}

}  // namespace mutwo::cli
