// RE2 deny rules.
#include "server/request_filter.h"

#include <nlohmann/json.hpp>
#include <re2/re2.h>

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

RequestFilter::RequestFilter(const std::vector<DenyRule>& rules) {
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
  return RequestFilter(rules);
}

std::optional<std::string> RequestFilter::check(std::string_view text) const {
  for (const auto& r : rules_)
    if (re2::RE2::PartialMatch(re2::StringPiece(text.data(), text.size()), *r->re)) return r->name;
  return std::nullopt;
}

}  // namespace loom::server
