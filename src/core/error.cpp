#include "core/error.h"

namespace loom::detail {

void throw_check_failure(const char* file, int line, const char* cond,
                         const std::string& message) {
  throw Error(fmt::format("{} (check failed: {} at {}:{})", message, cond, file, line), file,
              line);
}

}  // namespace loom::detail
