// fp8_block_gemm (fp8_block_gemm.h) in a build without the CUTLASS kernel (no
// CUTLASS headers, or no sm_90a among the CUDA architectures): it supports
// nothing, so Fp8Gemm uses its other kernels.
#include "backend/cuda/kernels/fp8/fp8_block_gemm.h"

namespace loom::cuda {

bool fp8_block_gemm_built() {
  return false;
}

bool fp8_block_gemm_supported(const Fp8BlockGemmArgs&) {
  return false;
}

const char* fp8_block_gemm(const Fp8BlockGemmArgs&, void*, size_t, cudaStream_t) {
  return "this build has no CUTLASS FP8 GEMM (CUTLASS headers and sm_90a needed)";
}

bool fp8_row_split_plan(const Fp8BlockGemmArgs&, Fp8RowSplitPlan&) {
  return false;
}

const char* fp8_row_split(const Fp8BlockGemmArgs&, const Fp8RowSplitPlan&, float*, unsigned*,
                          cudaStream_t) {
  return "this build has no sm_90a FP8 kernels (CUTLASS headers and sm_90a needed)";
}

}  // namespace loom::cuda
