// Offsets in a ring of `capacity` bytes for allocations that are freed in
// the order they were made (staging buffers whose copies complete in stream
// order). allocate() places n bytes after the newest live allocation, or at
// the start when they do not fit before the end, and frees the oldest live
// allocations (after `wait_oldest()`, which must block until the oldest one
// may be reused) until nothing live overlaps them.
#pragma once

#include <cstddef>
#include <deque>
#include <utility>

#include "core/error.h"

namespace loom {

class RingSpace {
 public:
  explicit RingSpace(size_t capacity = 0) : capacity_(capacity) {}

  size_t capacity() const { return capacity_; }
  size_t live() const { return live_.size(); }

  // The offset of n bytes (0 < n <= capacity) that no live allocation overlaps.
  template <class WaitOldest>
  size_t allocate(size_t n, WaitOldest&& wait_oldest) {
    LOOM_CHECK(n > 0 && n <= capacity_, "ring allocation of {} bytes in a ring of {}", n, capacity_);
    const size_t start = head_ + n <= capacity_ ? head_ : 0;
    const size_t end = start + n;
    while (!live_.empty() && overlaps_live(start, end)) {
      wait_oldest();
      live_.pop_front();
    }
    live_.push_back({start, end});
    head_ = end;
    return start;
  }
  // Frees the oldest live allocation (known to be reusable without waiting).
  void release_oldest() {
    if (!live_.empty()) live_.pop_front();
  }

 private:
  bool overlaps_live(size_t start, size_t end) const {
    for (const auto& [b, e] : live_)
      if (b < end && start < e) return true;
    return false;
  }

  size_t capacity_;
  size_t head_ = 0;
  std::deque<std::pair<size_t, size_t>> live_;  // [begin, end), oldest first
};

}  // namespace loom
