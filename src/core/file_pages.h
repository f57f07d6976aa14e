// Read-only file mappings (model weights) whose pages a reader may hand back
// once it has copied what it needs: map_file registers each mapping here, and
// a backend that keeps a converted copy of a weight (the CPU's interleaved
// Q8_0 / Q5_0) releases the source's pages, so they stop counting in the
// process's resident memory. A page read again later comes back from the
// file, unchanged.
#pragma once

#include <cstddef>

namespace loom {

// [p, p + n) is a PROT_READ, MAP_PRIVATE mapping of a file, until forgotten.
void register_file_mapping(const void* p, size_t n);
void forget_file_mapping(const void* p);
// Drops the whole pages of [p, p + n) from this process's memory when the
// range lies inside a registered file mapping (madvise MADV_DONTNEED);
// otherwise (heap memory, say) does nothing. Returns the bytes released.
size_t release_file_pages(const void* p, size_t n);

}  // namespace loom
