// fp8_block_gemm (fp8_block_gemm.h) on sm_90a: 128x128 weight blocks with
// x's 1x128 groups here, the row_scales mode in fp8_row_gemm_sm90.cuh's two
// instantiations (fp8_gemm_sm90.cuh says what they share).
//
// CUTLASS's FP8 GEMM with blockwise scaling (the
// KernelTmaWarpSpecializedCooperativeFP8Blockwise mainloop): TMA loads, two
// consumer warpgroups on wgmma, and every 128 columns of k the tensor core's
// partial sums are scaled by x's scale and the weight's and added to f32
// registers. The epilogue adds the bias and rounds to bf16 once. x's scales
// per row and 128 columns (MN-major: scale[g * ld + row]), the weight's per
// 128x128 block (K-major). 128x128x128 tiles, clusters of 2 along n (x's tile
// multicast to both CTAs).
#include <algorithm>

#include "backend/cuda/kernels/fp8/fp8_gemm_sm90.cuh"

namespace loom::cuda {
namespace {

using namespace cute;

namespace types {
using namespace sm90::operands;

using TileShape = Shape<_128, _128, _128>;
using ClusterShape = Shape<_1, _2, _1>;
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, sm90::kGroup, sm90::kGroup,
                                                              GMMA::Major::MN, GMMA::Major::K>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

// D = acc + bias[n] (no C operand: ElementC void), alpha 1, beta 0.
using Fusion =
    cutlass::epilogue::fusion::LinCombPerColBias<ElementD, float, ElementBias, ElementD, float>;
using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignD, ElementD,
    LayoutD, kAlignD, cutlass::epilogue::TmaWarpSpecializedCooperative, Fusion>::CollectiveOp;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, cute::tuple<LayoutA, LayoutSFA>,
    kAlignAB, ElementB, cute::tuple<LayoutB, LayoutSFB>, kAlignAB, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                    cutlass::gemm::PersistentScheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
}  // namespace types

using types::Gemm;

Gemm::Arguments arguments_of(const Fp8BlockGemmArgs& a, int device, int sms) {
  constexpr int kBlock = sm90::kGroup;
  const int m = static_cast<int>(a.m), n = static_cast<int>(a.n), k = static_cast<int>(a.k);
  const int kb = k / kBlock, nb = n / kBlock;
  const int x_ld = static_cast<int>(a.x_scale_ld), w_ld = static_cast<int>(a.w_scale_ld);
  // x's scales: m rows with a padded row stride x_ld per group. (CUTLASS's
  // can_implement wants m itself a multiple of 4 for this TMA load; the TMA
  // only needs 16-byte strides, which x_ld gives, and fills rows past m with
  // zeros.)
  const types::LayoutSFA sfa =
      make_layout(make_shape(make_shape(_1{}, m), make_shape(Int<kBlock>{}, kb), 1),
                  make_stride(make_stride(_0{}, _1{}), make_stride(_0{}, x_ld), x_ld * kb));
  // The weight's scales: nb rows of kb, row stride w_ld.
  const types::LayoutSFB sfb =
      make_layout(make_shape(make_shape(Int<kBlock>{}, nb), make_shape(Int<kBlock>{}, kb), 1),
                  make_stride(make_stride(_0{}, w_ld), make_stride(_0{}, _1{}), w_ld * nb));
  Gemm::Arguments args = sm90::common_arguments<Gemm>(a, device, sms);
  args.mainloop.ptr_SFA = a.x_scale;
  args.mainloop.layout_SFA = sfa;
  args.mainloop.ptr_SFB = a.w_scale;
  args.mainloop.layout_SFB = sfb;
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.thread.bias_ptr = static_cast<const types::ElementBias*>(a.bias);
  return args;
}

// The tile a row-scaled product of more than small_tile_rows rows takes
// (every one sums k in the same order: the same bits from each). Forced
// (Fp8BlockGemmArgs::large_tile), where the accumulation allows it; promoted
// sums: 128x128; fast accumulation: the least of a waves model, tiles of
// each shape in waves of one per SM, a wave's time relative to a 128x128
// cooperative tile's 17/20 for ping-pong (up to 1,024 rows) and 32/20 for
// 128x256. Those two pair 128-row tiles in clusters along m, so odd counts
// of them keep 128x128 (clustered along n: a pair along m would leave half
// its last cluster idle). The constants and bounds are fitted to
// bench_cuda_ops --fp8-tiles on an H100 at the 8B shapes.
// The SM count is asked for only where the model runs (the promoted
// default's products go straight to their tile).
int row_tile_for(const Fp8BlockGemmArgs& a) {
  const int forced = a.large_tile;
  const bool fast_only = forced == sm90::kRowTilePingpong || forced == sm90::kRowTileWide;
  if (fast_only && a.fast_accum) return forced;
  const int64_t m_tiles = (a.m + 127) / 128;
  if (forced != 0 || !a.fast_accum || m_tiles % 2 != 0) return sm90::kRowTileCooperative;
  int device = 0, cc = 0, device_sms = 0;
  if (!sm90::device_info(device, cc, device_sms)) return sm90::kRowTileCooperative;
  const int64_t sms = std::max(device_sms, 1);
  auto waves = [&](int64_t tile_n) {
    return (m_tiles * ((a.n + tile_n - 1) / tile_n) + sms - 1) / sms;
  };
  const int64_t cooperative = waves(128) * 20, wide = waves(256) * 32;
  const int64_t pingpong = a.m <= 1024 ? waves(128) * 17 : cooperative + 1;
  if (pingpong <= cooperative && pingpong <= wide) return sm90::kRowTilePingpong;
  return wide < cooperative ? sm90::kRowTileWide : sm90::kRowTileCooperative;
}

}  // namespace

bool fp8_block_gemm_built() {
  return true;
}

bool fp8_block_gemm_supported(const Fp8BlockGemmArgs& a) {
  // Row scales: every tile of the accumulation mode takes the shape, so
  // that which one runs depends on m alone.
  if (a.row_scales)
    return a.fast_accum
               ? sm90::row_gemm_supported<64, true>(a) && sm90::row_gemm_supported<128, true>(a) &&
                     sm90::row_gemm_supported<sm90::kRowTilePingpong, true>(a) &&
                     sm90::row_gemm_supported<sm90::kRowTileWide, true>(a)
               : sm90::row_gemm_supported<64, false>(a) && sm90::row_gemm_supported<128, false>(a);
  int device = 0, sms = 0;
  if (!sm90::shape_ok(a, sm90::kGroup, sm90::kGroup, device, sms)) return false;
  constexpr int64_t kMaxInt = 0x7fffffff;
  if (a.x_scale_ld < a.m || a.x_scale_ld % 4 != 0 || a.w_scale_ld < a.k / sm90::kGroup)
    return false;
  if (a.x_scale_ld * (a.k / sm90::kGroup) > kMaxInt ||
      a.w_scale_ld * (a.n / sm90::kGroup) > kMaxInt)
    return false;
  // Everything else as CUTLASS checks it, on m rounded up to 4 (see arguments_of).
  Fp8BlockGemmArgs rounded = a;
  rounded.m = (a.m + 3) / 4 * 4;
  return Gemm::can_implement(arguments_of(rounded, device, sms)) == cutlass::Status::kSuccess;
}

const char* fp8_block_gemm(const Fp8BlockGemmArgs& a, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream) {
  if (a.row_scales) {
    if (a.m <= a.small_tile_rows)
      return a.fast_accum ? sm90::row_gemm<64, true>(a, workspace, workspace_bytes, stream)
                          : sm90::row_gemm<64, false>(a, workspace, workspace_bytes, stream);
    switch (row_tile_for(a)) {
      case sm90::kRowTilePingpong:
        return sm90::row_gemm<sm90::kRowTilePingpong, true>(a, workspace, workspace_bytes, stream);
      case sm90::kRowTileWide:
        return sm90::row_gemm<sm90::kRowTileWide, true>(a, workspace, workspace_bytes, stream);
      default:
        return a.fast_accum ? sm90::row_gemm<128, true>(a, workspace, workspace_bytes, stream)
                            : sm90::row_gemm<128, false>(a, workspace, workspace_bytes, stream);
    }
  }
  int device = 0, cc = 0, sms = 0;
  if (!sm90::device_info(device, cc, sms)) return "no current CUDA device";
  return sm90::run_gemm<Gemm>(arguments_of(a, device, sms), workspace, workspace_bytes, stream);
}

}  // namespace loom::cuda
