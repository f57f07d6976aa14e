#include <gtest/gtest.h>

#include "core/checked_math.h"
#include "core/half.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

#include <atomic>
#include <cmath>

namespace loom {

TEST(Tensor, ShapesAndRows) {
  Tensor t = Tensor::cpu(DType::F32, {3, 4, 5});
  EXPECT_EQ(t.numel(), 60);
  EXPECT_EQ(t.rows(), 12);
  EXPECT_EQ(t.cols(), 5);
  EXPECT_EQ(t.nbytes(), 240);
  Tensor s = t.slice_rows(1, 2);
  EXPECT_EQ(s.data_as<char>() - t.data_as<char>(), 80);
  EXPECT_THROW(t.reshape({7, 9}), Error);
  EXPECT_THROW(t.slice_rows(2, 2), Error);
}

TEST(Tensor, QuantisedRowBytes) {
  EXPECT_EQ(row_bytes(DType::Q4_K, 512), 288);
  EXPECT_EQ(row_bytes(DType::Q8_0, 64), 68);
  EXPECT_THROW(row_bytes(DType::Q4_K, 100), Error);
}

TEST(CheckedMath, Overflow) {
  EXPECT_THROW(checked_mul(INT64_MAX / 2, 3), Error);
  EXPECT_THROW(checked_add(INT64_MAX, 1), Error);
  EXPECT_THROW(checked_mul(-1, 3), Error);
  EXPECT_TRUE(in_bounds(10, 5, 15));
  EXPECT_FALSE(in_bounds(10, 6, 15));
  EXPECT_FALSE(in_bounds(UINT64_MAX, 2, 15));
}

TEST(Half, RoundTrips) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1e-5f, 3.0e-7f, 1e-3f}) {
    EXPECT_EQ(f16_to_f32(f32_to_f16(f)), f16_to_f32(f32_to_f16(f16_to_f32(f32_to_f16(f)))));
    EXPECT_NEAR(f16_to_f32(f32_to_f16(f)), f, std::fabs(f) * 1e-3 + 1e-7);
    EXPECT_NEAR(bf16_to_f32(f32_to_bf16(f)), f, std::fabs(f) * 1e-2);
  }
  // every f16 bit pattern that is finite survives f16 -> f32 -> f16
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f) continue;
    EXPECT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h);
  }
}

TEST(ThreadPool, CoversRangeOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(1001);
  pool.parallel_for(1001, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

}  // namespace loom
