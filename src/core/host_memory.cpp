#include "core/host_memory.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace loom {

std::optional<int64_t> parse_mem_available(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  size_t at = 0;
  while (at < meminfo.size()) {
    const size_t end = std::min(meminfo.find('\n', at), meminfo.size());
    const std::string_view line = meminfo.substr(at, end - at);
    at = end + 1;
    if (line.substr(0, kKey.size()) != kKey) continue;
    std::string_view rest = line.substr(kKey.size());
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    int64_t kb = 0;
    size_t digits = 0;
    for (; digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9'; ++digits) {
      if (kb > (INT64_MAX / 1024 - 9) / 10) return std::nullopt;  // absurd: refuse, not wrap
      kb = kb * 10 + (rest[digits] - '0');
    }
    if (digits == 0) return std::nullopt;
    rest.remove_prefix(digits);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    if (rest != "kB") return std::nullopt;
    return kb * 1024;
  }
  return std::nullopt;
}

std::optional<int64_t> host_memory_available() {
  std::ifstream f("/proc/meminfo");
  if (!f) return std::nullopt;
  std::stringstream s;
  s << f.rdbuf();
  return parse_mem_available(s.str());
}

}  // namespace loom
