// What the sm_90a FP8 GEMMs behind fp8_block_gemm (fp8_block_gemm.h) share:
// CUTLASS's headers, the checks every problem passes before CUTLASS's own, a
// launch helper, and the row-scaled GEMM's entry points. Two kernels, in
// their own translation units (compile time on small machines):
//   fp8_block_gemm_sm90.cu: 128x128 weight blocks with x's 1x128 groups
//     (CUTLASS's blockwise-scaled mainloop: every 128 columns of k the tensor
//     core's partial sums are scaled by both and added to f32 registers);
//   fp8_row_gemm_sm90.cuh, instantiated six times (fp8_row_gemm_small_sm90.cu,
//     fp8_row_gemm_large_sm90.cu, and with fast accumulation
//     fp8_row_gemm_{small,large,pingpong,wide}_fast_sm90.cu): one scale per
//     row of x and per weight row, applied once in the epilogue.
// In CUTLASS's terms A = x [m, k] (row-major), B = w^T (column-major [k, n],
// i.e. w [n, k] row-major), D = out [m, n] row-major. Each tile sums all of
// k in one CUDA block (persistent scheduler, no split-K or stream-K), so a
// row's result does not depend on the other rows.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include "backend/cuda/kernels/fp8/fp8_sm90_checks.h"

namespace loom::cuda::sm90 {

constexpr int kGroup = 128;  // columns of k per scale (and weight block rows)

// The row-scaled GEMM at one tile height (64: 64x64 tiles, for products of
// up to Fp8BlockGemmArgs::small_tile_rows rows; 128: 128x128 tiles), defined
// in fp8_row_gemm_{small,large}[_fast]_sm90.cu. Both heights sum k in the
// same order (128 columns per wgmma group, promoted to f32 after each; with
// kFastAccum, all of k in the tensor core's own accumulator) and scale the
// same way, so a row comes out the same bits from either.
template <int TileM, bool kFastAccum>
bool row_gemm_supported(const Fp8BlockGemmArgs& args);
template <int TileM, bool kFastAccum>
const char* row_gemm(const Fp8BlockGemmArgs& args, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream);
#define LOOM_FP8_ROW_GEMM_DECLARE(tile, fast)                                     \
  template <>                                                                     \
  bool row_gemm_supported<tile, fast>(const Fp8BlockGemmArgs& args);              \
  template <>                                                                     \
  const char* row_gemm<tile, fast>(const Fp8BlockGemmArgs& args, void* workspace, \
                                   size_t workspace_bytes, cudaStream_t stream);
LOOM_FP8_ROW_GEMM_DECLARE(64, false)
LOOM_FP8_ROW_GEMM_DECLARE(128, false)
LOOM_FP8_ROW_GEMM_DECLARE(64, true)
LOOM_FP8_ROW_GEMM_DECLARE(128, true)
// The other tiles past small_tile_rows (fp8_row_gemm_sm90.cuh), the
// values of Fp8BlockGemmArgs::large_tile.
constexpr int kRowTilePingpong = 1;     // 128x128, ping-pong; fast accumulation
constexpr int kRowTileWide = 2;         // 128x256, cooperative; fast accumulation
constexpr int kRowTileCooperative = 3;  // 128x128, cooperative (row_gemm<128>)
LOOM_FP8_ROW_GEMM_DECLARE(kRowTilePingpong, true)
LOOM_FP8_ROW_GEMM_DECLARE(kRowTileWide, true)
#undef LOOM_FP8_ROW_GEMM_DECLARE

// The operands every one of these GEMMs takes.
namespace operands {
using ElementA = cutlass::float_e4m3_t;
using LayoutA = cutlass::layout::RowMajor;
using ElementB = cutlass::float_e4m3_t;
using LayoutB = cutlass::layout::ColumnMajor;
using ElementD = cutlass::bfloat16_t;
using LayoutD = cutlass::layout::RowMajor;
using ElementBias = cutlass::bfloat16_t;
constexpr int kAlignAB = 16;  // elements: 16 bytes
constexpr int kAlignD = 8;
}  // namespace operands

// The arguments every one of these GEMMs shares: the problem, xq, w and out
// packed (no C operand), the device; the caller adds its scales and epilogue.
template <class Gemm>
typename Gemm::Arguments common_arguments(const Fp8BlockGemmArgs& a, int device, int sms) {
  using cute::_1;
  const int m = static_cast<int>(a.m), n = static_cast<int>(a.n), k = static_cast<int>(a.k);
  typename Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {m, n, k, 1};
  args.mainloop.ptr_A = reinterpret_cast<const operands::ElementA*>(a.xq);
  args.mainloop.dA = cute::make_stride(int64_t{k}, _1{}, int64_t{m} * k);
  args.mainloop.ptr_B = reinterpret_cast<const operands::ElementB*>(a.w);
  args.mainloop.dB = cute::make_stride(int64_t{k}, _1{}, int64_t{n} * k);
  args.epilogue.ptr_C = nullptr;
  args.epilogue.ptr_D = static_cast<operands::ElementD*>(a.out);
  args.epilogue.dD = cute::make_stride(int64_t{n}, _1{}, int64_t{m} * n);
  args.epilogue.dC = args.epilogue.dD;
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sms;
  return args;
}

// Queues CUTLASS's Gemm with these arguments: null, or what went wrong (a
// static string).
template <class Gemm>
const char* run_gemm(const typename Gemm::Arguments& args, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream) {
  if (Gemm::get_workspace_size(args) > workspace_bytes) return "workspace too small";
  Gemm gemm;
  cutlass::Status st = gemm.initialize(args, workspace, stream);
  if (st == cutlass::Status::kSuccess) st = gemm.run(stream);  // checks the launch
  return st == cutlass::Status::kSuccess ? nullptr : cutlass::cutlassGetStatusString(st);
}

}  // namespace loom::cuda::sm90
