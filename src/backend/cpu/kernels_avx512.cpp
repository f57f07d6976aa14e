// Placeholder avx512 table: the portable kernels until the SIMD ones land.
#include "backend/cpu/kernels.h"

namespace loom::cpu {

const CpuKernels& kernels_avx512() {
  static const CpuKernels k = [] {
    CpuKernels t = kernels_portable();
    t.isa = Isa::Avx512;
    return t;
  }();
  return k;
}

}  // namespace loom::cpu
