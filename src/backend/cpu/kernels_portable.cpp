// Portable scalar kernels (plain x86-64 / any target): the fallback when the CPU
// has no AVX2, and the simplest statement of what each SIMD kernel computes.
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels.h"
#include "core/half.h"

namespace loom::cpu {
namespace {

void quantize_q8_1(const float* x, ActQ8_1* dst, int64_t k) {
  for (int64_t b = 0; b < k / kQK; ++b, x += kQK) {
    float amax = 0;
    for (int l = 0; l < kQK; ++l) amax = std::max(amax, std::fabs(x[l]));
    const float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
    dst[b].d = d;
    int sum = 0;
    for (int l = 0; l < kQK; ++l)
      sum += dst[b].qs[l] = static_cast<int8_t>(std::nearbyint(x[l] * id));
    dst[b].sum = sum;
  }
}

void quantize_q8_k(const float* x, ActQ8_K* dst, int64_t k) {
  for (int64_t b = 0; b < k / kQKK; ++b, x += kQKK) {
    float amax = 0;
    for (int l = 0; l < kQKK; ++l) amax = std::max(amax, std::fabs(x[l]));
    const float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
    dst[b].d = d;
    for (int l = 0; l < kQKK; ++l) dst[b].qs[l] = static_cast<int8_t>(std::nearbyint(x[l] * id));
    for (int j = 0; j < kQKK / 16; ++j) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += dst[b].qs[16 * j + l];
      dst[b].bsums[j] = static_cast<int16_t>(s);
    }
  }
}

float dot_f32(const float* w, const float* x, int64_t k) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += w[i + l] * x[i + l];
  float s = 0;
  for (; i < k; ++i) s += w[i] * x[i];
  for (float a : acc) s += a;
  return s;
}

float dot_f16(const uint16_t* w, const float* x, int64_t k) {
  float s = 0;
  for (int64_t i = 0; i < k; ++i) s += f16_to_f32(w[i]) * x[i];
  return s;
}

float dot_bf16(const uint16_t* w, const float* x, int64_t k) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += bf16_to_f32(w[i + l]) * x[i + l];
  float s = 0;
  for (; i < k; ++i) s += bf16_to_f32(w[i]) * x[i];
  for (float a : acc) s += a;
  return s;
}

float dot_q8_0(const BlockQ8_0* w, const ActQ8_1* x, int64_t nb) {
  float s = 0;
  for (int64_t b = 0; b < nb; ++b) {
    int sumi = 0;
    for (int l = 0; l < kQK; ++l) sumi += w[b].qs[l] * x[b].qs[l];
    s += f16_to_f32(w[b].d) * x[b].d * static_cast<float>(sumi);
  }
  return s;
}

float dot_q4_0(const BlockQ4_0* w, const ActQ8_1* x, int64_t nb) {
  float s = 0;
  for (int64_t b = 0; b < nb; ++b) {
    int sumi = 0;
    for (int l = 0; l < kQK / 2; ++l)
      sumi += ((w[b].qs[l] & 0xF) - 8) * x[b].qs[l] + ((w[b].qs[l] >> 4) - 8) * x[b].qs[l + 16];
    s += f16_to_f32(w[b].d) * x[b].d * static_cast<float>(sumi);
  }
  return s;
}

// Q4_1: sum of (d*q + m) * dx*qx = d*dx*sum(q*qx) + m*dx*sum(qx).
float dot_q4_1(const BlockQ4_1* w, const ActQ8_1* x, int64_t nb) {
  float s = 0;
  for (int64_t b = 0; b < nb; ++b) {
    int sumi = 0;
    for (int l = 0; l < kQK / 2; ++l)
      sumi += (w[b].qs[l] & 0xF) * x[b].qs[l] + (w[b].qs[l] >> 4) * x[b].qs[l + 16];
    s += x[b].d * (f16_to_f32(w[b].d) * static_cast<float>(sumi) +
                   f16_to_f32(w[b].m) * static_cast<float>(x[b].sum));
  }
  return s;
}

// The five-bit values 0..31 of a Q5_0 / Q5_1 block.
template <class Block>
void unpack_q5(const Block& w, int* q) {
  const uint32_t qh =
      w.qh[0] | (uint32_t{w.qh[1]} << 8) | (uint32_t{w.qh[2]} << 16) | (uint32_t{w.qh[3]} << 24);
  for (int l = 0; l < kQK / 2; ++l) {
    q[l] = (w.qs[l] & 0xF) | static_cast<int>(((qh >> l) & 1) << 4);
    q[l + 16] = (w.qs[l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1) << 4);
  }
}

float dot_q5_0(const BlockQ5_0* w, const ActQ8_1* x, int64_t nb) {
  float s = 0;
  int q[kQK];
  for (int64_t b = 0; b < nb; ++b) {
    unpack_q5(w[b], q);
    int sumi = 0;
    for (int l = 0; l < kQK; ++l) sumi += (q[l] - 16) * x[b].qs[l];
    s += f16_to_f32(w[b].d) * x[b].d * static_cast<float>(sumi);
  }
  return s;
}

