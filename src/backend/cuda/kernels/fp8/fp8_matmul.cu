// FP8 matmul on tensor cores for few rows of x (fp8_kernels.h), weight-
// streaming bound: every weight byte is read once per 8 rows of x.
//
// A CUDA block of kWarps warps owns 16 weight rows (the m16 side of
// mma.m16n8k32.e4m3) and 8 rows of x (the n8 side); its warps take the
// 128-column groups of k round robin, kUnroll groups per iteration with every
// load in flight before the first mma. In a group, lane (g = lane / 4, c =
// lane % 4) loads bytes [32c, 32c + 32) of weight rows g and g + 8 and of x
// row g, and four mmas consume them: mma j takes bytes 8j .. 8j + 7 of the
// lane's 32, as the fragment's k = 4c .. 4c + 3 (register 0 of A and B) and
// k = 16 + 4c .. 16 + 4c + 3 (register 2 of A, 1 of B). The k order inside a
// group is thus permuted, identically for A and B, which a dot product does
// not see. Fragment layouts (PTX ISA, mma.m16n8k32 with 8-bit types): A
// 16x32 row-major: reg0 = row g, k 4c..4c+3; reg1 = row g+8, same k; reg2 =
// row g, k 16+4c..; reg3 = row g+8, k 16+4c..; B 32x8: reg0 = k 4c..4c+3 of
// column g, reg1 = k 16+4c..; C 16x8 f32: c0, c1 = row g, columns 2c, 2c+1;
// c2, c3 = row g+8, the same columns.
//
// A group's products are summed by the tensor core in a fresh accumulator,
// then added to f32 registers (scaled by the group's block scales when the
// weights are block-scaled): the accumulation is promoted every 128 values,
// as DeepSeek-V3 and cuBLASLt do for FP8. The warps' partial sums meet in
// shared memory at the end, in a fixed order.
#include "backend/cuda/kernels/fp8/fp8.cuh"
#include "backend/cuda/kernels/fp8/fp8_kernels.h"

namespace loom::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 2;  // groups per warp per iteration
constexpr int kTileRows = 16;
constexpr int kTileCols = 8;
constexpr int kGroup = 128;

__device__ __forceinline__ void mma_e4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();  // FP8 tensor cores need sm_89+; the host refuses FP8 weights on older GPUs
#endif
}

template <bool kBlock>
__global__ void __launch_bounds__(kWarps * 32) fp8_matmul_kernel(const Fp8MatmulArgs a) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kTileCols;
  const int64_t r0 = row0 + g, r1 = r0 + 8, xr = col0 + g;
  const bool r0_ok = r0 < a.n, r1_ok = r1 < a.n, x_ok = xr < a.m;
  const uint8_t* w0 = a.w + (r0_ok ? r0 : 0) * a.k;
  const uint8_t* w1 = a.w + (r1_ok ? r1 : 0) * a.k;
  const uint8_t* xq = a.xq + (x_ok ? xr : 0) * a.k;
  // Columns of this lane's accumulators (c0/c2: ca, c1/c3: cb).
  const int64_t ca = col0 + 2 * c, cb = ca + 1;
  const int groups = static_cast<int>((a.k + kGroup - 1) / kGroup);
  const float* w_block_scale = kBlock ? a.w_scale + (row0 / kGroup) * a.w_scale_ld : nullptr;

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int g0 = warp; g0 < groups; g0 += kWarps * kUnroll) {
    uint4 wa[kUnroll][2], wb[kUnroll][2], xv[kUnroll][2];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = static_cast<int64_t>(g0 + u * kWarps) * kGroup + 32 * c;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int64_t off = kk + 16 * j;
        const bool in = g0 + u * kWarps < groups && off < a.k;
        const uint4 zero = make_uint4(0, 0, 0, 0);
        wa[u][j] = in && r0_ok ? __ldcs(reinterpret_cast<const uint4*>(w0 + off)) : zero;
        wb[u][j] = in && r1_ok ? __ldcs(reinterpret_cast<const uint4*>(w1 + off)) : zero;
        xv[u][j] = in && x_ok ? __ldg(reinterpret_cast<const uint4*>(xq + off)) : zero;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int grp = g0 + u * kWarps;
      if (grp >= groups) break;  // warp-uniform
      const uint32_t* A0 = reinterpret_cast<const uint32_t*>(wa[u]);
      const uint32_t* A1 = reinterpret_cast<const uint32_t*>(wb[u]);
      const uint32_t* X = reinterpret_cast<const uint32_t*>(xv[u]);
      float cg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < 4; ++j)
        mma_e4m3(cg, A0[2 * j], A1[2 * j], A0[2 * j + 1], A1[2 * j + 1], X[2 * j], X[2 * j + 1]);
      if constexpr (kBlock) {
        const float ws = w_block_scale[grp];
        const float* xs = a.x_scale + static_cast<int64_t>(grp) * a.x_scale_ld;
        const float sa = ca < a.m ? ws * xs[ca] : 0.0f;
        const float sb = cb < a.m ? ws * xs[cb] : 0.0f;
        acc[0] = fmaf(cg[0], sa, acc[0]);
        acc[1] = fmaf(cg[1], sb, acc[1]);
        acc[2] = fmaf(cg[2], sa, acc[2]);
        acc[3] = fmaf(cg[3], sb, acc[3]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[e] += cg[e];
      }
    }
  }

  __shared__ float red[kWarps][4][32];
#pragma unroll
  for (int e = 0; e < 4; ++e) red[warp][e][lane] = acc[e];
  __syncthreads();
  if (warp != 0) return;
  bf16* out = static_cast<bf16*>(a.out);
  const bf16* bias = static_cast<const bf16*>(a.bias);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += red[w][e][lane];
    const int64_t row = e < 2 ? r0 : r1;
    const int64_t col = (e & 1) ? cb : ca;
    if (row >= a.n || col >= a.m) continue;
    if constexpr (!kBlock) v *= a.w_scale[row] * a.x_scale[col];
    if (bias) v += __bfloat162float(bias[row]);
    out[col * a.n + row] = __float2bfloat16(v);
  }
}

}  // namespace

void fp8_matmul(const Fp8MatmulArgs& a, cudaStream_t stream) {
  if (a.m <= 0 || a.n <= 0) return;
  const dim3 grid(static_cast<unsigned>((a.n + kTileRows - 1) / kTileRows),
                  static_cast<unsigned>((a.m + kTileCols - 1) / kTileCols));
  if (a.block)
    fp8_matmul_kernel<true><<<grid, kWarps * 32, 0, stream>>>(a);
  else
    fp8_matmul_kernel<false><<<grid, kWarps * 32, 0, stream>>>(a);
}

}  // namespace loom::cuda
