// Formats internal errors with their source location.
#include "support/error.h"

namespace mutwo {

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw InternalError(fmt::format("internal error at {}:{}: ({}) {}; please report this as a mutwo bug",
                                  file, line, cond, msg));
}

}  // namespace mutwo
