// Placeholder avx2 table: the portable kernels until the SIMD ones land.
#include "backend/cpu/kernels.h"

namespace loom::cpu {

const CpuKernels& kernels_avx2() {
  static const CpuKernels k = [] {
    CpuKernels t = kernels_portable();
    t.isa = Isa::Avx2;
    return t;
  }();
  return k;
}

}  // namespace loom::cpu
