// Overflow-checked integer arithmetic for sizes read from untrusted input
// (model files, requests). Every function throws loom::Error on overflow or
// on a negative operand, so callers never allocate from a wrapped value.
#pragma once

#include <cstdint>
#include <limits>

#include "core/error.h"

namespace loom {

inline int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) LOOM_THROW("size overflow: {} + {}", a, b);
  return r;
}

inline int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) LOOM_THROW("size overflow: {} * {}", a, b);
  return r;
}

inline uint64_t checked_add_u64(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) LOOM_THROW("size overflow: {} + {}", a, b);
  return r;
}

inline uint64_t checked_mul_u64(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) LOOM_THROW("size overflow: {} * {}", a, b);
  return r;
}

// True when [offset, offset + length) lies inside a buffer of `size` bytes.
inline bool in_bounds(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

}  // namespace loom
