// Instruction-set selection for the CPU kernels. The best set the processor
// supports is used unless lowered by the environment (LOOM_CPU_ISA=portable|
// avx2|avx512|avx512vnni, read once) or by set_cpu_isa() (tests use it to run each path).
// A request above what the CPU supports is clamped to the best supported set.
#pragma once

#include <string_view>

namespace loom::cpu {

// Avx512: F, BW, DQ, VL (+ FMA, F16C); Avx512Vnni adds VNNI (vpdpbusd).
enum class Isa { Portable = 0, Avx2 = 1, Avx512 = 2, Avx512Vnni = 3 };

std::string_view isa_name(Isa isa);
// Best set this processor supports (AVX2 needs FMA and F16C; AVX-512 needs
// F, BW, DQ, VL and AVX2's; AVX-512 VNNI adds VNNI).
Isa detected_isa();
// The set kernels use now. Thread-safe to read; set before running ops.
Isa active_isa();
// Selects `isa` (clamped to detected_isa()) and returns what was selected.
Isa set_cpu_isa(Isa isa);

}  // namespace loom::cpu
