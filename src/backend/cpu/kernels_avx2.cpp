// AVX2 + FMA + F16C kernel table (256-bit).
#define LOOM_X86_VNNI 0
#include "backend/cpu/attention_x86.h"
#include "backend/cpu/kernels_x86.h"
#include "backend/cpu/simd_vec_x86.h"

namespace loom::cpu {
namespace {

using Vec = simd::V256;

void avx2_attn_pv(const float* p, int64_t rows, int64_t ldp, int64_t nk, const float* v,
                  int64_t ldv, int64_t hd, float* o) {
  if (hd % Vec::kLanes == 0) return attn::pv<Vec>(p, rows, ldp, nk, v, ldv, hd, o);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < nk; ++j) x86_axpy(p[r * ldp + j], v + j * ldv, o + r * hd, hd);
}

}  // namespace
}  // namespace loom::cpu

namespace loom::cpu {

const CpuKernels& kernels_avx2() {
  static const CpuKernels k{Isa::Avx2,
                            x86_axpy,
                            x86_scale,
                            x86_f16_row,
                            x86_bf16_row,
                            simd::transpose_f32,
                            attn::scores<Vec>,
                            attn::exp_sum<Vec>,
                            attn::row_max<Vec>,
                            avx2_attn_pv,
                            attn::gated<Vec, false>,
                            attn::gated<Vec, true>};
  return k;
}

}  // namespace loom::cpu
