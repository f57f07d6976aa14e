// Large heap buffers (weights, the KV cache) on huge pages where the kernel
// offers them: a decode step streams every weight once, and with 4 KB pages
// the hardware prefetchers stop at each page boundary and each page costs a
// TLB walk. Transparent huge pages set to "madvise" (the usual default) back
// only ranges that ask for it; this asks.
#pragma once

#include <cstddef>

namespace loom {

// Asks for huge pages (madvise MADV_HUGEPAGE) for the whole 2 MB pages inside
// [p, p + n), before they are first touched; a no-op for smaller ranges, on
// kernels without transparent huge pages, and where LOOM_HUGE_PAGES=0.
// Returns the bytes advised.
size_t advise_huge_pages(void* p, size_t n);

}  // namespace loom
