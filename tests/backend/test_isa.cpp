// Instruction-set selection: detection, clamping of requests above what the
// CPU has, and that each selection really switches the kernel table.
#include <gtest/gtest.h>

#include <vector>

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

// Each table's transpose (whole 8 x 8 blocks and ragged edges) against
// the definition, with padded strides; nothing outside the block is written.
TEST(Isa, TransposeEveryTableEveryShape) {
  for (Isa isa : {Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni}) {
    if (static_cast<int>(isa) > static_cast<int>(detected_isa())) continue;
    const CpuKernels& k = kernels_for(isa);
    for (int64_t rows : {1, 7, 8, 15, 16, 17, 33, 64})
      for (int64_t cols : {1, 9, 16, 24, 64, 80, 128}) {
        const int64_t lds = cols + 3, ldd = rows + 5;
        std::vector<float> src(static_cast<size_t>(rows * lds));
        for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.5f - 7.0f;
        std::vector<float> dst(static_cast<size_t>(cols * ldd), -1.0f);
        k.transpose(src.data(), rows, cols, lds, dst.data(), ldd);
        for (int64_t c = 0; c < cols; ++c)
          for (int64_t r = 0; r < ldd; ++r) {
            const float want = r < rows ? src[static_cast<size_t>(r * lds + c)] : -1.0f;
            ASSERT_EQ(dst[static_cast<size_t>(c * ldd + r)], want)
                << isa_name(isa) << " " << rows << "x" << cols << " at " << r << "," << c;
          }
      }
  }
}

}  // namespace
}  // namespace loom::cpu
