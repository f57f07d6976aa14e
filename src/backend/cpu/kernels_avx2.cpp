// AVX2 + FMA + F16C kernel table (256-bit; int8 dot products via maddubs).
#define LOOM_X86_VNNI 0
#include "backend/cpu/kernels_x86.h"

namespace loom::cpu {

const CpuKernels& kernels_avx2() {
  static const CpuKernels k{Isa::Avx2,
                            x86_quantize_q8_1,
                            x86_quantize_q8_k,
                            x86_dot_f32,
                            x86_dot_half<load_f16x8, f16>,
                            x86_dot_half<load_bf16x8, bf16>,
                            x86_mdot_q8_0,
                            x86_mdot_q4_0,
                            x86_mdot_q4_1,
                            x86_mdot_q5_0,
                            x86_mdot_q5_1,
                            x86_mdot_q4_k,
                            x86_mdot_q5_k,
                            x86_mdot_q6_k,
                            x86_axpy,
                            x86_scale,
                            x86_f16_row,
                            x86_bf16_row};
  return k;
}

}  // namespace loom::cpu
