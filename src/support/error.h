// Errors: a user's mistake (bad input, say what to do next) versus our own bug.
//
// MUTWO_CHECK(cond, fmt, args...)  -> throws mutwo::UserError; the CLI prints it
//                                     on one line and exits with code 2.
// MUTWO_ASSERT(cond, fmt, args...) -> throws mutwo::InternalError: a broken
//                                     invariant inside mutwo, never the user's fault.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include <stdexcept>
#include <string>

namespace mutwo {

struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct InternalError : std::logic_error {
  using std::logic_error::logic_error;
};

[[noreturn]] void throw_internal(const char* file, int line, const char* cond, const std::string& msg);

// The line the CLI prints on stderr for a UserError (exit 2): "mutwo: error: "
// and the message on one line, whatever a file put into the names it quotes
// (an escaped newline in a JSON string becomes a space). tests/fuzz/load.cpp
// prints the same line.
std::string user_error_line(const UserError& e);

}  // namespace mutwo

#define MUTWO_CHECK(cond, ...)                                      \
  do {                                                              \
    if (!(cond)) throw ::mutwo::UserError(::fmt::format(__VA_ARGS__)); \
  } while (0)

#define MUTWO_FAIL(...) throw ::mutwo::UserError(::fmt::format(__VA_ARGS__))

#define MUTWO_ASSERT(cond, ...)                                                       \
  do {                                                                                \
    if (!(cond)) ::mutwo::throw_internal(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
  } while (0)
