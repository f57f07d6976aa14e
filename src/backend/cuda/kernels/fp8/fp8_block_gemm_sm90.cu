// fp8_block_gemm (fp8_block_gemm.h) through CUTLASS's sm_90a FP8 GEMM with
// blockwise scaling (the KernelTmaWarpSpecializedCooperativeFP8Blockwise
// mainloop of CUTLASS's example 67): TMA loads, two consumer warpgroups on
// wgmma, and every 128 columns of k the tensor core's partial sums are scaled
// by x's 1x128 group scale and the weight's 128x128 block scale and added to
// f32 registers. The epilogue adds the bias and rounds to bf16 once.
//
// One instantiation (compile time on small machines): 128x128x128 tiles,
// clusters of 2 along n (x's tile multicast to both CTAs), the persistent
// tile scheduler (each tile sums all of k in one CTA: no split-K or stream-K,
// so rows do not depend on each other). In CUTLASS's terms A = x [m, k]
// (row-major), B = w^T (column-major [k, n], i.e. w [n, k] row-major), D = out
// [m, n] row-major; A's scales are M-major (scale[g * ld + row]), B's K-major.
#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include "backend/cuda/kernels/fp8/fp8_block_gemm.h"

namespace loom::cuda {
namespace {

using namespace cute;

constexpr int kBlock = 128;  // weight blocks and activation groups

using ElementA = cutlass::float_e4m3_t;
using LayoutA = cutlass::layout::RowMajor;
using ElementB = cutlass::float_e4m3_t;
using LayoutB = cutlass::layout::ColumnMajor;
using ElementD = cutlass::bfloat16_t;
using LayoutD = cutlass::layout::RowMajor;
using ElementBias = cutlass::bfloat16_t;
constexpr int kAlignAB = 16;  // elements: 16 bytes
constexpr int kAlignD = 8;

using TileShape = Shape<_128, _128, _128>;
using ClusterShape = Shape<_1, _2, _1>;
using ScaleConfig =
    cutlass::detail::Sm90BlockwiseScaleConfig<1, kBlock, kBlock, GMMA::Major::MN, GMMA::Major::K>;
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

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The current device, its compute capability (major * 10 + minor) and SM count.
bool device_info(int& device, int& cc, int& sms) {
  int major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return false;
  cc = major * 10 + minor;
  return true;
}

typename Gemm::Arguments arguments_of(const Fp8BlockGemmArgs& a, int device, int sms) {
  const int m = static_cast<int>(a.m), n = static_cast<int>(a.n), k = static_cast<int>(a.k);
  const int kb = k / kBlock, nb = n / kBlock;
  const int x_ld = static_cast<int>(a.x_scale_ld), w_ld = static_cast<int>(a.w_scale_ld);
  // Packed row strides (x [m, k], w [n, k], out [m, n]); the batch mode unused.
  const auto dA = make_stride(int64_t{k}, _1{}, int64_t{m} * k);
  const auto dB = make_stride(int64_t{k}, _1{}, int64_t{n} * k);
  const auto dD = make_stride(int64_t{n}, _1{}, int64_t{m} * n);
  // x's scales: m rows with a padded row stride x_ld per group. (CUTLASS's
  // can_implement wants m itself a multiple of 4 for this TMA load; the TMA
  // only needs 16-byte strides, which x_ld gives, and fills rows past m with
  // zeros.)
  const LayoutSFA sfa =
      make_layout(make_shape(make_shape(_1{}, m), make_shape(Int<kBlock>{}, kb), 1),
                  make_stride(make_stride(_0{}, _1{}), make_stride(_0{}, x_ld), x_ld * kb));
  // The weight's scales: nb rows of kb, row stride w_ld.
  const LayoutSFB sfb =
      make_layout(make_shape(make_shape(Int<kBlock>{}, nb), make_shape(Int<kBlock>{}, kb), 1),
                  make_stride(make_stride(_0{}, w_ld), make_stride(_0{}, _1{}), w_ld * nb));
  typename Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {m, n, k, 1};
  args.mainloop.ptr_A = reinterpret_cast<const ElementA*>(a.xq);
  args.mainloop.dA = dA;
  args.mainloop.ptr_B = reinterpret_cast<const ElementB*>(a.w);
  args.mainloop.dB = dB;
  args.mainloop.ptr_SFA = a.x_scale;
  args.mainloop.layout_SFA = sfa;
  args.mainloop.ptr_SFB = a.w_scale;
  args.mainloop.layout_SFB = sfb;
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.thread.bias_ptr = static_cast<const ElementBias*>(a.bias);
  args.epilogue.ptr_C = nullptr;
  args.epilogue.ptr_D = static_cast<ElementD*>(a.out);
  args.epilogue.dD = dD;
  args.epilogue.dC = dD;
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sms;
  return args;
}

}  // namespace

bool fp8_block_gemm_built() {
  return true;
}

bool fp8_block_gemm_supported(const Fp8BlockGemmArgs& a) {
  int device = 0, cc = 0, sms = 0;
  if (!device_info(device, cc, sms) || cc != 90) return false;  // sm_90a code runs on 9.0 only
  constexpr int64_t kMaxInt = 0x7fffffff;
  if (a.m <= 0 || a.n <= 0 || a.k <= 0 || a.n % kBlock != 0 || a.k % kBlock != 0) return false;
  if (a.m * a.k > kMaxInt || a.n * a.k > kMaxInt || a.m * a.n > kMaxInt) return false;
  if (a.x_scale_ld < a.m || a.x_scale_ld % 4 != 0 || a.w_scale_ld < a.k / kBlock) return false;
  if (a.x_scale_ld * (a.k / kBlock) > kMaxInt || a.w_scale_ld * (a.n / kBlock) > kMaxInt)
    return false;
  if (!aligned16(a.w) || !aligned16(a.out)) return false;
  if (a.bias && !aligned16(a.bias)) return false;
  // Everything else as CUTLASS checks it, on m rounded up to 4 (see arguments_of).
  Fp8BlockGemmArgs rounded = a;
  rounded.m = (a.m + 3) / 4 * 4;
  return Gemm::can_implement(arguments_of(rounded, device, sms)) == cutlass::Status::kSuccess;
}

const char* fp8_block_gemm(const Fp8BlockGemmArgs& a, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream) {
  int device = 0, cc = 0, sms = 0;
  if (!device_info(device, cc, sms)) return "no current CUDA device";
  const typename Gemm::Arguments args = arguments_of(a, device, sms);
  if (Gemm::get_workspace_size(args) > workspace_bytes) return "workspace too small";
  Gemm gemm;
  cutlass::Status st = gemm.initialize(args, workspace, stream);
  if (st == cutlass::Status::kSuccess) st = gemm.run(stream);  // checks the launch
  return st == cutlass::Status::kSuccess ? nullptr : cutlass::cutlassGetStatusString(st);
}

}  // namespace loom::cuda
