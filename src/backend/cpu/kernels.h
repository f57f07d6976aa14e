// The per-ISA inner loops of the CPU backend other than the matmul (gemm.h):
// attention's tiles, gated activations and the f32 vector helpers. One table
// per instruction set
// (kernels_portable.cpp, kernels_avx2.cpp, kernels_avx512bw.cpp, kernels_avx512.cpp); callers pick
// one with kernels_for(active_isa()). All functions are pure and thread-safe.
#pragma once

#include <cstdint>

#include "backend/cpu/isa.h"

namespace loom::cpu {

struct CpuKernels {
  Isa isa;
  // y[i] += a * x[i];  y[i] *= a;  f16 / bf16 rows to f32.
  void (*axpy)(float a, const float* x, float* y, int64_t n);
  void (*scale)(float a, float* y, int64_t n);
  void (*f16_to_f32)(const uint16_t* x, float* y, int64_t n);
  void (*bf16_to_f32)(const uint16_t* x, float* y, int64_t n);
  // Blocked attention (attention.cpp). Scores: s[r * ldk + j] = q_r . kt[:, j]
  // for rows r < rows (q rows hd apart) and keys j < ncols (kt is [hd][ldk];
  // ldk and ncols multiples of 16, ncols <= ldk, kt zero past the keys; a
  // score's value does not depend on ncols). exp_sum: x[j] = e^(x[j] - m), j < n,
  // returning the sum. pv: o[r * hd + d] += sum_{j < nk} p[r * ldp + j] * v[j * ldv + d]
  // (ldv >= hd: V rows read where they lie, e.g. in an f32 cache block).
  // dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols.
  void (*transpose)(const float* src, int64_t rows, int64_t cols, int64_t lds, float* dst,
                    int64_t ldd);
  void (*attn_scores)(const float* q, int64_t rows, int64_t hd, const float* kt, int64_t ldk,
                      int64_t ncols, float* s);
  float (*attn_exp_sum)(float* x, int64_t n, float m);
  // The largest of x[0..n), n >= 1 (a score row's max; exact in any order).
  float (*attn_max)(const float* x, int64_t n);
  void (*attn_pv)(const float* p, int64_t rows, int64_t ldp, int64_t nk, const float* v,
                  int64_t ldv, int64_t hd, float* o);
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
