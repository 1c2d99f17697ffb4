// Formats internal errors with their source location, and a user error's line.
#include "support/error.h"

namespace mutwo {

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw InternalError(fmt::format("internal error at {}:{}: ({}) {}; please report this as a mutwo bug",
                                  file, line, cond, msg));
}

std::string user_error_line(const UserError& e) {
  std::string what = e.what();
  for (char& c : what)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return "mutwo: error: " + what;
}

}  // namespace mutwo
