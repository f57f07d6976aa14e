// Large heap buffers (weights, the KV cache) on huge pages where the kernel
// offers them: a decode step streams every weight once, and with 4 KB pages
// the hardware prefetchers stop at each page boundary and each page costs a
// TLB walk. Transparent huge pages set to "madvise" (the usual default) back
// only ranges that ask for it; this asks. Large zeroed buffers come as fresh
// anonymous pages, which read as zero without being written: a KV cache of a
// gigabyte costs neither start-up time nor resident memory until its blocks
// are used.
#pragma once

#include <cstddef>

namespace loom {

// Asks for huge pages (madvise MADV_HUGEPAGE) for the whole 2 MB pages inside
// [p, p + n), before they are first touched; a no-op for smaller ranges, on
// kernels without transparent huge pages, and where LOOM_HUGE_PAGES=0.
// Returns the bytes advised.
size_t advise_huge_pages(void* p, size_t n);

// n zeroed bytes (n > 0) as fresh anonymous pages, 2 MB aligned, huge pages
// advised: nothing is written now, and a page is backed only when it is
// first touched. nullptr when the kernel refuses. Release with
// unmap_zero_pages(p, n).
void* map_zero_pages(size_t n);
void unmap_zero_pages(void* p, size_t n);

}  // namespace loom
