// Portable scalar kernels (plain x86-64 / any target): the fallback when the CPU
// has no AVX2, and the simplest statement of what each SIMD kernel computes.
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels.h"
#include "core/half.h"

namespace loom::cpu {
namespace {

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
void scale(float a, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}
void f16_row(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(x[i]);
}
void bf16_row(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}

void transpose(const float* src, int64_t rows, int64_t cols, int64_t lds, float* dst, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

void attn_scores(const float* q, int64_t rows, int64_t hd, const float* kt, int64_t ldk,
                 int64_t ncols, float* s) {
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * ldk;
    for (int64_t j = 0; j < ncols; ++j) sr[j] = 0;
    for (int64_t d = 0; d < hd; ++d) {
      const float qv = q[r * hd + d];
      for (int64_t j = 0; j < ncols; ++j) sr[j] += qv * kt[d * ldk + j];
    }
  }
}

float attn_exp_sum(float* x, int64_t n, float m) {
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += x[j] = std::exp(x[j] - m);
  return sum;
}

float attn_max(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t j = 1; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

void attn_pv(const float* p, int64_t rows, int64_t ldp, int64_t nk, const float* v, int64_t ldv,
             int64_t hd, float* o) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < nk; ++j) {
      const float pj = p[r * ldp + j];
      for (int64_t d = 0; d < hd; ++d) o[r * hd + d] += pj * v[j * ldv + d];
    }
}

void silu_mul(const float* g, const float* u, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void gelu_mul(const float* g, const float* u, float* out, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x))) * u[i];
  }
}

}  // namespace

const CpuKernels& kernels_portable() {
  static const CpuKernels k{Isa::Portable, axpy,         scale,    f16_row, bf16_row, transpose,
                            attn_scores,   attn_exp_sum, attn_max, attn_pv, silu_mul, gelu_mul};
  return k;
}

const CpuKernels& kernels_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512Vnni:
      return kernels_avx512vnni();
    case Isa::Avx512:
      return kernels_avx512();
    case Isa::Avx2:
      return kernels_avx2();
    case Isa::Portable:
      break;
  }
  return kernels_portable();
}

}  // namespace loom::cpu
