// The AVX-512 kernel table, built twice: kernels_avx512.cpp with VNNI
// (vpdpbusd for the 32-block int8 dot products) and kernels_avx512bw.cpp
// without; each defines LOOM_X86_VNNI and includes this header once. 512-bit
// float dot products and attention tiles; the quantised row dots share the
// 256-bit kernels of kernels_x86.h (compiled with AVX-512 flags).
#pragma once

#include "backend/cpu/attention_x86.h"
#include "backend/cpu/kernels_x86.h"
#include "backend/cpu/simd_vec_x86.h"

namespace loom::cpu {
namespace {

using Vec = simd::V512<LOOM_X86_VNNI != 0>;

void avx512_attn_pv(const float* p, int64_t rows, int64_t ldp, int64_t nk, const float* v,
                    int64_t hd, float* o) {
  if (hd % Vec::kLanes == 0) return attn::pv<Vec>(p, rows, ldp, nk, v, hd, o);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < nk; ++j) x86_axpy(p[r * ldp + j], v + j * hd, o + r * hd, hd);
}

}  // namespace
}  // namespace loom::cpu

namespace loom::cpu {
namespace {

float avx512_dot_f32(const float* w, const float* x, int64_t k) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
  }
  if (i + 16 <= k) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
    i += 16;
  }
  if (i < k) {  // masked tail
    const __mmask16 m = static_cast<__mmask16>((1u << (k - i)) - 1);
    a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_maskz_loadu_ps(m, x + i), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

inline __m512 load_f16x16(const uint16_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
inline __m512 load_bf16x16(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

template <__m512 (*Load)(const uint16_t*, __mmask16)>
float avx512_dot_half(const uint16_t* w, const float* x, int64_t k) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    a0 = _mm512_fmadd_ps(Load(w + i, 0xFFFF), _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(Load(w + i + 16, 0xFFFF), _mm512_loadu_ps(x + i + 16), a1);
  }
  for (; i < k; i += 16) {
    const __mmask16 m =
        k - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (k - i)) - 1);
    a0 = _mm512_fmadd_ps(Load(w + i, m), _mm512_maskz_loadu_ps(m, x + i), a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

// The table of this file's instruction set (tagged isa).
CpuKernels make_avx512_table(Isa isa) {
  return CpuKernels{isa,
                    x86_quantize_q8_1,
                    x86_quantize_q8_k,
                    avx512_dot_f32,
                    avx512_dot_half<load_f16x16>,
                    avx512_dot_half<load_bf16x16>,
                    x86_mdot_q8_0,
                    x86_mdot_q4_0,
                    x86_mdot_q4_1,
                    x86_mdot_q5_0,
                    x86_mdot_q5_1,
                    x86_mdot_q4_k,
                    x86_mdot_q5_k,
                    x86_mdot_q6_k,
                    x86_axpy,
                    x86_scale,
                    x86_f16_row,
                    x86_bf16_row,
                    simd::transpose_f32,
                    attn::scores<Vec>,
                    attn::exp_sum<Vec>,
                    avx512_attn_pv,
                    attn::gated<Vec, false>,
                    attn::gated<Vec, true>};
}

}  // namespace
}  // namespace loom::cpu
