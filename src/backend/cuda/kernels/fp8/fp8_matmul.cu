// FP8 matmul on tensor cores for few rows of x (fp8_kernels.h), weight-
// streaming bound: every weight byte is read once per 8 rows of x, and x is
// quantised on the fly (no separate pass over it).
//
// A CUDA block of kWarps warps owns 16 weight rows (the m16 side of
// mma.m16n8k32.e4m3) and 8 rows of x (the n8 side); its warps take the
// 128-column groups of k round robin, kUnroll (kGroupsPerLoad) groups per iteration with every
// weight load in flight at once, in two register buffers: an iteration's
// loads are issued before the previous iteration's mmas. The first
// iteration's loads need nothing from the kernel before this one, so they go
// out before pdl_wait() (launched with PDL) and before the block works out
// its row scales. In a group, lane (g = lane / 4, c = lane % 4) loads bytes
// [16c, 16c + 16) and [64 + 16c, 64 + 16c + 16) of weight rows g and g + 8,
// so that the 4 lanes of a row read 64 contiguous bytes per load, and the
// same 32 columns of x row g (bf16, from L1/L2 when the group comes up),
// which it quantises: with the row's scale
// (Token: from the row's amax; Static: the layer's scale), or with the
// group's (Group: the amax of the 128 columns, reduced over the 4 lanes of x
// row g). Four mmas consume the lane's 32 bytes b = 0..31 (its columns in
// that order): mma j takes bytes 8j .. 8j + 7, as the fragment's k = 4c ..
// 4c + 3 (register 0 of A and B) and k = 16 + 4c .. 16 + 4c + 3 (register 2
// of A, 1 of B). The k order inside a group is thus permuted, identically for
// A and B, which a dot product does not see. Fragment layouts (PTX ISA,
// mma.m16n8k32 with 8-bit types): A 16x32 row-major: reg0 = row g, k
// 4c..4c+3; reg1 = row g+8, same k; reg2 = row g, k 16+4c..; reg3 = row g+8,
// k 16+4c..; B 32x8: reg0 = k 4c..4c+3 of column g, reg1 = k 16+4c..; C 16x8
// f32: c0, c1 = row g, columns 2c, 2c+1; c2, c3 = row g+8, the same columns.
//
// A group's products are summed by the tensor core in a fresh accumulator,
// then added to f32 registers (scaled by the group's block scales when the
// weights are block-scaled): the accumulation is promoted every 128 values,
// as DeepSeek-V3 and cuBLASLt do for FP8. The warps' partial sums meet in
// shared memory at the end, in a fixed order.
#include "backend/cuda/kernels/fp8/fp8.cuh"
#include "backend/cuda/kernels/fp8/fp8_kernels.h"
#include "backend/cuda/kernels/launch.cuh"

namespace loom::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kTileRows = 16;
constexpr int kTileCols = 8;
constexpr int kGroup = 128;
constexpr int kAmaxThreads = 256;
constexpr int kAmaxSpan = kAmaxThreads * 8;  // columns one block of fp8_row_amax reduces

// Groups per warp per iteration (each of the two buffers holds that many):
// one for per-row and static scales, whose kernel then fits 80 registers and
// three CUDA blocks per SM (24 warps; with two groups, 121 registers and two
// blocks: 8B batch-1 decode on an H100 took 4.10 ms a token against 3.79);
// block-scaled weights keep two (one spills there, and is unmeasured).
template <Fp8ActMode kMode>
constexpr int kGroupsPerLoad = kMode == Fp8ActMode::Group ? 2 : 1;

