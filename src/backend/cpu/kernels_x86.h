// 256-bit x86 kernels shared by kernels_avx2.cpp and kernels_avx512.cpp, each of
// which includes this header once under its own ISA flags (everything here has
// internal linkage, so the two copies never mix). LOOM_X86_VNNI selects
// vpdpbusd for the unscaled int8 dot products of the 32-value block types;
// K-quants use maddubs + madd, which also applies their 16-bit sub-block scales.
// Activation quantisation rounds exactly as the portable kernels do.
#pragma once

#include <immintrin.h>

#include <cmath>

#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_x86.h"

#ifndef LOOM_X86_VNNI
#error "define LOOM_X86_VNNI before including kernels_x86.h"
#endif

namespace loom::cpu {
namespace {

using namespace simd;  // NOLINT: this header is included once per ISA translation unit

// int32 x 8: sums of 4 products of unsigned bytes u and signed bytes s.
inline __m256i dot_us(__m256i u, __m256i s) {
#if LOOM_X86_VNNI
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
// The same for two signed operands (|a| <= 128, |b| <= 127).
inline __m256i dot_ss(__m256i a, __m256i b) {
  return dot_us(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// int32 x 8 of u*s (u <= 63 unsigned, s signed) where products of bytes 0..15
// are multiplied by sa and those of bytes 16..31 by sb (int16 scales).
inline __m256i dot_us_scaled(__m256i u, __m256i s, int sa, int sb) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                           _mm256_setr_m128i(_mm_set1_epi16(static_cast<int16_t>(sa)),
                                             _mm_set1_epi16(static_cast<int16_t>(sb))));
}

void x86_quantize_q8_1(const float* x, ActQ8_1* dst, int64_t k) {
  for (int64_t b = 0; b < k / kQK; ++b, x += kQK) {
    const float amax = max_abs(x, kQK);
    dst[b].d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    const __m256i q = round_pack32(x, id);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst[b].qs), q);
    const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
    dst[b].sum = hsum_i32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
  }
}

void x86_quantize_q8_k(const float* x, ActQ8_K* dst, int64_t k) {
  for (int64_t b = 0; b < k / kQKK; ++b, x += kQKK) {
    const float amax = max_abs(x, kQKK);
    dst[b].d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    for (int j = 0; j < kQKK / 32; ++j) {
      const __m256i q = round_pack32(x + 32 * j, id);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst[b].qs + 32 * j), q);
      // Sums of each 16 bytes: widen to int16 pairs, then to 4 int32 per half.
      const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
      const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
      const __m256i h = _mm256_hadd_epi32(s32, s32);  // per 128-bit lane: [a0+a1, a2+a3, ...]
      const __m256i hh = _mm256_hadd_epi32(h, h);
      dst[b].bsums[2 * j] = static_cast<int16_t>(_mm256_extract_epi32(hh, 0));
      dst[b].bsums[2 * j + 1] = static_cast<int16_t>(_mm256_extract_epi32(hh, 4));
    }
  }
}

[[maybe_unused]] float x86_dot_f32(const float* w, const float* x, int64_t k) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
         a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= k; i += 8)
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < k; ++i) s += w[i] * x[i];
  return s;
}

inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load_bf16x8(const uint16_t* p) {
  const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
inline float bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

template <__m256 (*Load)(const uint16_t*), float (*One)(uint16_t)>
[[maybe_unused]] float x86_dot_half(const uint16_t* w, const float* x, int64_t k) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    a0 = _mm256_fmadd_ps(Load(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(Load(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
  }
  for (; i + 8 <= k; i += 8) a0 = _mm256_fmadd_ps(Load(w + i), _mm256_loadu_ps(x + i), a0);
  float s = hsum(_mm256_add_ps(a0, a1));
  for (; i < k; ++i) s += One(w[i]) * x[i];
  return s;
}

// ---- Quantised dot products of one weight row with NX (1..4) activation rows.
// Each weight block is unpacked once and multiplied with the NX rows, so
// prefill (M > 1) pays the unpacking once per 4 rows; y[r * ys] gets row r.

// 32-value block types, all against ActQ8_1. The weights are made unsigned
// (u = q + offset) so one dot_us serves every type; the offset's share,
// offset * sum(x), is taken out through the integer accumulator's start value
// (-offset * sum / 8 in each of its 8 lanes). Q4_1/Q5_1 add m * dx * sum(x).
struct UnpackQ4_0 {
  static constexpr int kOffset = 8;
  static __m256i u(const BlockQ4_0& b) { return unpack_nibbles(b.qs); }
};
struct UnpackQ5_0 {
  static constexpr int kOffset = 16;
  static __m256i u(const BlockQ5_0& b) {
    return _mm256_or_si256(unpack_nibbles(b.qs), unpack_fifth_bits(b.qh));
  }
};
struct UnpackQ4_1 {
  static constexpr int kOffset = 0;
  static __m256i u(const BlockQ4_1& b) { return unpack_nibbles(b.qs); }
};
struct UnpackQ5_1 {
  static constexpr int kOffset = 0;
  static __m256i u(const BlockQ5_1& b) {
    return _mm256_or_si256(unpack_nibbles(b.qs), unpack_fifth_bits(b.qh));
  }
};
#if LOOM_X86_VNNI
struct UnpackQ8_0 {  // q + 128 as unsigned bytes (vpdpbusd keeps 32-bit sums; no saturation)
  static constexpr int kOffset = 128;
  static __m256i u(const BlockQ8_0& b) {
    return _mm256_xor_si256(load256(b.qs), _mm256_set1_epi8(-128));
  }
};
#endif

template <class Unpack, class Block>
struct Mdot32 {
  template <int NX>
  static void run(const Block* w, int64_t nb, const ActQ8_1* x, int64_t xs, float* y, int64_t ys) {
    __m256 acc[NX];
    float acc_m[NX];
    for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps(), acc_m[r] = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i u = Unpack::u(w[b]);
      const float dw = f16(w[b].d);
      for (int r = 0; r < NX; ++r) {
        const ActQ8_1& a = x[r * xs + b];
        __m256i p;
#if LOOM_X86_VNNI
        p = _mm256_dpbusd_epi32(_mm256_set1_epi32(-(Unpack::kOffset / 8) * a.sum), u,
                                load256(a.qs));
#else
        p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, load256(a.qs)), _mm256_set1_epi16(1));
        if constexpr (Unpack::kOffset != 0)
          p = _mm256_add_epi32(p, _mm256_set1_epi32(-(Unpack::kOffset / 8) * a.sum));
#endif
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), _mm256_cvtepi32_ps(p), acc[r]);
        if constexpr (Unpack::kOffset == 0)
          acc_m[r] += f16(w[b].m) * a.d * static_cast<float>(a.sum);
      }
    }
    for (int r = 0; r < NX; ++r) y[r * ys] = hsum(acc[r]) + acc_m[r];
  }
};

#if !LOOM_X86_VNNI
// Q8_0 without VNNI: q + 128 would saturate maddubs, so use the sign trick.
struct Mdot32Q8Signed {
  template <int NX>
  static void run(const BlockQ8_0* w, int64_t nb, const ActQ8_1* x, int64_t xs, float* y,
                  int64_t ys) {
    __m256 acc[NX];
    for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i q = load256(w[b].qs);
      const __m256i u = _mm256_sign_epi8(q, q);
      const float dw = f16(w[b].d);
      for (int r = 0; r < NX; ++r) {
        const ActQ8_1& a = x[r * xs + b];
        const __m256i p = dot_us(u, _mm256_sign_epi8(load256(a.qs), q));
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), _mm256_cvtepi32_ps(p), acc[r]);
      }
    }
    for (int r = 0; r < NX; ++r) y[r * ys] = hsum(acc[r]);
  }
};
#endif

