// sm90::row_gemm<kRowTileWide, true> (fp8_gemm_sm90.cuh): fp8_row_gemm_sm90.cuh's
// GEMM with 128x256 tiles, fast accumulation.
#include "backend/cuda/kernels/fp8/fp8_gemm_sm90.cuh"
#define LOOM_FP8_ROW_GEMM_TILE sm90::kRowTileWide
#define LOOM_FP8_ROW_GEMM_FAST_ACCUM 1
#include "backend/cuda/kernels/fp8/fp8_row_gemm_sm90.cuh"