template <Fp8ActMode kMode, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32, kUnroll == 1 ? 3 : 2)
    fp8_matmul_kernel(const Fp8MatmulArgs a) {
  constexpr bool kBlock = kMode == Fp8ActMode::Group;  // 128x128 weight blocks go with 1x128 groups
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kTileCols;
  const int64_t r0 = row0 + g, r1 = r0 + 8, xr = col0 + g;
  const bool r0_ok = r0 < a.n, r1_ok = r1 < a.n, x_ok = xr < a.m;
  const uint8_t* w0 = a.w + (r0_ok ? r0 : 0) * a.k;
  const uint8_t* w1 = a.w + (r1_ok ? r1 : 0) * a.k;
  const bf16* x = static_cast<const bf16*>(a.x) + (x_ok ? xr : 0) * a.k;
  // Columns of this lane's accumulators (c0/c2: ca, c1/c3: cb).
  const int64_t ca = col0 + 2 * c, cb = ca + 1;
  const int groups = static_cast<int>((a.k + kGroup - 1) / kGroup);
  const float* w_block_scale = kBlock ? a.w_scale + (row0 / kGroup) * a.w_scale_ld : nullptr;
  const uint4 zero = make_uint4(0, 0, 0, 0);

  // One iteration's weights (and block scales), every load in flight at
  // once, in one of two buffers: the next iteration's loads are issued
  // before this one's mmas.
  struct Weights {
    uint4 wa[kUnroll][2], wb[kUnroll][2];
    float ws[kUnroll];
  };
  const auto load = [&](Weights& b, int g0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const bool live = g0 + u * kWarps < groups;
      const int64_t kk = static_cast<int64_t>(g0 + u * kWarps) * kGroup + 16 * c;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int64_t off = kk + 64 * j;
        const bool in = live && off < a.k;  // k % 16 == 0: a 16-byte piece is all in or all out
        b.wa[u][j] = in && r0_ok ? __ldcs(reinterpret_cast<const uint4*>(w0 + off)) : zero;
        b.wb[u][j] = in && r1_ok ? __ldcs(reinterpret_cast<const uint4*>(w1 + off)) : zero;
      }
      if constexpr (kBlock) b.ws[u] = live ? __ldg(w_block_scale + g0 + u * kWarps) : 0.0f;
    }
  };
  Weights buf[2];
  load(buf[0], warp);
  // Launched with PDL: the weights above need nothing from the kernel before
  // this one; x, the row maxima and out do.
  pdl_wait();

  // Row scales (Token, Static) of the tile's 8 rows of x: the quantising
  // inverse of this lane's row, and the dequantising scales of its columns.
  // Token mode takes each row's amax from row_amax's partial maxima, or
  // (row_amax null) reduces it here over the row, while the first weights
  // are in flight.
  __shared__ float s_scale[kTileCols];
  float inv_row = 1.0f;
  if constexpr (!kBlock) {
    if (kMode == Fp8ActMode::Token && a.row_amax == nullptr) {
      __shared__ float s_part[kTileCols][kWarps];
      const int live = static_cast<int>(a.m - col0 < kTileCols ? a.m - col0 : kTileCols);
      for (int i = 0; i < live; ++i) {
        const float m = warp_row_amax(static_cast<const bf16*>(a.x) + (col0 + i) * a.k, a.k,
                                      threadIdx.x, kWarps * 32);
        if (lane == 0) s_part[i][warp] = m;
      }
      __syncthreads();
      if (threadIdx.x < kTileCols) {
        float m = 0.0f;
        if (static_cast<int>(threadIdx.x) < live)
          for (int w = 0; w < kWarps; ++w) m = fmaxf(m, s_part[threadIdx.x][w]);
        s_scale[threadIdx.x] = fp8_scale_for_amax(m);
      }
    } else if (threadIdx.x < kTileCols) {
      const int64_t row = col0 + threadIdx.x;
      float s = 1.0f;
      if constexpr (kMode == Fp8ActMode::Static) {
        s = *a.static_scale;
      } else if (row < a.m) {
        float m = 0.0f;
        for (int p = 0; p < a.amax_parts; ++p) m = fmaxf(m, a.row_amax[row * a.amax_parts + p]);
        s = fp8_scale_for_amax(m);
      }
      s_scale[threadIdx.x] = s;
    }
    __syncthreads();
    inv_row = 1.0f / s_scale[g];
  }

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const auto compute = [&](const Weights& b, int g0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int grp = g0 + u * kWarps;
      if (grp >= groups) break;  // warp-uniform
      // The lane's 32 columns of x row g, the same as its weight bytes:
      // [16c, 16c + 16) and [64 + 16c, 64 + 16c + 16) of the group.
      const int64_t kk = static_cast<int64_t>(grp) * kGroup + 16 * c;
      float f[4][8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t off = kk + 64 * (j / 2) + 8 * (j % 2);
        const uint4 v = x_ok && off < a.k ? __ldg(reinterpret_cast<const uint4*>(x + off)) : zero;
        bf16x8_to_float(v, f[j]);
      }
      float inv = inv_row, sa = 0.0f, sb = 0.0f;
      if constexpr (kBlock) {
        float m = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) m = fmaxf(m, amax8(f[j]));
        m = fmaxf(m,
                  __shfl_xor_sync(0xffffffffu, m, 1));  // the 4 lanes of x row g: its 128 columns
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        const float s = fp8_scale_for_amax(m);
        inv = 1.0f / s;
        sa = b.ws[u] * __shfl_sync(0xffffffffu, s,
                                   8 * c);  // x rows 2c and 2c + 1 live in lanes 8c and 8c + 4
        sb = b.ws[u] * __shfl_sync(0xffffffffu, s, 8 * c + 4);
      }
      uint32_t X[8];  // byte b of the 32: the column of the lane's weight byte b
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint2 q = fp8x8_from_float(f[j], inv);
        X[2 * j] = q.x;
        X[2 * j + 1] = q.y;
      }
      const uint32_t* A0 = reinterpret_cast<const uint32_t*>(b.wa[u]);
      const uint32_t* A1 = reinterpret_cast<const uint32_t*>(b.wb[u]);
      float cg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma_group_e4m3(cg, A0, A1, X);
      promote_group<kBlock>(acc, cg, sa, sb);
    }
  };
  constexpr int kStep = kWarps * kUnroll;
  for (int g0 = warp; g0 < groups; g0 += 2 * kStep) {
    if (g0 + kStep < groups) load(buf[1], g0 + kStep);
    compute(buf[0], g0);
    if (g0 + kStep >= groups) break;
    if (g0 + 2 * kStep < groups) load(buf[0], g0 + 2 * kStep);
    compute(buf[1], g0 + kStep);
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
    if constexpr (!kBlock) v *= a.w_scale[row] * s_scale[col - col0];
    if (bias) v += __bfloat162float(bias[row]);
    out[col * a.n + row] = __float2bfloat16(v);
  }
}

