// The Hopper FP8 GEMMs for 128x128 block-scaled weights (fp8_gemm_sm90.cuh:
// CUTLASS's sm_90a warp-specialized GEMM with blockwise scaling), callable from
// host C++: out[m, n] = sum_g (sum_{k in g} xq[m, k] w[n, k]) x_scale[m, g]
// w_scale[n / 128, g] (+ bias[n]), bf16 out rounded once, for the 128-column
// groups g of k; or, with row_scales, one scale per row on both sides (see
// Fp8BlockGemmArgs; a GEMM that scales in its epilogue); and fp8_row_split, the
// same row-scaled products for few rows. A build without CUTLASS or without
// sm_90a links fp8_block_gemm_none.cpp instead, which supports nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace loom::cuda {

// row_scales: per-row scales on both sides (per-token or static activations,
// per-channel or per-tensor weights repeated per row), applied once in the
// epilogue: out[m, n] = bf16((x_scale[m] w_scale[n]) sum_k xq[m, k] w[n, k]
// (+ bias[n])), the tensor core's partial sums added to f32 every 128 columns
// of k (fp8_row_gemm_sm90.cuh); products of up to small_tile_rows rows take
// 64x64 tiles, larger ones 128x128 (the same bits either way); x_scale_ld and
// w_scale_ld unused.
struct Fp8BlockGemmArgs {
  bool row_scales = false;
  const uint8_t* xq = nullptr;     // fp8 E4M3 [m, k], row-major, 16-byte aligned
  const float* x_scale = nullptr;  // x_scale[g * x_scale_ld + row] (quantize_fp8_rows' Group
                                   // layout), 16-byte aligned; row_scales: x_scale[row]
  int64_t x_scale_ld = 0;          // >= m, a multiple of 4 (16-byte rows for the TMA)
  int64_t m = 0;
  const uint8_t* w = nullptr;      // fp8 E4M3 [n, k], row-major
  const float* w_scale = nullptr;  // w_scale[(n / 128) * w_scale_ld + k / 128]; row_scales: [n]
  int64_t w_scale_ld = 0;          // >= k / 128
  int64_t n = 0, k = 0;
  const void* bias = nullptr;    // bf16 [n] or null
  void* out = nullptr;           // bf16 [m, n], row-major
  int64_t small_tile_rows = 64;  // row_scales: the most rows the 64-row tiles take
  // row_scales: all of k summed in the tensor core's accumulator, no f32
  // promotion every 128 columns (faster, fewer bits; fp8_row_gemm_sm90.cuh).
  bool fast_accum = false;
  // row_scales, past small_tile_rows: the tile (fp8_row_gemm_sm90.cuh): 0
  // chooses by the shape (128x128 with promoted sums); 1: 128x128 ping-pong,
  // 2: 128x256 (both with fast_accum only); 3: 128x128 cooperative, also
  // what a tile the accumulation does not allow gets.
  int large_tile = 0;
  int64_t row_split_splits = 0;  // fp8_row_split: blocks per tile along k (0: its choice)
};

// Whether this build has the kernel (CUTLASS headers and sm_90a at build time).
bool fp8_block_gemm_built();

// Whether fp8_block_gemm computes this product on the current device: built
// in, an sm_90 GPU, w, out, bias (and row_scales: w_scale) 16-byte aligned;
// block scales: n and k multiples of 128, x_scale_ld as above; row_scales: n
// a multiple of 8, k of 16 (xq and x_scale are not looked at: the caller may
// ask before it quantises x). Otherwise callers use another kernel.
bool fp8_block_gemm_supported(const Fp8BlockGemmArgs& args);

// Queues the product on `stream`, with `workspace` as CUTLASS's scratch (the
// persistent scheduler needs little or none). One CUDA block computes a 128x128 tile of
// out over all of k (a persistent kernel, no split-K or stream-K), so a row's
// result does not depend on the other rows. Returns null, or what went wrong
// (workspace too small, CUTLASS refused the arguments, the launch failed; a
// static string).
const char* fp8_block_gemm(const Fp8BlockGemmArgs& args, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream);

// Products of few rows of x (decode steps) with per-row scales (row_scales
// set; x_scale_ld and small_tile_rows unused), meant for a few rows, the same
// bits as fp8_block_gemm's row-scaled GEMM: k is split over CUDA blocks in
// 128-column groups, whose partial sums are still added in k's order
// (fp8_row_split_sm90.cu); row_split_splits > 0 forces the split per tile
// (tests). Supported: built in, an sm_90 GPU, m up to kFp8RowSplitMaxRows
// (8- or 16-row tiles of x: the weights are streamed once), k a multiple of 128,
// int-sized extents, w, out and bias 16-byte aligned.
constexpr int64_t kFp8RowSplitMaxRows = 16;
// How fp8_row_split computes this product on the current device: its
// scratch (partial sums, f32, none where k is not split; per-tile counters,
// zero before the first product, left zero by each) and its shape. False
// where the kernel does not take the product (what it takes: above).
struct Fp8RowSplitPlan {
  size_t partial_bytes = 0, counter_bytes = 0;
  int splits = 0;     // blocks per 64-row tile of w along k
  int tile_rows = 0;  // rows of x per block: 8, or 16 past 8 rows
};
bool fp8_row_split_plan(const Fp8BlockGemmArgs& args, Fp8RowSplitPlan& plan);
// Queues the product as `plan` (fp8_row_split_plan's for these args) says,
// launched with PDL; null, or what went wrong.
const char* fp8_row_split(const Fp8BlockGemmArgs& args, const Fp8RowSplitPlan& plan,
                          float* partials, unsigned* counters, cudaStream_t stream);

}  // namespace loom::cuda
