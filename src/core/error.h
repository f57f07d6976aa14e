// Errors: loom::Error for expected failures (bad file, bad request, bad flag)
// and LOOM_CHECK for broken invariants. Both carry file and line; what() is the
// user-facing message alone, so a CLI can print one clean line.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace loom {

class Error : public std::runtime_error {
 public:
  Error(std::string message, const char* file = "", int line = 0)
      : std::runtime_error(std::move(message)), file_(file), line_(line) {}
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  const char* file_;
  int line_;
};

namespace detail {
[[noreturn]] void throw_check_failure(const char* file, int line, const char* cond,
                                      const std::string& message);
}  // namespace detail

}  // namespace loom

// Throws loom::Error with a formatted message: LOOM_THROW("bad tensor {}", name).
#define LOOM_THROW(...) throw ::loom::Error(::fmt::format(__VA_ARGS__), __FILE__, __LINE__)

// Throws loom::Error when cond is false; the message says which condition failed.
#define LOOM_CHECK(cond, ...)                                                        \
  do {                                                                               \
    if (!(cond)) [[unlikely]]                                                        \
      ::loom::detail::throw_check_failure(__FILE__, __LINE__, #cond,                 \
                                          ::fmt::format(__VA_ARGS__));               \
  } while (0)
