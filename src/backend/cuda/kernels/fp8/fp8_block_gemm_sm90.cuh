// The Hopper FP8 GEMM behind fp8_block_gemm (fp8_block_gemm.h), both scale
// modes: CUTLASS's sm_90a FP8 GEMM with blockwise scaling (the
// KernelTmaWarpSpecializedCooperativeFP8Blockwise mainloop of CUTLASS's
// example 67): TMA loads, two consumer warpgroups on wgmma, and every 128
// columns of k the tensor core's partial sums are scaled by x's scale and the
// weight's and added to f32 registers. The epilogue adds the bias and rounds
// to bf16 once.
//
// A translation unit defines LOOM_FP8_GEMM_W_SCALE_ROWS (128 or 1) and
// includes this header for its one instantiation, ScaledGemm, internal to it
// (compile time on small machines; namespace-scope types, which the host
// compiler takes where a class template's dependent CUTLASS builders failed): x's scales per row
// and 128 columns (MN-major: scale[g * ld + row]; a stride of 0 across the groups repeats one scale
// per row), the weight's per 128x128 block (kScaleRowsW = 128, K-major) or per row (kScaleRowsW =
// 1, MN-major with a stride of 0 across the groups). 128x128x128 tiles, clusters of 2 along n (x's
// tile multicast to both CTAs), the persistent tile scheduler (each tile sums all of k in one CTA:
// no split-K or stream-K, so rows do not depend on each other or on how many there are). In
// CUTLASS's terms A = x [m, k] (row-major), B = w^T (column-major [k, n], i.e. w [n, k] row-major),
// D = out [m, n] row-major.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include "backend/cuda/kernels/fp8/fp8_block_gemm.h"

#ifndef LOOM_FP8_GEMM_W_SCALE_ROWS
#error "define LOOM_FP8_GEMM_W_SCALE_ROWS (128: 128x128 weight blocks, 1: a scale per row)"
#endif

namespace loom::cuda::sm90 {

// The row_scales mode, defined in fp8_block_gemm_rows_sm90.cu.
bool row_gemm_supported(const Fp8BlockGemmArgs& args);
const char* row_gemm(const Fp8BlockGemmArgs& args, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream);

namespace {  // each translation unit's own instantiation

using namespace cute;

constexpr int kGroup = 128;  // columns of k per scale (and weight block rows)
constexpr int kScaleRowsW = LOOM_FP8_GEMM_W_SCALE_ROWS;

namespace types {
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
    cutlass::detail::Sm90BlockwiseScaleConfig<1, kScaleRowsW, kGroup, GMMA::Major::MN,
                                              kScaleRowsW == 1 ? GMMA::Major::MN : GMMA::Major::K>;
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

struct ScaledGemm {
  using Gemm = types::Gemm;
  using LayoutSFA = types::LayoutSFA;
  using LayoutSFB = types::LayoutSFB;
  using ElementA = types::ElementA;
  using ElementB = types::ElementB;
  using ElementD = types::ElementD;
  using ElementBias = types::ElementBias;

  // The problem as CUTLASS takes it: xq [m, k], w [n, k], out [m, n] packed,
  // the scales' layouts built by the caller.
  static Gemm::Arguments arguments(const uint8_t* xq, const float* x_scale, const LayoutSFA& sfa,
                                   const uint8_t* w, const float* w_scale, const LayoutSFB& sfb,
                                   int m, int n, int k, const void* bias, void* out, int device,
                                   int sms) {
    Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {m, n, k, 1};
    args.mainloop.ptr_A = reinterpret_cast<const ElementA*>(xq);
    args.mainloop.dA = make_stride(int64_t{k}, _1{}, int64_t{m} * k);
    args.mainloop.ptr_B = reinterpret_cast<const ElementB*>(w);
    args.mainloop.dB = make_stride(int64_t{k}, _1{}, int64_t{n} * k);
    args.mainloop.ptr_SFA = x_scale;
    args.mainloop.layout_SFA = sfa;
    args.mainloop.ptr_SFB = w_scale;
    args.mainloop.layout_SFB = sfb;
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.thread.bias_ptr = static_cast<const ElementBias*>(bias);
    args.epilogue.ptr_C = nullptr;
    args.epilogue.ptr_D = static_cast<ElementD*>(out);
    args.epilogue.dD = make_stride(int64_t{n}, _1{}, int64_t{m} * n);
    args.epilogue.dC = args.epilogue.dD;
    args.hw_info.device_id = device;
    args.hw_info.sm_count = sms;
    return args;
  }

  static bool can_implement(const Gemm::Arguments& args) {
    return Gemm::can_implement(args) == cutlass::Status::kSuccess;
  }

  // Null, or what went wrong (a static string).
  static const char* run(const Gemm::Arguments& args, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream) {
    if (Gemm::get_workspace_size(args) > workspace_bytes) return "workspace too small";
    Gemm gemm;
    cutlass::Status st = gemm.initialize(args, workspace, stream);
    if (st == cutlass::Status::kSuccess) st = gemm.run(stream);  // checks the launch
    return st == cutlass::Status::kSuccess ? nullptr : cutlass::cutlassGetStatusString(st);
  }
};

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The current device, its compute capability (major * 10 + minor) and SM count.
inline bool device_info(int& device, int& cc, int& sms) {
  int major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return false;
  cc = major * 10 + minor;
  return true;
}

// What both modes ask of a problem before CUTLASS's own check: an sm_90 GPU
// (sm_90a code runs on 9.0 only), n and k multiples of 128, int-sized
// extents, 16-byte aligned w, out and bias.
inline bool shape_ok(const Fp8BlockGemmArgs& a, int& device, int& sms) {
  int cc = 0;
  if (!device_info(device, cc, sms) || cc != 90) return false;
  constexpr int64_t kMaxInt = 0x7fffffff;
  if (a.m <= 0 || a.n <= 0 || a.k <= 0 || a.n % kGroup != 0 || a.k % kGroup != 0) return false;
  if (a.m * a.k > kMaxInt || a.n * a.k > kMaxInt || a.m * a.n > kMaxInt) return false;
  if (!aligned16(a.w) || !aligned16(a.out)) return false;
  return !a.bias || aligned16(a.bias);
}

// Queues ScaledGemm with the arguments arguments_of(args, device, sms) builds.
template <class ArgumentsOf>
const char* launch(const Fp8BlockGemmArgs& args, ArgumentsOf arguments_of, void* workspace,
                   size_t workspace_bytes, cudaStream_t stream) {
  int device = 0, cc = 0, sms = 0;
  if (!device_info(device, cc, sms)) return "no current CUDA device";
  return ScaledGemm::run(arguments_of(args, device, sms), workspace, workspace_bytes, stream);
}

}  // namespace
}  // namespace loom::cuda::sm90
