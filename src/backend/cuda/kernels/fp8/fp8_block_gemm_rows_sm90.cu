// fp8_block_gemm's row_scales mode (fp8_block_gemm.h): the sm_90a GEMM of fp8_block_gemm_sm90.cuh
// with one scale per row of x and one per weight row, each repeated over the
// 128-column groups of k (a stride of 0), so that every group's partial sums
// are scaled by x_scale[m] * w_scale[n] as they are promoted to f32.
#define LOOM_FP8_GEMM_W_SCALE_ROWS 1
#include "backend/cuda/kernels/fp8/fp8_block_gemm_sm90.cuh"

namespace loom::cuda {
namespace {

using G = sm90::ScaledGemm;

G::Gemm::Arguments arguments_of(const Fp8BlockGemmArgs& a, int device, int sms) {
  using namespace cute;
  const int m = static_cast<int>(a.m), n = static_cast<int>(a.n), k = static_cast<int>(a.k);
  const int kb = k / sm90::kGroup;
  const G::LayoutSFA sfa =
      make_layout(make_shape(make_shape(_1{}, m), make_shape(Int<sm90::kGroup>{}, kb), 1),
                  make_stride(make_stride(_0{}, _1{}), make_stride(_0{}, 0), m));
  const G::LayoutSFB sfb =
      make_layout(make_shape(make_shape(_1{}, n), make_shape(Int<sm90::kGroup>{}, kb), 1),
                  make_stride(make_stride(_0{}, _1{}), make_stride(_0{}, 0), n));
  return G::arguments(a.xq, a.x_scale, sfa, a.w, a.w_scale, sfb, m, n, k, a.bias, a.out, device,
                      sms);
}

}  // namespace

bool sm90::row_gemm_supported(const Fp8BlockGemmArgs& a) {
  int device = 0, sms = 0;
  return sm90::shape_ok(a, device, sms) && G::can_implement(arguments_of(a, device, sms));
}

const char* sm90::row_gemm(const Fp8BlockGemmArgs& a, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream) {
  return sm90::launch(a, arguments_of, workspace, workspace_bytes, stream);
}

}  // namespace loom::cuda
