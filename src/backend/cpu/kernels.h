// The per-ISA inner loops of the CPU backend: activation quantisers, dot
// products of one weight row with one to four activation rows for every weight
// type, and the f32 vector helpers attention uses. One table per instruction set
// (kernels_portable.cpp, kernels_avx2.cpp, kernels_avx512bw.cpp, kernels_avx512.cpp); callers pick
// one with kernels_for(active_isa()). All functions are pure and thread-safe.
#pragma once

#include <cstdint>

#include "backend/cpu/isa.h"
#include "backend/cpu/quant_blocks.h"

namespace loom::cpu {

struct CpuKernels {
  Isa isa;
  // Activation rows to 8-bit blocks: k a multiple of 32 (q8_1) or 256 (q8_k).
  void (*quantize_q8_1)(const float* x, ActQ8_1* dst, int64_t k);
  void (*quantize_q8_k)(const float* x, ActQ8_K* dst, int64_t k);
  // sum_i w[i] * x[i] over one row of k elements.
  float (*dot_f32)(const float* w, const float* x, int64_t k);
  float (*dot_f16)(const uint16_t* w, const float* x, int64_t k);
  float (*dot_bf16)(const uint16_t* w, const float* x, int64_t k);
  // Quantised weights: one weight row of nb blocks against nx (1..4)
  // activation rows x + r * xs (xs in blocks): y[r * ys] = w . x_r. Each weight
  // block is unpacked once for all nx rows.
  void (*mdot_q8_0)(const BlockQ8_0* w, int64_t nb, const ActQ8_1* x, int64_t xs, int nx, float* y,
                    int64_t ys);
  void (*mdot_q4_0)(const BlockQ4_0* w, int64_t nb, const ActQ8_1* x, int64_t xs, int nx, float* y,
                    int64_t ys);
  void (*mdot_q4_1)(const BlockQ4_1* w, int64_t nb, const ActQ8_1* x, int64_t xs, int nx, float* y,
                    int64_t ys);
  void (*mdot_q5_0)(const BlockQ5_0* w, int64_t nb, const ActQ8_1* x, int64_t xs, int nx, float* y,
                    int64_t ys);
  void (*mdot_q5_1)(const BlockQ5_1* w, int64_t nb, const ActQ8_1* x, int64_t xs, int nx, float* y,
                    int64_t ys);
  void (*mdot_q4_k)(const BlockQ4_K* w, int64_t nb, const ActQ8_K* x, int64_t xs, int nx, float* y,
                    int64_t ys);
  void (*mdot_q5_k)(const BlockQ5_K* w, int64_t nb, const ActQ8_K* x, int64_t xs, int nx, float* y,
                    int64_t ys);
  void (*mdot_q6_k)(const BlockQ6_K* w, int64_t nb, const ActQ8_K* x, int64_t xs, int nx, float* y,
                    int64_t ys);
  // y[i] += a * x[i];  y[i] *= a;  f16 / bf16 rows to f32.
  void (*axpy)(float a, const float* x, float* y, int64_t n);
  void (*scale)(float a, float* y, int64_t n);
  void (*f16_to_f32)(const uint16_t* x, float* y, int64_t n);
  void (*bf16_to_f32)(const uint16_t* x, float* y, int64_t n);
  // Blocked attention (attention.cpp). Scores: s[r * ldk + j] = q_r . kt[:, j]
  // for rows r < rows (q rows hd apart) and keys j < ldk (kt is [hd][ldk], ldk
  // a multiple of 16, zero past the keys). exp_sum: x[j] = e^(x[j] - m), j < n,
  // returning the sum. pv: o[r * hd + d] += sum_{j < nk} p[r * ldp + j] * v[j * hd + d].
  // dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols.
  void (*transpose)(const float* src, int64_t rows, int64_t cols, int64_t lds, float* dst,
                    int64_t ldd);
  void (*attn_scores)(const float* q, int64_t rows, int64_t hd, const float* kt, int64_t ldk,
                      float* s);
  float (*attn_exp_sum)(float* x, int64_t n, float m);
  void (*attn_pv)(const float* p, int64_t rows, int64_t ldp, int64_t nk, const float* v, int64_t hd,
                  float* o);
  // out[i] = act(g[i]) * u[i] for SiLU and GELU (tanh approximation).
  void (*silu_mul)(const float* g, const float* u, float* out, int64_t n);
  void (*gelu_mul)(const float* g, const float* u, float* out, int64_t n);
};

const CpuKernels& kernels_portable();
const CpuKernels& kernels_avx2();
const CpuKernels& kernels_avx512();
const CpuKernels& kernels_avx512vnni();
const CpuKernels& kernels_for(Isa isa);

}  // namespace loom::cpu
