// OpProfile: see op_profile.h. The table is sorted by total time.
#include "backend/cpu/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace loom::cpu {

OpProfile::OpProfile() {
  const char* env = std::getenv("LOOM_CPU_PROFILE");
  enabled_ = env && *env && std::strcmp(env, "0") != 0;
}

void OpProfile::record(const std::string& key, std::chrono::steady_clock::duration d) {
  Stat& s = stats_[key];
  ++s.calls;
  s.seconds += std::chrono::duration<double>(d).count();
}

OpProfile::~OpProfile() {
  if (!enabled_ || stats_.empty()) return;
  std::vector<std::pair<std::string, Stat>> rows(stats_.begin(), stats_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  int64_t calls = 0;
  for (const auto& r : rows) total += r.second.seconds, calls += r.second.calls;
  std::fprintf(stderr, "cpu backend op profile: %.1f ms in %lld calls\n", total * 1e3,
               static_cast<long long>(calls));
  std::fprintf(stderr, "%10s %8s %10s %6s  %s\n", "total ms", "calls", "mean us", "share", "op");
  for (const auto& [key, s] : rows)
    std::fprintf(stderr, "%10.2f %8lld %10.2f %5.1f%%  %s\n", s.seconds * 1e3,
                 static_cast<long long>(s.calls), s.seconds / s.calls * 1e6,
                 100.0 * s.seconds / total, key.c_str());
}

}  // namespace loom::cpu
