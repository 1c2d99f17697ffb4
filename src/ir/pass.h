// What a pass reports when it is done: its name and the graph it left. The
// CLI's --dump-ir-after and the golden tests (tests/golden/test_golden.cpp) listen
// here; a pass that takes one calls it once it has changed the graph.
#pragma once

#include <functional>
#include <string_view>

#include "ir/graph.h"

namespace mutwo::ir {

using AfterPass = std::function<void(std::string_view pass, const Graph& g)>;

}  // namespace mutwo::ir
