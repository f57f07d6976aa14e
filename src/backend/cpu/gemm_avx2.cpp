// AVX2 GEMM kernels (gemm_x86.h over 256-bit vectors): panels of 16 columns,
// maddubs + madd for the int8 dot products; Q8_0 stays signed (its q + 128
// would saturate maddubs' int16 pair sums).
#include "backend/cpu/gemm_rows_x86.h"
#include "backend/cpu/gemm_x86.h"
#include "backend/cpu/simd_vec_x86.h"

namespace loom::cpu {
namespace {

using simd::V256;
constexpr int kNr = 2 * V256::kLanes;
constexpr int kMr = 4;

bool quant_layout(DType type, QuantLayout& layout) {
  return gemm::layout_of(type, true, layout);
}

void pack_float(DType type, const uint8_t* w, int64_t row_bytes, int rows, int64_t k0, int64_t kc,
                float* panel) {
  gemm::x86_pack_float(type, w, row_bytes, rows, kNr, k0, kc, panel);
}

void gemm_float(const float* panel, int64_t kc, const float* x, int64_t ldx, int64_t m, float* c,
                int64_t ldc, int cols, bool accumulate) {
  gemm::float_rows<V256, 4>(panel, kNr, kc, x, ldx, m, c, ldc, cols, accumulate);
}

}  // namespace

const GemmKernels& gemm_kernels_avx2() {
  static const GemmKernels k{Isa::Avx2,
                             kNr,
                             quant_layout,
                             gemm::x86_quantize,
                             gemm::x86_pack_quant,
                             gemm::x86_gemm_quant<V256, kMr>,
                             pack_float,
                             gemm_float,
                             gemm::x86_rows_quant<false, true>,
                             gemm::x86_rows_float};
  return k;
}

}  // namespace loom::cpu
