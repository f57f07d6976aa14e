// Small 256-bit x86 helpers shared by the kernel files compiled with AVX2 or
// AVX-512 flags (kernels_x86.h, gemm_x86.h): loads, horizontal sums, activation
// rounding and the unpacking of quantised nibbles and bits. All inline; each
// including file is built for one instruction set.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace loom::cpu::simd {
// Internal linkage, as for every header of the per-ISA files (README.md).
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float f16(uint16_t h) {
  return _cvtsh_ss(h);
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// 32 floats scaled by id, rounded to nearest-even, as 32 int8 in order.
inline __m256i round_pack32(const float* x, __m256 id) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x), id), kRound));
  __m256i i1 =
      _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8), id), kRound));
  __m256i i2 =
      _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 16), id), kRound));
  __m256i i3 =
      _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 24), id), kRound));
  i0 = _mm256_packs_epi32(i0, i1);
  i2 = _mm256_packs_epi32(i2, i3);
  i0 = _mm256_packs_epi16(i0, i2);
  return _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline float max_abs(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8)
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

inline __m256i unpack_nibbles(const uint8_t* qs) {  // 16 bytes to 32 values 0..15, in order
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_setr_m128i(_mm_and_si128(q, m), _mm_and_si128(_mm_srli_epi16(q, 4), m));
}

// Byte i = 0x10 where bit i of the 32 high bits is set, else 0.
inline __m256i unpack_fifth_bits(const uint8_t* qh_bytes) {
  uint32_t qh;
  __builtin_memcpy(&qh, qh_bytes, 4);
#if defined(__AVX512BW__) && defined(__AVX512VL__)  // the bits are a byte mask
  return _mm256_maskz_set1_epi8(qh, 0x10);
#else
  // Byte i gets byte i/8 of qh, then tests its bit i%8.
  const __m256i bytes = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(qh)),
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit),
                          _mm256_set1_epi8(0x10));
#endif
}

// The 8 six-bit scales (bytes 0..7 of the result) and mins (bytes 8..15) of a
// Q4_K / Q5_K super-block, unpacked from their 12-byte packing (see k_scale_min).
inline __m128i unpack_k_scales(const uint8_t* s) {
  uint32_t u[3];
  __builtin_memcpy(u, s, 12);
  constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
  const uint32_t sc_lo = u[0] & k6, m_lo = u[1] & k6;
  const uint32_t sc_hi = (u[2] & k4) | (((u[0] >> 6) & k2) << 4);
  const uint32_t m_hi = ((u[2] >> 4) & k4) | (((u[1] >> 6) & k2) << 4);
  return _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), static_cast<int>(m_lo),
                        static_cast<int>(m_hi));
}

// In-place transpose of an 8 x 8 matrix of int32 (row i in r[i]).
inline void transpose8x8(__m256i* r) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
  }
}

// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols (f32), 8 x 8 at a time.
inline void transpose_f32(const float* src, int64_t rows, int64_t cols, int64_t lds, float* dst,
                          int64_t ldd) {
  const int64_t r8 = rows / 8 * 8, c8 = cols / 8 * 8;
  for (int64_t r = 0; r < r8; r += 8)
    for (int64_t c = 0; c < c8; c += 8) {
      __m256i v[8];
      for (int i = 0; i < 8; ++i)
        v[i] = _mm256_castps_si256(_mm256_loadu_ps(src + (r + i) * lds + c));
      transpose8x8(v);
      for (int i = 0; i < 8; ++i)
        _mm256_storeu_ps(dst + (c + i) * ldd + r, _mm256_castsi256_ps(v[i]));
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = (r < r8 ? c8 : 0); c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

}  // namespace
}  // namespace loom::cpu::simd
