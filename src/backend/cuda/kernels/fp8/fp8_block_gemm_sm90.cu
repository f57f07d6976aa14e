// fp8_block_gemm (fp8_block_gemm.h): the sm_90a GEMM of fp8_block_gemm_sm90.cuh
// with 128x128 weight blocks and x's 1x128 groups; row_scales goes to
// fp8_block_gemm_rows_sm90.cu's instantiation.
#define LOOM_FP8_GEMM_W_SCALE_ROWS 128
#include "backend/cuda/kernels/fp8/fp8_block_gemm_sm90.cuh"

namespace loom::cuda {
namespace {

using G = sm90::ScaledGemm;

G::Gemm::Arguments arguments_of(const Fp8BlockGemmArgs& a, int device, int sms) {
  using namespace cute;
  constexpr int kBlock = sm90::kGroup;
  const int m = static_cast<int>(a.m), n = static_cast<int>(a.n), k = static_cast<int>(a.k);
  const int kb = k / kBlock, nb = n / kBlock;
  const int x_ld = static_cast<int>(a.x_scale_ld), w_ld = static_cast<int>(a.w_scale_ld);
  // x's scales: m rows with a padded row stride x_ld per group. (CUTLASS's
  // can_implement wants m itself a multiple of 4 for this TMA load; the TMA
  // only needs 16-byte strides, which x_ld gives, and fills rows past m with
  // zeros.)
  const G::LayoutSFA sfa =
      make_layout(make_shape(make_shape(_1{}, m), make_shape(Int<kBlock>{}, kb), 1),
                  make_stride(make_stride(_0{}, _1{}), make_stride(_0{}, x_ld), x_ld * kb));
  // The weight's scales: nb rows of kb, row stride w_ld.
  const G::LayoutSFB sfb =
      make_layout(make_shape(make_shape(Int<kBlock>{}, nb), make_shape(Int<kBlock>{}, kb), 1),
                  make_stride(make_stride(_0{}, w_ld), make_stride(_0{}, _1{}), w_ld * nb));
  return G::arguments(a.xq, a.x_scale, sfa, a.w, a.w_scale, sfb, m, n, k, a.bias, a.out, device,
                      sms);
}

}  // namespace

bool fp8_block_gemm_built() {
  return true;
}

bool fp8_block_gemm_supported(const Fp8BlockGemmArgs& a) {
  if (a.row_scales) return sm90::row_gemm_supported(a);
  int device = 0, sms = 0;
  if (!sm90::shape_ok(a, device, sms)) return false;
  constexpr int64_t kMaxInt = 0x7fffffff;
  if (a.x_scale_ld < a.m || a.x_scale_ld % 4 != 0 || a.w_scale_ld < a.k / sm90::kGroup)
    return false;
  if (a.x_scale_ld * (a.k / sm90::kGroup) > kMaxInt ||
      a.w_scale_ld * (a.n / sm90::kGroup) > kMaxInt)
    return false;
  // Everything else as CUTLASS checks it, on m rounded up to 4 (see arguments_of).
  Fp8BlockGemmArgs rounded = a;
  rounded.m = (a.m + 3) / 4 * 4;
  return G::can_implement(arguments_of(rounded, device, sms));
}

const char* fp8_block_gemm(const Fp8BlockGemmArgs& a, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream) {
  if (a.row_scales) return sm90::row_gemm(a, workspace, workspace_bytes, stream);
  return sm90::launch(a, arguments_of, workspace, workspace_bytes, stream);
}

}  // namespace loom::cuda
