// Instruction-set selection: detection, clamping of requests above what the
// CPU has, and that each selection really switches the kernel table.
#include <gtest/gtest.h>

#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"

namespace loom::cpu {
namespace {

TEST(Isa, SelectionClampsAndSwitchesKernels) {
  const Isa saved = active_isa();
  std::printf("detected ISA: %s\n", std::string(isa_name(detected_isa())).c_str());
  for (Isa want : {Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni}) {
    const Isa got = set_cpu_isa(want);
    EXPECT_LE(static_cast<int>(got), static_cast<int>(detected_isa()));
    if (static_cast<int>(want) <= static_cast<int>(detected_isa())) {
      EXPECT_EQ(got, want);
    }
    EXPECT_EQ(active_isa(), got);
    EXPECT_EQ(kernels_for(active_isa()).isa, got);
  }
  if (detected_isa() != Isa::Portable) {
    EXPECT_NE(kernels_for(Isa::Portable).attn_scores, kernels_for(detected_isa()).attn_scores);
  }
  set_cpu_isa(saved);
}

}  // namespace
}  // namespace loom::cpu
