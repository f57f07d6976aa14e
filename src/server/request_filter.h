// RequestFilter: deny rules run over a request's prompt text before
// admission. Patterns are RE2 (linear time in the text, bounded memory), so
// no rule and no prompt can make matching slow. Immutable after loading;
// thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace re2 {
class RE2;
}

namespace loom::server {

struct DenyRule {
  std::string name;     // reported in the 400 and in /metrics
  std::string pattern;  // RE2 syntax, searched anywhere in the text
};

class RequestFilter {
 public:
  RequestFilter();
  explicit RequestFilter(const std::vector<DenyRule>& rules);  // throws loom::Error on a bad pattern
  ~RequestFilter();
  RequestFilter(RequestFilter&&) noexcept;
  RequestFilter& operator=(RequestFilter&&) noexcept;

  // JSON: {"deny": [{"name": "no-secrets", "pattern": "(?i)password"}]}
  static RequestFilter from_file(const std::string& path);

  // The name of the first rule matching `text`, or nullopt.
  std::optional<std::string> check(std::string_view text) const;
  size_t size() const { return rules_.size(); }

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> rules_;
};

}  // namespace loom::server
