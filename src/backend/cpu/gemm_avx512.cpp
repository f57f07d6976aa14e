// AVX-512 GEMM kernels (gemm_x86.h over 512-bit vectors): panels of 32
// columns, vpdpbusd for the int8 dot products.
// GCC 12 warns falsely inside its own AVX-512 headers (_mm512_undefined_* used
// as pass-through operands), so those two warnings are off for this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "backend/cpu/gemm_x86.h"

namespace loom::cpu {
namespace {

struct V512Vnni {
  using I = __m512i;
  using F = __m512;
  static constexpr int kLanes = 16;
  static I zero() { return _mm512_setzero_si512(); }
  static I set1(int32_t v) { return _mm512_set1_epi32(v); }
  static I load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static I dot(I acc, I u, I s) { return _mm512_dpbusd_epi32(acc, u, s); }
  // Signed bytes on both sides: |w| against x with w's sign.
  static I dot_signed(I acc, I w, I x) {
    const I sx = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
    return _mm512_dpbusd_epi32(acc, _mm512_abs_epi8(w), sx);
  }
  static F zerof() { return _mm512_setzero_ps(); }
  static F set1f(float v) { return _mm512_set1_ps(v); }
  static F loadf(const float* p) { return _mm512_loadu_ps(p); }
  static F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  // The first n (<= 16, may be <= 0) lanes to c, added to what is there when accumulate.
  static void store(float* c, F v, int n, bool accumulate) {
    if (n <= 0) return;
    const __mmask16 m = n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
    if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, c));
    _mm512_mask_storeu_ps(c, m, v);
  }
};

constexpr int kNr = 2 * V512Vnni::kLanes;
constexpr int kMr = 4;

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
