// RingSpace: allocations in order, wrapping at the end, and the oldest ones
// waited for (and freed) only when a new one would overlap them.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/ring_space.h"

namespace loom {
namespace {

TEST(RingSpace, PlacesInOrderAndWrapsAtTheEnd) {
  RingSpace r(100);
  int waits = 0;
  auto wait = [&] { ++waits; };
  EXPECT_EQ(r.allocate(40, wait), 0u);
  EXPECT_EQ(r.allocate(40, wait), 40u);
  EXPECT_EQ(waits, 0);
  // 30 more do not fit before the end: at 0, over the first allocation only.
  EXPECT_EQ(r.allocate(30, wait), 0u);
  EXPECT_EQ(waits, 1);
  EXPECT_EQ(r.live(), 2u);
  // Right after it, over the second (40..80).
  EXPECT_EQ(r.allocate(20, wait), 30u);
  EXPECT_EQ(waits, 2);
  EXPECT_EQ(r.live(), 2u);
  r.release_oldest();
  EXPECT_EQ(r.live(), 1u);
  EXPECT_EQ(r.allocate(100, wait), 0u);  // the whole ring: waits for what is left
  EXPECT_EQ(waits, 3);
  EXPECT_THROW(r.allocate(101, wait), Error);
  EXPECT_THROW(r.allocate(0, wait), Error);
}

// Random sizes: a live allocation never overlaps another, and waits happen
// only when the ring is too full for the next one.
TEST(RingSpace, LiveAllocationsNeverOverlap) {
  std::mt19937 rng(3);
  RingSpace r(1000);
  std::vector<std::pair<size_t, size_t>> live;  // oldest first, as the ring frees them
  size_t waits = 0;
  for (int i = 0; i < 5000; ++i) {
    const size_t n = 1 + rng() % 300;
    const size_t at = r.allocate(n, [&] {
      ++waits;
      live.erase(live.begin());
    });
    ASSERT_LE(at + n, 1000u);
    for (const auto& [b, e] : live) ASSERT_TRUE(e <= at || at + n <= b) << "allocation " << i;
    live.push_back({at, at + n});
    ASSERT_EQ(live.size(), r.live());
    size_t used = 0;
    for (const auto& [b, e] : live) used += e - b;
    ASSERT_LE(used, 1000u);
    if (rng() % 4 == 0 && !live.empty()) {
      r.release_oldest();
      live.erase(live.begin());
    }
  }
  EXPECT_GT(waits, 0u);
  EXPECT_LT(waits, 5000u);
}

}  // namespace
}  // namespace loom
