// --json on failure: what sweep and max-batch share so that stdout's last
// line is one JSON object whether the command finished or threw.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <iostream>
#include <nlohmann/json.hpp>

namespace mutwo::cli {

// Runs `body`. Where it throws and --json is on, stdout's last line is still
// one JSON object: `partial` (what the command found so far, which `body`
// fills) with "error", the message main prints on stderr; the exception goes
// on to main, which picks the exit code as without --json.
template <class Body>
int ending_in_json(bool json_out, nlohmann::json& partial, Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    if (json_out) {
      const auto* aten = dynamic_cast<const c10::Error*>(&e);
      partial["error"] = aten ? aten->what_without_backtrace() : e.what();
      std::cout << partial.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
    }
    throw;
  }
}

}  // namespace mutwo::cli
