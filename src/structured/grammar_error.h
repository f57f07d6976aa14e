// GrammarError: a structured-output request that cannot be served as asked —
// a schema feature that cannot be enforced exactly, an invalid regex or
// grammar, a spec over the size limits, a compile over its time bound. The
// server turns it into a 400 naming the request field; never a silently
// unconstrained output.
#pragma once

#include <stdexcept>
#include <string>

namespace loom::structured {

class GrammarError : public std::runtime_error {
 public:
  // Busy: the compile queue is full (a 503, not the request's fault).
  enum class Kind { Unsupported, Invalid, TooLarge, Timeout, Busy, Unavailable };
  GrammarError(Kind kind, std::string message)
      : std::runtime_error(std::move(message)), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

}  // namespace loom::structured
