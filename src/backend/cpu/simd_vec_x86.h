// Vector policies for the templated x86 kernels (gemm_x86.h, attention_x86.h):
// the same names over 256-bit AVX2 (V256) and 512-bit AVX-512 (V512Vnni with
// VNNI dot products, V512Bw without), so each kernel is written once. Include only from files
// compiled with the matching ISA flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/simd_x86.h"

namespace loom::cpu::simd {
// Internal linkage, as for every header of the per-ISA files (README.md).
namespace {

struct V256 {
  using I = __m256i;
  using F = __m256;
  static constexpr int kLanes = 8;
  static I zero() { return _mm256_setzero_si256(); }
  static I set1(int32_t v) { return _mm256_set1_epi32(v); }
  static I load(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  // u <= 63 keeps maddubs' pair sums (2 * 63 * 127) inside int16.
  static I dot(I acc, I u, I s) {
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
  // dot(dot(acc, u0, s0), u1, s1), the two maddubs' int16 pair sums added
  // before one widening (u <= 63: 4 * 63 * 127 stays inside int16; exact).
  static I dot2(I acc, I u0, I s0, I u1, I s1) {
    const I p = _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  }
  static I dot_signed(I acc, I w, I x) {
    const I p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static void storef(float* p, F v) { _mm256_storeu_ps(p, v); }
  static float reduce_add(F v) { return simd::hsum(v); }
  static float reduce_max(F v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // e^x for x <= 88 (lanes below -87 give 0, -inf included): 2^n * p(r) with
  // x = n ln2 + r, |r| <= ln2 / 2, p of degree 6 (relative error ~2e-7).
  static F exp(F x) {
    const F big_neg = _mm256_set1_ps(-87.0f);
    const F zero_mask = _mm256_cmp_ps(x, big_neg, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, big_neg), _mm256_set1_ps(88.0f));
    const F n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    F r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    F p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    // 2^n through the exponent bits; n in [-126, 127] here.
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(zero_mask, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
  }
  static F zerof() { return _mm256_setzero_ps(); }
  static F set1f(float v) { return _mm256_set1_ps(v); }
  static F loadf(const float* p) { return _mm256_loadu_ps(p); }
  static F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static void store(float* c, F v, int n, bool accumulate) {
    if (n <= 0) return;
    if (n >= 8) {
      if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(c));
      _mm256_storeu_ps(c, v);
      return;
    }
    const __m256i m =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    if (accumulate) v = _mm256_add_ps(v, _mm256_maskload_ps(c, m));
    _mm256_maskstore_ps(c, m, v);
  }
};

#if defined(__AVX512F__) && defined(__AVX512BW__)
// kVnni: vpdpbusd (AVX-512 VNNI); otherwise maddubs + madd, whose int16 pair
// sums keep u <= 63 exact (Q8_0 is then taken signed).
template <bool kVnni>
struct V512 {
#if !defined(__AVX512VNNI__)
  static_assert(!kVnni, "V512<true> needs a file built with -mavx512vnni");
#endif
  using I = __m512i;
  using F = __m512;
  static constexpr int kLanes = 16;
  static I zero() {
    return _mm512_setzero_si512();
  }
  static I set1(int32_t v) {
    return _mm512_set1_epi32(v);
  }
  static I load(const uint8_t* p) {
    return _mm512_loadu_si512(p);
  }
  static I dot(I acc, I u, I s) {
#if defined(__AVX512VNNI__)
    if constexpr (kVnni) return _mm512_dpbusd_epi32(acc, u, s);
#endif
    return _mm512_add_epi32(acc,
                            _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
  }
  // dot(dot(acc, u0, s0), u1, s1); without VNNI, V256::dot2's one widening
  // of both products (u <= 63; exact).
  static I dot2(I acc, I u0, I s0, I u1, I s1) {
#if defined(__AVX512VNNI__)
    if constexpr (kVnni) return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc, u0, s0), u1, s1);
#endif
    const I p = _mm512_add_epi16(_mm512_maddubs_epi16(u0, s0), _mm512_maddubs_epi16(u1, s1));
    return _mm512_add_epi32(acc, _mm512_madd_epi16(p, _mm512_set1_epi16(1)));
  }
  // Signed bytes on both sides: |w| against x with w's sign.
  static I dot_signed(I acc, I w, I x) {
    const I sx = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
    return dot(acc, _mm512_abs_epi8(w), sx);
  }
  static F add(F a, F b) {
    return _mm512_add_ps(a, b);
  }
  static F sub(F a, F b) {
    return _mm512_sub_ps(a, b);
  }
  static F max(F a, F b) {
    return _mm512_max_ps(a, b);
  }
  static F div(F a, F b) {
    return _mm512_div_ps(a, b);
  }
  static void storef(float* p, F v) {
    _mm512_storeu_ps(p, v);
  }
  static float reduce_add(F v) {
    return _mm512_reduce_add_ps(v);
  }
  static float reduce_max(F v) {
    return _mm512_reduce_max_ps(v);
  }
  // e^x as V256::exp, with scalef for the 2^n (lanes below -87 give 0).
  static F exp(F x) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    const F n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    F r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    F p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, p, n);
  }
  static F zerof() {
    return _mm512_setzero_ps();
  }
  static F set1f(float v) {
    return _mm512_set1_ps(v);
  }
  static F loadf(const float* p) {
    return _mm512_loadu_ps(p);
  }
  static F cvt(I v) {
    return _mm512_cvtepi32_ps(v);
  }
  static F mul(F a, F b) {
    return _mm512_mul_ps(a, b);
  }
  static F fmadd(F a, F b, F c) {
    return _mm512_fmadd_ps(a, b, c);
  }
  // The first n (<= 16, may be <= 0) lanes to c, added to what is there when accumulate.
  static void store(float* c, F v, int n, bool accumulate) {
    if (n <= 0) return;
    const __mmask16 m = n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
    if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, c));
    _mm512_mask_storeu_ps(c, m, v);
  }
};
using V512Bw = V512<false>;
#if defined(__AVX512VNNI__)
using V512Vnni = V512<true>;
#endif

#endif

}  // namespace
}  // namespace loom::cpu::simd
