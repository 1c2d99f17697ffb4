// Parsing JSON that mutwo reads from files (profiles, step files, plans,
// tensor-file headers) with a bound on nesting: a deeply nested document is
// refused while it is parsed, before recursive copies or destructors of it
// could overflow the stack. Errors are UserErrors naming `source`.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "support/error.h"

namespace mutwo {

inline constexpr int kMaxJsonDepth = 64;  // mutwo's own files nest a handful of levels

inline nlohmann::json parse_json_input(const std::string& text, const std::string& source) {
  auto bounded = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    MUTWO_CHECK(depth <= kMaxJsonDepth, "{}: JSON nested deeper than {} levels; not a file mutwo wrote", source,
                kMaxJsonDepth);
    return true;
  };
  try {
    return nlohmann::json::parse(text, bounded);
  } catch (const nlohmann::json::parse_error& e) {
    MUTWO_FAIL("{}: not valid JSON (error at byte {}; is the file truncated?)", source, e.byte);
  }
}

}  // namespace mutwo
