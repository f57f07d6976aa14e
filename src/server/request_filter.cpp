// RE2 deny rules, over the raw and the normalised (ICU) text.
#include "server/request_filter.h"

#include <nlohmann/json.hpp>
#include <re2/re2.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace loom::server {

struct RequestFilter::Compiled {
  std::string name;
  std::unique_ptr<re2::RE2> re;
};

RequestFilter::RequestFilter() = default;
RequestFilter::~RequestFilter() = default;
RequestFilter::RequestFilter(RequestFilter&&) noexcept = default;
RequestFilter& RequestFilter::operator=(RequestFilter&&) noexcept = default;

RequestFilter::RequestFilter(const std::vector<DenyRule>& rules, bool normalize)
    : normalize_(normalize) {
  for (const auto& r : rules) {
    if (r.pattern.size() > 4096) LOOM_THROW("deny rule '{}': pattern longer than 4096 bytes", r.name);
    re2::RE2::Options opts;
    opts.set_log_errors(false);
    opts.set_max_mem(int64_t(8) << 20);
    auto re = std::make_unique<re2::RE2>(r.pattern, opts);
    if (!re->ok()) LOOM_THROW("deny rule '{}': bad pattern: {}", r.name, re->error());
    rules_.push_back(std::make_unique<Compiled>(Compiled{r.name, std::move(re)}));
  }
}

RequestFilter RequestFilter::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) LOOM_THROW("cannot read deny rules file {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("deny") || !j["deny"].is_array())
    LOOM_THROW("{}: expected {{\"deny\": [{{\"name\", \"pattern\"}}...]}}", path);
  bool normalize = true;
  if (j.contains("normalize")) {
    if (!j["normalize"].is_boolean()) LOOM_THROW("{}: 'normalize' must be true or false", path);
    normalize = j["normalize"].get<bool>();
  }
  std::vector<DenyRule> rules;
  for (const auto& r : j["deny"]) {
    if (!r.is_object() || !r.contains("pattern") || !r["pattern"].is_string())
      LOOM_THROW("{}: each deny rule needs a string 'pattern'", path);
    DenyRule rule;
    rule.pattern = r["pattern"].get<std::string>();
    rule.name = r.contains("name") && r["name"].is_string() ? r["name"].get<std::string>()
                                                            : "rule" + std::to_string(rules.size());
    rules.push_back(std::move(rule));
  }
  return RequestFilter(rules, normalize);
}

std::optional<std::string> RequestFilter::check(std::string_view text) const {
  if (rules_.empty()) return std::nullopt;
  auto match = [&](std::string_view t) -> std::optional<std::string> {
    for (const auto& r : rules_)
      if (re2::RE2::PartialMatch(re2::StringPiece(t.data(), t.size()), *r->re)) return r->name;
    return std::nullopt;
  };
  if (auto rule = match(text)) return rule;
  if (!normalize_) return std::nullopt;
  const std::string normalized = normalize_for_matching(text);
  if (normalized == text) return std::nullopt;
  return match(normalized);
}

namespace {

// Drops format characters and default ignorable code points.
icu::UnicodeString without_invisibles(const icu::UnicodeString& in) {
  icu::UnicodeString out;
  for (int32_t i = 0; i < in.length();) {
    const UChar32 c = in.char32At(i);
    i += U16_LENGTH(c);
    if (u_charType(c) == U_FORMAT_CHAR || u_hasBinaryProperty(c, UCHAR_DEFAULT_IGNORABLE_CODE_POINT))
      continue;
    out.append(c);
  }
  return out;
}

}  // namespace

std::string normalize_for_matching(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(status);
  LOOM_CHECK(U_SUCCESS(status), "ICU: no NFKC data ({})", u_errorName(status));
  const icu::UnicodeString in = without_invisibles(
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), int32_t(text.size()))));
  // Invisibles removed before and after: NFKC may compose across one, and
  // may produce one from a compatibility character.
  icu::UnicodeString normalized = without_invisibles(nfkc->normalize(in, status));
  LOOM_CHECK(U_SUCCESS(status), "ICU: NFKC failed ({})", u_errorName(status));
  std::string out;
  normalized.toUTF8String(out);
  return out;
}

}  // namespace loom::server
