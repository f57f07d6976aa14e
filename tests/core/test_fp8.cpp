// FP8 E4M3 host conversions: every byte decodes and re-encodes to itself,
// rounding is to nearest even at normal and subnormal spacings, finite
// overflow and infinities saturate to +-448, NaN stays NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/fp8.h"

namespace loom {
namespace {

TEST(Fp8, EveryByteRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    const auto v = static_cast<uint8_t>(b);
    const float f = fp8_e4m3_to_f32(v);
    if ((b & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f) && std::isnan(fp8_e4m3_table()[b])) << b;
      continue;
    }
    EXPECT_EQ(fp8_e4m3_table()[b], f) << b;
    EXPECT_EQ(f32_to_fp8_e4m3(f), v) << b << " = " << f;
  }
}

TEST(Fp8, KnownValues) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(f32_to_fp8_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_fp8_e4m3(1.0f), 0x38);
  EXPECT_EQ(f32_to_fp8_e4m3(-2.5f), 0xc2);
}

TEST(Fp8, RoundsToNearestEven) {
  // Between 1.0 (0x38) and 1.125 (0x39): the tie goes to the even mantissa.
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);
  EXPECT_EQ(f32_to_fp8_e4m3(1.0626f), 0x39);
  // Between 1.125 (0x39) and 1.25 (0x3a): tie to 0x3a.
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3a);
  // Subnormals are multiples of 2^-9: half of the smallest ties to 0.
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.5f, -10)), 0x01);
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(3.0f, -10)), 0x02);  // 1.5 * 2^-9: tie to 2
  // Just below the smallest normal rounds up into it.
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(0.99f, -6)), 0x08);
  // A carry out of the mantissa moves to the next binade.
  EXPECT_EQ(f32_to_fp8_e4m3(1.97f), 0x40);  // 2.0
}

TEST(Fp8, SaturatesAndKeepsNan) {
  EXPECT_EQ(f32_to_fp8_e4m3(449.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(470.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(std::nanf("")) & 0x7f, 0x7f);
}

TEST(Fp8, ScaleForAmax) {
  EXPECT_EQ(fp8_scale_for_amax(448.0f), 1.0f);
  EXPECT_EQ(fp8_scale_for_amax(896.0f), 2.0f);
  const float tiny = fp8_scale_for_amax(0.0f);
  EXPECT_GT(tiny, 0.0f);
  EXPECT_TRUE(std::isfinite(1.0f / tiny));
}

TEST(Fp8, DTypeIsOneByte) {
  EXPECT_EQ(dtype_name(DType::F8_E4M3), "f8_e4m3");
  EXPECT_EQ(row_bytes(DType::F8_E4M3, 100), 100);
  EXPECT_FALSE(is_quantized(DType::F8_E4M3));
}

}  // namespace
}  // namespace loom
