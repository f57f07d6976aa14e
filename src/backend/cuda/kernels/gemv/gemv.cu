// Small-M GEMM as a bandwidth-bound GEMV: out[m, n] = x[m, :] . w[n, :] (+
// bias[n]) for m < M <= kGemvMaxRows, bf16 in and out, fp32 accumulation.
// A decode step of a few sequences streams every weight once; cuBLASLt's
// tiles leave much of the bandwidth unused at M = 1 (few CTAs for N = 4096,
// split-K plus a separate reduction kernel). Here one warp owns one weight
// row: each lane keeps kLoads 16-byte loads of it in flight (streamed past
// L1, evict-first in L2), multiplies them with the matching x values (small,
// cached) and the warp sums its lanes. An output's accumulation order depends
// only on k, never on M or on the other rows, so every row of a batch gets
// the bits it would get alone. Launched with PDL (launch.cuh): a warp's
// first weight loads overlap the kernel before it.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/launch.cuh"

namespace loom::cuda {
namespace {

constexpr int kGemvWarps = 8;
constexpr int kLoads = 8;  // 16-byte weight loads per lane in flight

template <int M>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w, const bf16* __restrict__ bias,
                bf16* __restrict__ out, int64_t n, int64_t k) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  if (row >= n) return;
  const bf16* wr = w + row * k;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  auto accumulate = [&](const uint4& wv, int64_t col) {
    float wf[8];
    bf16x8_to_float(wv, wf);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xf[8];
      bf16x8_to_float(__ldg(reinterpret_cast<const uint4*>(x + m * k + col)), xf);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[m] = fmaf(wf[i], xf[i], acc[m]);
    }
  };
  constexpr int64_t kStep = 32 * 8;  // elements of a row one warp-wide load covers
  const int64_t first = lane * 8;
  uint4 wv[kLoads];
  auto load = [&](int64_t col) {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) wv[u] = __ldcs(reinterpret_cast<const uint4*>(wr + col + u * kStep));
  };
  // The first loads need nothing from the kernel before this one (PDL).
  if (first + (kLoads - 1) * kStep < k) load(first);
  pdl_wait();
  int64_t col = first;
  for (; col + (kLoads - 1) * kStep < k; col += kLoads * kStep) {
    if (col != first) load(col);
#pragma unroll
    for (int u = 0; u < kLoads; ++u) accumulate(wv[u], col + u * kStep);
  }
  for (; col < k; col += kStep) accumulate(__ldcs(reinterpret_cast<const uint4*>(wr + col)), col);
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = warp_sum(acc[m]);
  if (lane == 0) {
    const float b = bias ? __bfloat162float(bias[row]) : 0.0f;
#pragma unroll
    for (int m = 0; m < M; ++m) out[m * n + row] = __float2bfloat16(acc[m] + b);
  }
}

}  // namespace

bool gemv_supported(int64_t m, int64_t k, const void* x, const void* w) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return m >= 1 && m <= kGemvMaxRows && k % 8 == 0 && aligned(x) && aligned(w);
}

void gemv_bf16(const void* x, const void* w, const void* bias, void* out, int64_t m, int64_t n, int64_t k,
               cudaStream_t stream) {
  const auto grid = static_cast<unsigned>((n + kGemvWarps - 1) / kGemvWarps);
  const auto* xb = static_cast<const bf16*>(x);
  const auto* wb = static_cast<const bf16*>(w);
  const auto* bb = static_cast<const bf16*>(bias);
  auto* ob = static_cast<bf16*>(out);
  static_assert(kGemvMaxRows == 2, "one instantiation per row count");
  const dim3 block(kGemvWarps * 32);
  if (m == 1)
    launch_dependent(gemv_kernel<1>, dim3(grid), block, 0, stream, xb, wb, bb, ob, n, k);
  else
    launch_dependent(gemv_kernel<2>, dim3(grid), block, 0, stream, xb, wb, bb, ob, n, k);
}

}  // namespace loom::cuda
