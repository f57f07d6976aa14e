// AVX-512 GEMM kernels (gemm_x86.h over 512-bit vectors): panels of 32
// columns, vpdpbusd for the int8 dot products.
// GCC 12 warns falsely inside its own AVX-512 headers (_mm512_undefined_* used
// as pass-through operands), so those two warnings are off for this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "backend/cpu/gemm_x86.h"
#include "backend/cpu/simd_vec_x86.h"

namespace loom::cpu {
namespace {

using simd::V512Vnni;
constexpr int kNr = 2 * V512Vnni::kLanes;
constexpr int kMr = 6;

bool quant_layout(DType type, QuantLayout& layout) {
  return gemm::layout_of(type, false, layout);
}

void pack_float(DType type, const uint8_t* w, int64_t row_bytes, int rows, int64_t k0, int64_t kc,
                float* panel) {
  gemm::x86_pack_float(type, w, row_bytes, rows, kNr, k0, kc, panel);
}

void gemm_float(const float* panel, int64_t kc, const float* x, int64_t ldx, int64_t m, float* c,
                int64_t ldc, int cols, bool accumulate) {
  gemm::float_rows<V512Vnni, 6>(panel, kNr, kc, x, ldx, m, c, ldc, cols, accumulate);
}

}  // namespace

const GemmKernels& gemm_kernels_avx512() {
  static const GemmKernels k{Isa::Avx512,          kNr,
                             quant_layout,         gemm::x86_quantize,
                             gemm::x86_pack_quant, gemm::x86_gemm_quant<V512Vnni, kMr>,
                             pack_float,           gemm_float};
  return k;
}

}  // namespace loom::cpu
