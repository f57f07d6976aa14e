// RequestFilter: deny rules run over a request's prompt text before
// admission. Patterns are RE2 (linear time in the text, bounded memory), so
// no rule and no prompt can make matching slow. By default a rule also runs
// over the text normalised for matching (NFKC, format and other invisible
// characters removed), so fullwidth letters or a zero-width space inside a
// word do not slip past it. Immutable after loading; thread-safe.
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
  // Throws loom::Error on a bad pattern. normalize: also match the text as
  // normalize_for_matching gives it.
  explicit RequestFilter(const std::vector<DenyRule>& rules, bool normalize = true);
  ~RequestFilter();
  RequestFilter(RequestFilter&&) noexcept;
  RequestFilter& operator=(RequestFilter&&) noexcept;

  // JSON: {"deny": [{"name": "no-secrets", "pattern": "(?i)password"}],
  //        "normalize": true}   (normalize: optional, default true)
  static RequestFilter from_file(const std::string& path);

  // The name of the first rule matching `text`, or nullopt.
  std::optional<std::string> check(std::string_view text) const;
  size_t size() const { return rules_.size(); }

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> rules_;
  bool normalize_ = true;
};

// `text` (UTF-8) in Unicode NFKC with format characters (category Cf: zero
// width space and joiners, soft hyphen, bidi controls...) and other default
// ignorable code points removed; invalid UTF-8 becomes U+FFFD.
std::string normalize_for_matching(std::string_view text);

}  // namespace loom::server
