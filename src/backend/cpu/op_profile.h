// OpProfile: optional per-op wall-clock timers for the CPU backend, switched on
// with LOOM_CPU_PROFILE=1 (read once). Each op call is keyed by its name and
// shape; the totals go to stderr when the backend is destroyed. When off, a
// timed scope costs one branch and builds no key. Used by one thread (the
// backend's caller).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace loom::cpu {

class OpProfile {
 public:
  OpProfile();
  ~OpProfile();  // prints the table when enabled
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  class Scope {
   public:
    Scope(OpProfile* p, std::string key) : p_(p), key_(std::move(key)) {
      if (p_) start_ = std::chrono::steady_clock::now();
    }
    ~Scope() {
      if (p_) p_->record(key_, std::chrono::steady_clock::now() - start_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpProfile* p_;
    std::string key_;
    std::chrono::steady_clock::time_point start_;
  };

  // make_key() -> std::string is called only when profiling is on.
  template <class MakeKey>
  Scope time(MakeKey&& make_key) {
    return enabled_ ? Scope(this, make_key()) : Scope(nullptr, {});
  }

 private:
  struct Stat {
    int64_t calls = 0;
    double seconds = 0;
  };
  void record(const std::string& key, std::chrono::steady_clock::duration d);

  bool enabled_ = false;
  std::unordered_map<std::string, Stat> stats_;
};

}  // namespace loom::cpu