// Q4_K / Q5_K: integer sum of sc_j * q.x over the 8 sub-blocks, minus the mins
// term m_j * sum(x) from the activation block sums.
template <bool kFive, class Block>
struct MdotK45 {
  template <int NX>
  static void run(const Block* w, int64_t nb, const ActQ8_K* x, int64_t xs, float* y, int64_t ys) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc[NX];  // d-part minus dmin-part, both scaled by the row's x.d
    for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const __m128i scm = unpack_k_scales(w[b].scales);
      // mins: m_j duplicated into int16 pairs against the 16 bsums.
      const __m128i m16 = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(scm, scm));
      const __m256i m_pairs =
          _mm256_setr_m128i(_mm_unpacklo_epi16(m16, m16), _mm_unpackhi_epi16(m16, m16));
      const float d = f16(w[b].d), dmin = f16(w[b].dmin);
      // scales as int16 x 8, each broadcast to a whole register when used.
      alignas(16) int16_t sc[8];
      _mm_store_si128(reinterpret_cast<__m128i*>(sc), _mm_cvtepu8_epi16(scm));
      __m256i sumi[NX];
      for (int r = 0; r < NX; ++r) {
        const ActQ8_K& a = x[r * xs + b];
        const __m256i summ = _mm256_madd_epi16(m_pairs, load256(a.bsums));
        acc[r] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * a.d), _mm256_cvtepi32_ps(summ), acc[r]);
        sumi[r] = _mm256_setzero_si256();
      }
      __m256i hbits;
      if constexpr (kFive) hbits = load256(w[b].qh);
      for (int g = 0; g < 4; ++g) {
        const __m256i q = load256(w[b].qs + 32 * g);
        __m256i lo = _mm256_and_si256(q, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        if constexpr (kFive) {
          const __m256i one = _mm256_set1_epi8(1);
          lo = _mm256_or_si256(
              lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * g), one), 4));
          hi = _mm256_or_si256(
              hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * g + 1), one), 4));
        }
        const __m256i s_lo = _mm256_set1_epi16(sc[2 * g]), s_hi = _mm256_set1_epi16(sc[2 * g + 1]);
        for (int r = 0; r < NX; ++r) {
          const int8_t* xq = x[r * xs + b].qs + 64 * g;
          const __m256i p_lo = _mm256_maddubs_epi16(lo, load256(xq));
          const __m256i p_hi = _mm256_maddubs_epi16(hi, load256(xq + 32));
          sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p_lo, s_lo));
          sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p_hi, s_hi));
        }
      }
      for (int r = 0; r < NX; ++r)
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[r * xs + b].d), _mm256_cvtepi32_ps(sumi[r]),
                                 acc[r]);
    }
    for (int r = 0; r < NX; ++r) y[r * ys] = hsum(acc[r]);
  }
};

struct MdotQ6K {
  template <int NX>
  static void run(const BlockQ6_K* w, int64_t nb, const ActQ8_K* x, int64_t xs, float* y,
                  int64_t ys) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(3);
    __m256 acc[NX];
    for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* sc = w[b].scales;
      // offset = sum_j sc_j * sum(x in sub-block j): 32 * offset is the share of
      // the -32 in every q.
      const __m256i sc16 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
      __m256i sumi[NX];
      for (int r = 0; r < NX; ++r)
        sumi[r] = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(x[r * xs + b].bsums)), 5);
      for (int h = 0; h < 2; ++h) {
        const __m256i l0 = load256(w[b].ql + 64 * h), l1 = load256(w[b].ql + 64 * h + 32);
        const __m256i qh = load256(w[b].qh + 32 * h);
        const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l0, low4),
                                           _mm256_slli_epi16(_mm256_and_si256(qh, two), 4));
        const __m256i q2 =
            _mm256_or_si256(_mm256_and_si256(l1, low4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), two), 4));
        const __m256i q3 =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), two), 4));
        const __m256i q4 =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), two), 4));
        const int8_t* s = sc + 8 * h;
        for (int r = 0; r < NX; ++r) {
          const int8_t* xq = x[r * xs + b].qs + 128 * h;
          __m256i t = dot_us_scaled(q1, load256(xq), s[0], s[1]);
          t = _mm256_add_epi32(t, dot_us_scaled(q2, load256(xq + 32), s[2], s[3]));
          t = _mm256_add_epi32(t, dot_us_scaled(q3, load256(xq + 64), s[4], s[5]));
          t = _mm256_add_epi32(t, dot_us_scaled(q4, load256(xq + 96), s[6], s[7]));
          sumi[r] = _mm256_sub_epi32(sumi[r], t);
        }
      }
      // sumi = 32 * offset - sum_j sc_j * q.x: the sign flips back in the scale.
      const float dw = f16(w[b].d);
      for (int r = 0; r < NX; ++r)
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(-dw * x[r * xs + b].d), _mm256_cvtepi32_ps(sumi[r]),
                                 acc[r]);
    }
    for (int r = 0; r < NX; ++r) y[r * ys] = hsum(acc[r]);
  }
};

