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

}  // namespace loom
