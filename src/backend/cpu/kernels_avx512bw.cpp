// AVX-512 F/BW/DQ/VL kernel table without VNNI (kernels_avx512.h): int8 dot
// products through maddubs + madd.
// GCC 12 warns falsely inside its own AVX-512 headers (_mm512_undefined_* used
// as pass-through operands), so those two warnings are off for this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define LOOM_X86_VNNI 0
#include "backend/cpu/kernels_avx512.h"

namespace loom::cpu {

const CpuKernels& kernels_avx512() {
  static const CpuKernels k = make_avx512_table(Isa::Avx512);
  return k;
}

}  // namespace loom::cpu
