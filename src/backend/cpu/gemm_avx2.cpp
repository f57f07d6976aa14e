// AVX2 GEMM kernels (gemm_x86.h over 256-bit vectors): panels of 16 columns,
// maddubs + madd for the int8 dot products; Q8_0 stays signed (its q + 128
// would saturate maddubs' int16 pair sums).
#include "backend/cpu/gemm_x86.h"

namespace loom::cpu {
namespace {

struct V256 {
  using I = __m256i;
  using F = __m256;
  static constexpr int kLanes = 8;
  static I zero() { return _mm256_setzero_si256(); }
  static I set1(int32_t v) { return _mm256_set1_epi32(v); }
  static I load(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  // u <= 63 keeps maddubs' pair sums (2 * 63 * 127) inside int16.
  static I dot(I acc, I u, I s) {
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
  static I dot_signed(I acc, I w, I x) {
    const I p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  }
  static F zerof() { return _mm256_setzero_ps(); }
  static F set1f(float v) { return _mm256_set1_ps(v); }
  static F loadf(const float* p) { return _mm256_loadu_ps(p); }
  static F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static void store(float* c, F v, int n, bool accumulate) {
    if (n <= 0) return;
    if (n >= 8) {
      if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(c));
      _mm256_storeu_ps(c, v);
      return;
    }
    const __m256i m =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    if (accumulate) v = _mm256_add_ps(v, _mm256_maskload_ps(c, m));
    _mm256_maskstore_ps(c, m, v);
  }
};

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
                             gemm_float};
  return k;
}

}  // namespace loom::cpu
