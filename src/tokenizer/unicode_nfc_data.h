// Tables for NFC normalisation, generated into unicode_nfc_data.cpp. Each
// array is sorted by its first field(s) for binary search.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::tok::nfc_data {

struct CccRun {
  uint32_t first, last, ccc;  // canonical combining class of [first, last]
};
struct Decomposition {
  uint32_t cp, first, second;  // canonical decomposition (second = 0: singleton); Hangul excluded
};
struct Composition {
  uint32_t first, second, composite;  // primary composites (exclusions removed)
};

extern const CccRun kCccRuns[];
extern const size_t kCccRunCount;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const Composition kCompositions[];
extern const size_t kCompositionCount;

}  // namespace loom::tok::nfc_data
