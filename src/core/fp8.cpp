// FP8 E4M3 conversions (fp8.h). Normal E4M3 values keep the top 3 mantissa
// bits of a float, so encoding rounds the float's bits at bit 20; values
// below the smallest normal (2^-6) are multiples of 2^-9 and round as such.
#include "core/fp8.h"

#include <array>
#include <cmath>
#include <cstring>

namespace loom {

float fp8_e4m3_to_f32(uint8_t v) {
  const bool negative = (v & 0x80u) != 0;
  const int exp = (v >> 3) & 0xf;
  const int mant = v & 0x7;
  float a;
  if (exp == 0xf && mant == 0x7) {
    a = std::nanf("");
  } else if (exp == 0) {
    a = std::ldexp(static_cast<float>(mant), -9);
  } else {
    a = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
  }
  return negative ? -a : a;
}

uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a >= kFp8E4M3Max) return sign | 0x7e;  // saturate (infinities too)
  if (a < 0.015625f) {                       // below 2^-6: k * 2^-9, k in [0, 8]
    const auto k = static_cast<uint8_t>(std::nearbyint(a * 512.0f));
    return sign | k;  // k == 8 is the smallest normal's encoding
  }
  uint32_t u;
  std::memcpy(&u, &a, 4);
  // Round to 3 mantissa bits, ties to even; a carry moves into the exponent.
  const uint32_t r = (u + 0x7ffffu + ((u >> 20) & 1u)) >> 20;
  const uint32_t e = r - ((127u - 7u) << 3);  // rebias the exponent 127 -> 7
  return sign | static_cast<uint8_t>(e > 0x7eu ? 0x7eu : e);
}

const float* fp8_e4m3_table() {
  static const std::array<float, 256> kTable = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i)
      t[static_cast<size_t>(i)] = fp8_e4m3_to_f32(static_cast<uint8_t>(i));
    return t;
  }();
  return kTable.data();
}

}  // namespace loom
