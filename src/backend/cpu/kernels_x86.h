// 256-bit x86 vector helpers (axpy, scale, f16 / bf16 rows) shared by
// kernels_avx2.cpp and kernels_avx512.h, each of which includes this header
// once under its own ISA flags (everything here has internal linkage, so the
// copies never mix). The matmul kernels live in gemm*.h.
#pragma once

#include <immintrin.h>

#include <cmath>

#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_x86.h"

namespace loom::cpu {
namespace {

using namespace simd;  // NOLINT: this header is included once per ISA translation unit

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
