// sm90::row_gemm<64, true> (fp8_gemm_sm90.cuh): fp8_row_gemm_sm90.cuh's GEMM with
// 64-row tiles and fast accumulation.
#define LOOM_FP8_ROW_GEMM_TILE 64
#define LOOM_FP8_ROW_GEMM_FAST_ACCUM 1
#include "backend/cuda/kernels/fp8/fp8_row_gemm_sm90.cuh"