__global__ void __launch_bounds__(kAmaxThreads)
    row_amax_kernel(const bf16* __restrict__ x, int64_t k, float* __restrict__ partial) {
  pdl_trigger();  // the matmul after this one may start loading its weights
  __shared__ float scratch[kAmaxThreads / 32];
  const int64_t row = blockIdx.x;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kAmaxThreads + threadIdx.x;  // 8-value chunk
  float m = 0.0f;
  if (i < k / 8) {
    float f[8];
    bf16x8_to_float(__ldg(reinterpret_cast<const uint4*>(x + row * k) + i), f);
    m = amax8(f);
  }
  m = warp_max(m);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kAmaxThreads / 32; ++w) m = fmaxf(m, scratch[w]);
    partial[row * gridDim.y + blockIdx.y] = m;
  }
}

}  // namespace

int32_t fp8_row_amax_parts(int64_t k) {
  return static_cast<int32_t>((k + kAmaxSpan - 1) / kAmaxSpan);
}

void fp8_row_amax(const void* x, int64_t m, int64_t k, float* partial, cudaStream_t stream) {
  if (m <= 0 || k <= 0) return;
  const dim3 grid(static_cast<unsigned>(m), static_cast<unsigned>(fp8_row_amax_parts(k)));
  row_amax_kernel<<<grid, kAmaxThreads, 0, stream>>>(static_cast<const bf16*>(x), k, partial);
}

namespace {

template <Fp8ActMode kMode>
void launch_matmul(const Fp8MatmulArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((a.n + kTileRows - 1) / kTileRows),
                  static_cast<unsigned>((a.m + kTileCols - 1) / kTileCols));
  launch_dependent(fp8_matmul_kernel<kMode, kGroupsPerLoad<kMode>>, grid, dim3(kWarps * 32), 0,
                   stream, a);
}

}  // namespace

void fp8_matmul(const Fp8MatmulArgs& a, cudaStream_t stream) {
  if (a.m <= 0 || a.n <= 0) return;
  switch (a.mode) {
    case Fp8ActMode::Group:
      launch_matmul<Fp8ActMode::Group>(a, stream);
      break;
    case Fp8ActMode::Static:
      launch_matmul<Fp8ActMode::Static>(a, stream);
      break;
    default:
      launch_matmul<Fp8ActMode::Token>(a, stream);
      break;
  }
}

}  // namespace loom::cuda
