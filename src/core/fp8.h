// FP8 E4M3 ("e4m3fn": 1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no
// infinities, 0x7f/0xff are NaN, largest finite 448) <-> float on the host.
// Encoding rounds to nearest even and saturates finite overflow and
// infinities to +-448, as CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE,
// __NV_E4M3) does, so host references reproduce the GPU's bytes exactly.
// Pure functions, callable from any thread.
#pragma once

#include <cstdint>

namespace loom {

inline constexpr float kFp8E4M3Max = 448.0f;

// The value of an E4M3 byte (NaN for 0x7f and 0xff).
float fp8_e4m3_to_f32(uint8_t v);

// The E4M3 byte nearest to f (ties to even), saturating at +-448; NaN gives 0x7f.
uint8_t f32_to_fp8_e4m3(float f);

// All 256 decoded values, indexed by the byte.
const float* fp8_e4m3_table();

// The dequantising multiplier of a symmetric FP8 quantisation whose largest
// magnitude is `amax`: amax / 448, or a tiny positive scale when amax is 0 or
// below 1e-12 (so 1 / scale stays finite and zeros stay zero). Activation
// quantisers on every backend use it, the GPU kernels through the same
// float operations.
inline float fp8_scale_for_amax(float amax) {
  constexpr float kMinAmax = 1e-12f;
  return (amax > kMinAmax ? amax : kMinAmax) / kFp8E4M3Max;
}

}  // namespace loom