float dot_q5_1(const BlockQ5_1* w, const ActQ8_1* x, int64_t nb) {
  float s = 0;
  int q[kQK];
  for (int64_t b = 0; b < nb; ++b) {
    unpack_q5(w[b], q);
    int sumi = 0;
    for (int l = 0; l < kQK; ++l) sumi += q[l] * x[b].qs[l];
    s += x[b].d * (f16_to_f32(w[b].d) * static_cast<float>(sumi) +
                   f16_to_f32(w[b].m) * static_cast<float>(x[b].sum));
  }
  return s;
}

// Q4_K and Q5_K: sum over sub-blocks of d*sc*sum(q*x) - dmin*m*sum(x).
template <bool kFive, class Block>
float dot_k45(const Block* w, const ActQ8_K* x, int64_t nb) {
  float s = 0;
  for (int64_t b = 0; b < nb; ++b) {
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      k_scale_min(w[b].scales, j, sc, m);
      const uint8_t* q = w[b].qs + 32 * (j / 2);
      const int8_t* xq = x[b].qs + 32 * j;
      int dot = 0;
      for (int l = 0; l < 32; ++l) {
        int v = (j & 1) ? q[l] >> 4 : q[l] & 0xF;
        if constexpr (kFive) v += ((w[b].qh[l] >> j) & 1) << 4;
        dot += v * xq[l];
      }
      sumi += sc * dot;
      summ += m * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
    }
    s += x[b].d * (f16_to_f32(w[b].d) * static_cast<float>(sumi) -
                   f16_to_f32(w[b].dmin) * static_cast<float>(summ));
  }
  return s;
}

float dot_q4_k(const BlockQ4_K* w, const ActQ8_K* x, int64_t nb) {
  return dot_k45<false>(w, x, nb);
}
float dot_q5_k(const BlockQ5_K* w, const ActQ8_K* x, int64_t nb) {
  return dot_k45<true>(w, x, nb);
}

float dot_q6_k(const BlockQ6_K* w, const ActQ8_K* x, int64_t nb) {
  float s = 0;
  for (int64_t b = 0; b < nb; ++b) {
    int8_t q[kQKK];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = w[b].ql + 64 * h;
      const uint8_t* qh = w[b].qh + 32 * h;
      int8_t* o = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        o[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        o[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        o[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        o[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      int dot = 0;
      for (int l = 0; l < 16; ++l) dot += q[16 * j + l] * x[b].qs[16 * j + l];
      sumi += w[b].scales[j] * dot;
    }
    s += f16_to_f32(w[b].d) * x[b].d * static_cast<float>(sumi);
  }
  return s;
}

// One weight row against nx activation rows, one row at a time.
template <class W, class X, float (*Dot)(const W*, const X*, int64_t)>
void mdot(const W* w, int64_t nb, const X* x, int64_t xs, int nx, float* y, int64_t ys) {
  for (int r = 0; r < nx; ++r) y[r * ys] = Dot(w, x + r * xs, nb);
}

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

void attn_scores(const float* q, int64_t rows, int64_t hd, const float* kt, int64_t ldk, float* s) {
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * ldk;
    for (int64_t j = 0; j < ldk; ++j) sr[j] = 0;
    for (int64_t d = 0; d < hd; ++d) {
      const float qv = q[r * hd + d];
      for (int64_t j = 0; j < ldk; ++j) sr[j] += qv * kt[d * ldk + j];
    }
  }
}

float attn_exp_sum(float* x, int64_t n, float m) {
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += x[j] = std::exp(x[j] - m);
  return sum;
}

void attn_pv(const float* p, int64_t rows, int64_t ldp, int64_t nk, const float* v, int64_t hd,
             float* o) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < nk; ++j) {
      const float pj = p[r * ldp + j];
      for (int64_t d = 0; d < hd; ++d) o[r * hd + d] += pj * v[j * hd + d];
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
  static const CpuKernels k{Isa::Portable,
                            quantize_q8_1,
                            quantize_q8_k,
                            dot_f32,
                            dot_f16,
                            dot_bf16,
                            mdot<BlockQ8_0, ActQ8_1, dot_q8_0>,
                            mdot<BlockQ4_0, ActQ8_1, dot_q4_0>,
                            mdot<BlockQ4_1, ActQ8_1, dot_q4_1>,
                            mdot<BlockQ5_0, ActQ8_1, dot_q5_0>,
                            mdot<BlockQ5_1, ActQ8_1, dot_q5_1>,
                            mdot<BlockQ4_K, ActQ8_K, dot_q4_k>,
                            mdot<BlockQ5_K, ActQ8_K, dot_q5_k>,
                            mdot<BlockQ6_K, ActQ8_K, dot_q6_k>,
                            axpy,
                            scale,
                            f16_row,
                            bf16_row,
                            transpose,
                            attn_scores,
                            attn_exp_sum,
                            attn_pv,
                            silu_mul,
                            gelu_mul};
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
