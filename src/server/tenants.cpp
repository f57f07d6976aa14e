// API keys and per-tenant limits.
#include "server/tenants.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace loom::server {

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Compare over the longer length so the time does not depend on where the
  // first difference is; a length difference is folded into the result.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  // Keep the compiler from short-circuiting on diff.
  volatile unsigned char sink = diff;
  return sink == 0;
}

void TenantRegistry::add_tenant(Tenant tenant, const std::vector<std::string>& keys) {
  if (tenant.name.empty()) LOOM_THROW("tenant names must not be empty");
  if (std::find(names_.begin(), names_.end(), tenant.name) != names_.end())
    LOOM_THROW(
        "tenant '{}' is defined twice (names must be unique; --api-key keys are tenant "
        "'default')",
        tenant.name);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].empty()) LOOM_THROW("API keys of tenant '{}' must not be empty", tenant.name);
    for (const auto& [k, other] : keys_)
      if (k == keys[i])
        LOOM_THROW("an API key of tenant '{}' is already a key of tenant '{}'", tenant.name,
                   other->name);
    for (size_t j = 0; j < i; ++j)
      if (keys[j] == keys[i]) LOOM_THROW("tenant '{}' lists one API key twice", tenant.name);
  }
  names_.push_back(tenant.name);
  auto shared = std::make_shared<const Tenant>(std::move(tenant));
  for (const auto& k : keys) keys_.emplace_back(k, shared);
}

void TenantRegistry::load_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) LOOM_THROW("cannot read API key file {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("tenants") || !j["tenants"].is_array())
    LOOM_THROW("{}: expected {{\"tenants\": [...]}}", path);
  auto get_int = [&](const nlohmann::json& t, const char* k, int64_t max) -> int64_t {
    if (!t.contains(k)) return 0;
    if (!t[k].is_number_integer() || t[k].get<int64_t>() < 0 || t[k].get<int64_t>() > max)
      LOOM_THROW("{}: '{}' must be an integer in [0, {}]", path, k, max);
    return t[k].get<int64_t>();
  };
  for (const auto& t : j["tenants"]) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() ||
        !t.contains("keys") || !t["keys"].is_array())
      LOOM_THROW("{}: each tenant needs a string 'name' and a list 'keys'", path);
    Tenant tenant;
    tenant.name = t["name"].get<std::string>();
    tenant.limits.max_concurrent = int32_t(get_int(t, "max_concurrent", 1 << 30));
    tenant.limits.tokens_per_minute = get_int(t, "tokens_per_minute", int64_t(1) << 50);
    tenant.limits.max_prompt_tokens = int32_t(get_int(t, "max_prompt_tokens", 1 << 30));
    if (t.contains("weight")) {
      const auto& w = t["weight"];
      if (!w.is_number() || !(w.get<double>() > 0) || w.get<double>() > 1e6)
        LOOM_THROW("{}: 'weight' of tenant {} must be a number in (0, 1000000]", path,
                   tenant.name);
      tenant.weight = float(w.get<double>());
    }
    std::vector<std::string> keys;
    for (const auto& k : t["keys"]) {
      if (!k.is_string()) LOOM_THROW("{}: keys of tenant {} must be strings", path, tenant.name);
      keys.push_back(k.get<std::string>());
    }
    try {
      add_tenant(std::move(tenant), keys);
    } catch (const loom::Error& e) {
      LOOM_THROW("{}: {}", path, e.what());
    }
  }
}

const Tenant* TenantRegistry::authenticate(std::string_view authorization) const {
  // "Bearer" (any case), one or more spaces, the key (RFC 6750 section 2.1).
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() || authorization[kScheme.size()] != ' ')
    return nullptr;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return nullptr;
  std::string_view key = authorization.substr(kScheme.size());
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  if (key.empty()) return nullptr;
  const Tenant* found = nullptr;
  for (const auto& [k, tenant] : keys_)  // no early exit: every key is compared
    if (constant_time_equal(k, key) && !found) found = tenant.get();
  return found;
}

void TenantLimiter::refill(State& s, const TenantLimits& limits, Clock::time_point now) {
  const double capacity = double(limits.tokens_per_minute);
  if (!s.initialised) {
    s.tokens = capacity;
    s.refilled = now;
    s.initialised = true;
    return;
  }
  const double secs = std::chrono::duration<double>(now - s.refilled).count();
  if (secs > 0) {
    s.tokens = std::min(capacity, s.tokens + secs * capacity / 60.0);
    s.refilled = now;
  }
}

RateLimitDecision TenantLimiter::try_admit(const Tenant& tenant, int64_t prompt_tokens,
                                           Clock::time_point now) {
  std::lock_guard<std::mutex> lk(mu_);
  State& s = states_[tenant.name];
  const TenantLimits& lim = tenant.limits;
  if (lim.max_concurrent > 0 && s.in_flight >= lim.max_concurrent)
    return {false, "concurrency", 1};
  if (lim.tokens_per_minute > 0) {
    refill(s, lim, now);
    // A request is admitted while the bucket is positive (so one larger than
    // the whole budget can still run once it is full); it may go negative.
    if (s.tokens <= 0) {
      const double per_second = double(lim.tokens_per_minute) / 60.0;
      return {false, "tokens_per_minute", std::max<int64_t>(1, int64_t(std::ceil(-s.tokens / per_second + 1e-9)))};
    }
    s.tokens -= double(prompt_tokens);
  }
  ++s.in_flight;
  return {};
}

void TenantLimiter::release(const Tenant& tenant, int64_t completion_tokens, Clock::time_point now) {
  std::lock_guard<std::mutex> lk(mu_);
  State& s = states_[tenant.name];
  if (s.in_flight > 0) --s.in_flight;
  if (tenant.limits.tokens_per_minute > 0) {
    refill(s, tenant.limits, now);
    s.tokens -= double(completion_tokens);
  }
}

int32_t TenantLimiter::in_flight(const std::string& tenant) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = states_.find(tenant);
  return it == states_.end() ? 0 : it->second.in_flight;
}

}  // namespace loom::server
