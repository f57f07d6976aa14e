// The AVX-512 kernel table, built twice: kernels_avx512.cpp with VNNI and
// kernels_avx512bw.cpp without; each defines LOOM_X86_VNNI and includes this
// header once. 512-bit attention tiles and gated activations; the vector
// helpers of kernels_x86.h (compiled with AVX-512 flags).
#pragma once

#include "backend/cpu/attention_x86.h"
#include "backend/cpu/kernels_x86.h"
#include "backend/cpu/simd_vec_x86.h"

namespace loom::cpu {
namespace {

using Vec = simd::V512<LOOM_X86_VNNI != 0>;

void avx512_attn_pv(const float* p, int64_t rows, int64_t ldp, int64_t nk, const float* v,
                    int64_t ldv, int64_t hd, float* o) {
  if (hd % Vec::kLanes == 0) return attn::pv<Vec>(p, rows, ldp, nk, v, ldv, hd, o);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < nk; ++j) x86_axpy(p[r * ldp + j], v + j * ldv, o + r * hd, hd);
}

}  // namespace
}  // namespace loom::cpu

namespace loom::cpu {
namespace {

// The table of this file's instruction set (tagged isa).
CpuKernels make_avx512_table(Isa isa) {
  return CpuKernels{isa,
                    x86_axpy,
                    x86_scale,
                    x86_f16_row,
                    x86_bf16_row,
                    simd::transpose_f32,
                    attn::scores<Vec>,
                    attn::exp_sum<Vec>,
                    attn::row_max<Vec>,
                    avx512_attn_pv,
                    attn::gated<Vec, false>,
                    attn::gated<Vec, true>};
}

}  // namespace
}  // namespace loom::cpu
