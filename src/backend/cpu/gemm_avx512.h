// AVX-512 GEMM kernels (gemm_x86.h over 512-bit vectors), built twice:
// gemm_avx512.cpp with VNNI (vpdpbusd) and gemm_avx512bw.cpp without (maddubs
// + madd; Q8_0 signed). Panels of 32 columns; each file defines LOOM_X86_VNNI
// and includes this header once.
#pragma once

#include "backend/cpu/gemm_rows_x86.h"
#include "backend/cpu/gemm_x86.h"
#include "backend/cpu/simd_vec_x86.h"

namespace loom::cpu {
namespace {

using Vec = simd::V512<LOOM_X86_VNNI != 0>;
constexpr int kNr = 2 * Vec::kLanes;
constexpr int kMr = 6;

bool quant_layout(DType type, QuantLayout& layout) {
  return gemm::layout_of(type, LOOM_X86_VNNI == 0, layout);
}

void pack_float(DType type, const uint8_t* w, int64_t row_bytes, int rows, int64_t k0, int64_t kc,
                float* panel) {
  gemm::x86_pack_float(type, w, row_bytes, rows, kNr, k0, kc, panel);
}

void gemm_float(const float* panel, int64_t kc, const float* x, int64_t ldx, int64_t m, float* c,
                int64_t ldc, int cols, bool accumulate) {
  gemm::float_rows<Vec, 6>(panel, kNr, kc, x, ldx, m, c, ldc, cols, accumulate);
}

// The GEMM table of this file's instruction set (tagged isa).
GemmKernels make_gemm_avx512(Isa isa) {
  return GemmKernels{isa,
                     kNr,
                     quant_layout,
                     gemm::x86_quantize,
                     gemm::x86_pack_quant,
                     gemm::x86_gemm_quant<Vec, kMr>,
                     pack_float,
                     gemm_float,
                     gemm::x86_rows_quant<LOOM_X86_VNNI != 0, LOOM_X86_VNNI == 0>,
                     gemm::x86_rows_float};
}

}  // namespace
}  // namespace loom::cpu
