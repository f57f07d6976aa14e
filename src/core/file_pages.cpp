#include "core/file_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <mutex>

namespace loom {
namespace {

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, size_t> mappings;  // start -> bytes
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_file_mapping(const void* p, size_t n) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.mappings[reinterpret_cast<uintptr_t>(p)] = n;
}

void forget_file_mapping(const void* p) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.mappings.erase(reinterpret_cast<uintptr_t>(p));
}

size_t release_file_pages(const void* p, size_t n) {
  const auto begin = reinterpret_cast<uintptr_t>(p), end = begin + n;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (begin + page - 1) / page * page, hi = end / page * page;
  if (n == 0 || hi <= lo) return 0;
  Registry& r = registry();
  // Held across madvise: the mapping cannot be unmapped (and its address
  // reused) meanwhile.
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.mappings.upper_bound(begin);
  if (it == r.mappings.begin()) return 0;
  --it;
  if (end > it->first + it->second) return 0;
  if (::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) != 0) return 0;
  return hi - lo;
}

}  // namespace loom
