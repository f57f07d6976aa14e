// fp8_block_gemm's row_scales mode (fp8_block_gemm.h) on sm_90a: CUTLASS's
// FP8 GEMM (TMA loads, wgmma; every 4 wgmmas, i.e. 128 columns of k, the
// tensor core's partial sums are added to f32 registers, since its own FP8
// accumulation keeps too few bits) with an epilogue that scales once:
//   out[m, n] = bf16((x_scale[m] * w_scale[n]) * acc[m, n] + bias[n])
// (one fused multiply-add; x_scale per token, or the static scale repeated per
// row; w_scale per channel, or the per-tensor scale repeated per row).
//
// With LOOM_FP8_ROW_GEMM_FAST_ACCUM 1 the k loop keeps all of k in the tensor
// core's accumulator instead (CUTLASS's FP8FastAccum schedules: no promotion,
// so no wait on the wgmmas every 128 columns; fewer bits kept in the sums,
// the choice of vLLM's CUTLASS FP8 kernels; Fp8BlockGemmArgs::fast_accum).
//
// A translation unit defines LOOM_FP8_ROW_GEMM_TILE (and
// LOOM_FP8_ROW_GEMM_FAST_ACCUM, 0 when absent) and includes this file for its
// one instantiation, sm90::row_gemm<Tile, FastAccum>:
//   64:  64x64x128 tiles, ping-pong warpgroups (each its own tile), no
//        cluster: for decode-sized products, where 64 columns of w per tile
//        spread the weights over more SMs;
//   128: 128x128x128 tiles, two cooperating warpgroups, clusters of 2 along n
//        (x's tile multicast to both CTAs): prefill and large batches.
//   kRowTilePingpong: 128x128x128, ping-pong warpgroups, clusters of 2
//        along m; fast accumulation only (a warpgroup's 128x128 f32
//        accumulator leaves no registers for a promoted copy);
//   kRowTileWide: 128x256x128, cooperating warpgroups, clusters of 2 along
//        m; fast accumulation only (the same reason).
// (fp8_block_gemm_sm90.cu picks one per product; sm90::kRowTile* in
// fp8_gemm_sm90.cuh.)
// The k loop and the epilogue's arithmetic are the same in all, so a row's
// result does not depend on which tile computed it (test_cuda_fp8 checks
// this bit for bit across m).
#pragma once

#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>

#include "backend/cuda/kernels/fp8/fp8_gemm_sm90.cuh"

#ifndef LOOM_FP8_ROW_GEMM_TILE
#error "define LOOM_FP8_ROW_GEMM_TILE (64, 128 or an sm90::kRowTile* variant)"
#endif
#ifndef LOOM_FP8_ROW_GEMM_FAST_ACCUM
#define LOOM_FP8_ROW_GEMM_FAST_ACCUM 0
#endif

