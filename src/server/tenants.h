// Tenants: API keys mapped to tenant names and limits, and the per-tenant
// limiter (concurrent requests, tokens per minute). Keys are compared in
// constant time (per key; every key is always compared). Tenant names and
// keys are unique: a key maps to exactly one tenant, and two tenants never
// share a name (which would merge their cache salt, limits and metrics).
// The registry is built before serving and read-only after; the limiter is
// thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::server {

struct TenantLimits {
  int32_t max_concurrent = 0;        // requests in flight; 0: unlimited
  int64_t tokens_per_minute = 0;     // prompt + completion tokens; 0: unlimited
  int32_t max_prompt_tokens = 0;     // per request; 0: the model's context only
};

struct Tenant {
  std::string name;
  TenantLimits limits;
  float weight = 1.0f;  // share of the engine under contention (fair share), > 0
};

class TenantRegistry {
 public:
  // Throws loom::Error for an empty name or key, a name already registered,
  // or a key already registered (to this tenant or another).
  void add_tenant(Tenant tenant, const std::vector<std::string>& keys);
  // JSON: {"tenants": [{"name": "alice", "keys": ["sk-..."], "max_concurrent": 4,
  //                     "tokens_per_minute": 100000, "max_prompt_tokens": 4096,
  //                     "weight": 2}]}
  // weight: a number in (0, 1000000], default 1. Adds to the tenants already
  // registered (e.g. "default" of --api-key), under add_tenant's rules.
  // Throws loom::Error for a malformed file.
  void load_file(const std::string& path);
  bool enabled() const { return !keys_.empty(); }
  // The tenant whose key the "Authorization: Bearer <key>" header carries
  // (the scheme is case-insensitive); null when the header has another form
  // or no key matches.
  const Tenant* authenticate(std::string_view authorization) const;

 private:
  std::vector<std::pair<std::string, std::shared_ptr<const Tenant>>> keys_;
  std::vector<std::string> names_;
};

// Equal contents in time that depends only on the lengths.
bool constant_time_equal(std::string_view a, std::string_view b);

struct RateLimitDecision {
  bool admitted = true;
  std::string reason;            // "concurrency" or "tokens_per_minute"
  int64_t retry_after_seconds = 0;
};

class TenantLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  // Admits a request of prompt_tokens (charged now) or says why not.
  RateLimitDecision try_admit(const Tenant& tenant, int64_t prompt_tokens,
                              Clock::time_point now = Clock::now());
  // The request ended: frees its slot and charges its completion tokens.
  void release(const Tenant& tenant, int64_t completion_tokens,
               Clock::time_point now = Clock::now());
  int32_t in_flight(const std::string& tenant) const;

 private:
  struct State {
    int32_t in_flight = 0;
    double tokens = 0;           // token bucket: capacity tokens_per_minute
    Clock::time_point refilled{};
    bool initialised = false;
  };
  void refill(State& s, const TenantLimits& limits, Clock::time_point now);

  mutable std::mutex mu_;
  std::map<std::string, State> states_;
};

}  // namespace loom::server
