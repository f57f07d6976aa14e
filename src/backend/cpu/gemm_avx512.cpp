// AVX-512 + VNNI GEMM table (gemm_avx512.h).
// GCC 12 warns falsely inside its own AVX-512 headers (_mm512_undefined_* used
// as pass-through operands), so those two warnings are off for this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define LOOM_X86_VNNI 1
#include "backend/cpu/gemm_avx512.h"

namespace loom::cpu {

const GemmKernels& gemm_kernels_avx512vnni() {
  static const GemmKernels k = make_gemm_avx512(Isa::Avx512Vnni);
  return k;
}

}  // namespace loom::cpu
