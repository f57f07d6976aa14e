#include "core/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace loom {

size_t advise_huge_pages(void* p, size_t n) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  static const bool on = [] {
    const char* v = std::getenv("LOOM_HUGE_PAGES");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  if (!on || !p) return 0;
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + n) & ~(kHuge - 1);
  if (hi <= lo) return 0;
#ifdef MADV_HUGEPAGE
  if (::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE) == 0) return hi - lo;
#endif
  return 0;
}

namespace {
constexpr size_t kHugeBytes = size_t{2} << 20;
size_t page_round(size_t n) {
  const size_t page = 4096;
  return (n + page - 1) / page * page;
}
}  // namespace

void* map_zero_pages(size_t n) {
  if (n == 0 || n > SIZE_MAX - 2 * kHugeBytes) return nullptr;
  const size_t len = page_round(n);
  // Over-map by 2 MB, then return the slack before and after the aligned range.
  const size_t span = len + kHugeBytes;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (base + kHugeBytes - 1) & ~(uintptr_t{kHugeBytes} - 1);
  if (start > base) ::munmap(raw, start - base);
  const uintptr_t end = start + len;
  if (base + span > end) ::munmap(reinterpret_cast<void*>(end), base + span - end);
  void* p = reinterpret_cast<void*>(start);
  advise_huge_pages(p, len);
  return p;
}

void unmap_zero_pages(void* p, size_t n) {
  if (p && n) ::munmap(p, page_round(n));
}

}  // namespace loom