namespace loom::cuda {
namespace {

using namespace cute;

namespace row_types {
constexpr int kTile = LOOM_FP8_ROW_GEMM_TILE;
constexpr bool kFast = LOOM_FP8_ROW_GEMM_FAST_ACCUM != 0;
constexpr bool kSmall = kTile == 64;
constexpr bool kPingpong = kSmall || kTile == sm90::kRowTilePingpong;
static_assert(kSmall || kTile == 128 ||
              ((kTile == sm90::kRowTilePingpong || kTile == sm90::kRowTileWide) && kFast));

using namespace sm90::operands;

using TileShape =
    cute::conditional_t<kSmall, Shape<_64, _64, _128>,
                        cute::conditional_t<kTile == sm90::kRowTileWide, Shape<_128, _256, _128>,
                                            Shape<_128, _128, _128>>>;
using ClusterShape =
    cute::conditional_t<kSmall, Shape<_1, _1, _1>,
                        cute::conditional_t<kTile == 128, Shape<_1, _2, _1>, Shape<_2, _1, _1>>>;
using KernelSchedule = cute::conditional_t<
    kPingpong,
    cute::conditional_t<kFast, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum,
                        cutlass::gemm::KernelTmaWarpSpecializedPingpong>,
    cute::conditional_t<kFast, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum,
                        cutlass::gemm::KernelTmaWarpSpecializedCooperative>>;
using EpilogueSchedule = cute::conditional_t<kPingpong, cutlass::epilogue::TmaWarpSpecialized,
                                             cutlass::epilogue::TmaWarpSpecializedCooperative>;

// a * b + c rounded once (__fmaf_rn, whatever the compiler's contraction
// settings), as the scaling pass after cuBLASLt's FP8 GEMM computes it
// (kernels/fp8/quantize.cu), so that the two paths agree bit for bit. The
// epilogue applies it to fragments (Array<float, N>); the scalar form is
// named only for its (absent) Arguments.
template <class T>
struct FusedMultiplyAdd {
  CUTLASS_HOST_DEVICE T operator()(T const& a, T const& b, T const& c) const;
};
template <int N>
struct FusedMultiplyAdd<cutlass::Array<float, N>> {
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& a,
                                                     cutlass::Array<float, N> const& b,
                                                     cutlass::Array<float, N> const& c) const {
    cutlass::Array<float, N> r;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) r[i] = __fmaf_rn(a[i], b[i], c[i]);
    return r;
  }
};

namespace fusion = cutlass::epilogue::fusion;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
using XScale = fusion::Sm90ColBroadcast<0, TileShape, float, float, Stride<_1, _0, int64_t>>;
using WScale = fusion::Sm90RowBroadcast<0, TileShape, float, float, Stride<_0, _1, int64_t>>;
using Bias = fusion::Sm90RowBroadcast<0, TileShape, ElementBias, float, Stride<_0, _1, int64_t>>;
using Scale =
    fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>, XScale, WScale>;
using Output = fusion::Sm90EVT<fusion::Sm90Compute<FusedMultiplyAdd, ElementD, float, kRound>,
                               Scale, fusion::Sm90AccFetch, Bias>;

using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignD, ElementD,
    LayoutD, kAlignD, EpilogueSchedule, Output>::CollectiveOp;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlignAB, ElementB,
    LayoutB, kAlignAB, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename Epilogue::SharedStorage))>,
    KernelSchedule>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                    cutlass::gemm::PersistentScheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
}  // namespace row_types

using RowGemm = row_types::Gemm;

RowGemm::Arguments row_arguments(const Fp8BlockGemmArgs& a, int device, int sms) {
  const int64_t m = a.m, n = a.n;
  RowGemm::Arguments args = sm90::common_arguments<RowGemm>(a, device, sms);
  if constexpr (!row_types::kFast)
    args.mainloop.mma_promotion_interval = 4;  // wgmmas of k 32: every 128 columns
  // The epilogue tree's arguments, children first: (x_scale * w_scale), acc, bias.
  args.epilogue.thread = {{{a.x_scale, 0.0f, {_1{}, _0{}, m}},  // x_scale[m]
                           {a.w_scale, 0.0f, {_0{}, _1{}, n}},  // w_scale[n]
                           {}},
                          {},
                          {static_cast<const row_types::ElementBias*>(a.bias),
                           row_types::ElementBias(0.0f),
                           {_0{}, _1{}, n}},  // null: no bias
                          {}};
  return args;
}

}  // namespace

// n a multiple of 8 and k of 16 (16-byte rows for the TMA), w_scale 16-byte
// aligned (x_scale is not looked at: the caller may ask before it quantises).
template <>
bool sm90::row_gemm_supported<LOOM_FP8_ROW_GEMM_TILE, row_types::kFast>(const Fp8BlockGemmArgs& a) {
  int device = 0, sms = 0;
  if (!sm90::shape_ok(a, 8, 16, device, sms) || !sm90::aligned16(a.w_scale)) return false;
  return RowGemm::can_implement(row_arguments(a, device, sms)) == cutlass::Status::kSuccess;
}

template <>
const char* sm90::row_gemm<LOOM_FP8_ROW_GEMM_TILE, row_types::kFast>(const Fp8BlockGemmArgs& a,
                                                                     void* workspace,
                                                                     size_t workspace_bytes,
                                                                     cudaStream_t stream) {
  int device = 0, cc = 0, sms = 0;
  if (!sm90::device_info(device, cc, sms)) return "no current CUDA device";
  return sm90::run_gemm<RowGemm>(row_arguments(a, device, sms), workspace, workspace_bytes, stream);
}

}  // namespace loom::cuda
