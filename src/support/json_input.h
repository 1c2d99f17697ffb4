// Parsing JSON that mutwo reads from files (profiles, step files, plans,
// tensor-file headers) with a bound on nesting: a deeply nested document is
// refused while it is parsed, before recursive copies or destructors of it
// could overflow the stack; so are numbers no double holds. Errors are
// UserErrors naming `source` and the field. And the typed reading of one field
// after parsing, refusing a missing or mistyped field, a fraction where an
// integer belongs and a number that is not finite.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "support/error.h"
#include "support/units.h"

namespace mutwo {

inline constexpr int kMaxJsonDepth = 64;  // mutwo's own files nest a handful of levels

// Parses `text`, refusing with a UserError naming `source` and, where it can,
// the field by its path ("nodes[3].ms"): text that is not JSON (NaN and
// Infinity included, which Python's json writes), a number beyond a double's
// range (1e400), and nesting deeper than kMaxJsonDepth. (json_input.cpp)
nlohmann::json parse_json_input(const std::string& text, const std::string& source);

// True when `j` is an object whose `key` is the string `want` (a format
// tag); false for anything else, never a throw (json::value would throw a
// type error where the key holds a number).
inline bool json_tag_is(const nlohmann::json& j, const char* key, const std::string& want) {
  if (!j.is_object()) return false;
  auto it = j.find(key);
  return it != j.end() && it->is_string() && it->template get<std::string>() == want;
}

// Reads `key` of the object `j`, a UserError naming `where` and the key when
// it is missing or of the wrong type. Integers must be written as integers
// (1.9 is not a version, 1.5 not a batch) and fit T; numbers must be finite.
template <class T>
T json_field(const nlohmann::json& j, const char* key, const std::string& where) {
  MUTWO_CHECK(j.is_object(), "{}: expected an object, got {}", where, j.type_name());
  auto it = j.find(key);
  MUTWO_CHECK(it != j.end(), "{}: missing field '{}'", where, key);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    MUTWO_CHECK(it->is_number_integer(), "{}: field '{}' must be an integer, got {}", where, key, it->dump());
    MUTWO_CHECK(!it->is_number_unsigned() || it->template get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max()),
                "{}: field '{}' is out of range", where, key);
    MUTWO_CHECK(it->is_number_unsigned() || (it->template get<int64_t>() >= std::numeric_limits<T>::min() &&
                                              it->template get<int64_t>() <= std::numeric_limits<T>::max()),
                "{}: field '{}' is out of range", where, key);
  }
  if constexpr (std::is_floating_point_v<T>) {
    MUTWO_CHECK(it->is_number() && std::isfinite(it->template get<double>()),
                "{}: field '{}' must be a finite number, got {}", where, key, it->dump());
    const T v = it->template get<T>();
    return v == 0 ? T{0} : v;  // -0.0 read as 0: it passes "not negative" and must not print as -0
  }
  try {
    return it->template get<T>();
  } catch (const nlohmann::json::exception&) {
    MUTWO_FAIL("{}: field '{}' has the wrong type ({})", where, key, it->type_name());
  }
}

// Sizes, counts and times are never negative.
template <class T>
T json_non_negative(const nlohmann::json& j, const char* key, const std::string& where) {
  T v = json_field<T>(j, key, where);
  MUTWO_CHECK(v >= 0, "{}: field '{}' must not be negative, got {}", where, key, v);
  return v;
}

// A size or a count: an integer in [0, 1 PiB] (kMaxBytes), so that sums of them cannot overflow.
inline int64_t json_size(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto v = json_non_negative<int64_t>(j, key, where);
  MUTWO_CHECK(v <= kMaxBytes, "{}: field '{}' is {}, more than 1 PiB", where, key, v);
  return v;
}

// A time in milliseconds: finite, non-negative and at most kMaxMs.
inline constexpr double kMaxMs = 1e12;  // 31 years: more than any step, far from overflow in sums
inline double json_ms(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto v = json_non_negative<double>(j, key, where);
  MUTWO_CHECK(v <= kMaxMs, "{}: field '{}' is {} ms, more than 1e12", where, key, v);
  return v;
}

}  // namespace mutwo
