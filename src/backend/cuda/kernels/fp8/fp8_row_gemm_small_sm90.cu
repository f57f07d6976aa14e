// sm90::row_gemm<64, false> (fp8_gemm_sm90.cuh): fp8_row_gemm_sm90.cuh's GEMM with
// 64-row tiles.
#define LOOM_FP8_ROW_GEMM_TILE 64
#include "backend/cuda/kernels/fp8/fp8_row_gemm_sm90.cuh"
