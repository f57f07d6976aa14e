// sm90::row_gemm<128, false> (fp8_gemm_sm90.cuh): fp8_row_gemm_sm90.cuh's GEMM with
// 128-row tiles.
#define LOOM_FP8_ROW_GEMM_TILE 128
#include "backend/cuda/kernels/fp8/fp8_row_gemm_sm90.cuh"