// nx (1..4) to the kernel instantiated for it.
template <class Impl, class W, class X>
void x86_mdot(const W* w, int64_t nb, const X* x, int64_t xs, int nx, float* y, int64_t ys) {
  switch (nx) {
    case 1:
      return Impl::template run<1>(w, nb, x, xs, y, ys);
    case 2:
      return Impl::template run<2>(w, nb, x, xs, y, ys);
    case 3:
      return Impl::template run<3>(w, nb, x, xs, y, ys);
    default:
      return Impl::template run<4>(w, nb, x, xs, y, ys);
  }
}

#if LOOM_X86_VNNI
using MdotQ8_0 = Mdot32<UnpackQ8_0, BlockQ8_0>;
#else
using MdotQ8_0 = Mdot32Q8Signed;
#endif

void x86_mdot_q8_0(const BlockQ8_0* w, int64_t nb, const ActQ8_1* x, int64_t xs, int nx, float* y,
                   int64_t ys) {
  x86_mdot<MdotQ8_0>(w, nb, x, xs, nx, y, ys);
}
void x86_mdot_q4_0(const BlockQ4_0* w, int64_t nb, const ActQ8_1* x, int64_t xs, int nx, float* y,
                   int64_t ys) {
  x86_mdot<Mdot32<UnpackQ4_0, BlockQ4_0>>(w, nb, x, xs, nx, y, ys);
}
void x86_mdot_q4_1(const BlockQ4_1* w, int64_t nb, const ActQ8_1* x, int64_t xs, int nx, float* y,
                   int64_t ys) {
  x86_mdot<Mdot32<UnpackQ4_1, BlockQ4_1>>(w, nb, x, xs, nx, y, ys);
}
void x86_mdot_q5_0(const BlockQ5_0* w, int64_t nb, const ActQ8_1* x, int64_t xs, int nx, float* y,
                   int64_t ys) {
  x86_mdot<Mdot32<UnpackQ5_0, BlockQ5_0>>(w, nb, x, xs, nx, y, ys);
}
void x86_mdot_q5_1(const BlockQ5_1* w, int64_t nb, const ActQ8_1* x, int64_t xs, int nx, float* y,
                   int64_t ys) {
  x86_mdot<Mdot32<UnpackQ5_1, BlockQ5_1>>(w, nb, x, xs, nx, y, ys);
}
void x86_mdot_q4_k(const BlockQ4_K* w, int64_t nb, const ActQ8_K* x, int64_t xs, int nx, float* y,
                   int64_t ys) {
  x86_mdot<MdotK45<false, BlockQ4_K>>(w, nb, x, xs, nx, y, ys);
}
void x86_mdot_q5_k(const BlockQ5_K* w, int64_t nb, const ActQ8_K* x, int64_t xs, int nx, float* y,
                   int64_t ys) {
  x86_mdot<MdotK45<true, BlockQ5_K>>(w, nb, x, xs, nx, y, ys);
}
void x86_mdot_q6_k(const BlockQ6_K* w, int64_t nb, const ActQ8_K* x, int64_t xs, int nx, float* y,
                   int64_t ys) {
  x86_mdot<MdotQ6K>(w, nb, x, xs, nx, y, ys);
}

void x86_axpy(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

void x86_scale(float a, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= a;
}

void x86_f16_row(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_f16x8(x + i));
  for (; i < n; ++i) y[i] = f16(x[i]);
}

void x86_bf16_row(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_bf16x8(x + i));
  for (; i < n; ++i) y[i] = bf16(x[i]);
}

}  // namespace
}  // namespace loom::cpu
