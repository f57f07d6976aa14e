// Device helpers of the FP8 E4M3 kernels: the quantisation arithmetic every
// FP8 kernel shares (the host references' operations, core/fp8.h and
// backend/linear.h: IEEE division and multiplication, round-to-nearest-even
// saturating conversion) and fp8 <-> float conversion of packed values.
// Internal to backend/cuda/kernels.
#pragma once

#include <cuda_fp8.h>

#include "backend/cuda/kernels/common.cuh"

namespace loom::cuda {

constexpr float kFp8Max = 448.0f;

// core/fp8.h's fp8_scale_for_amax: max(amax, 1e-12) / 448 (NaN gives the minimum).
__device__ __forceinline__ float fp8_scale_for_amax(float amax) {
  return fmaxf(amax, 1e-12f) / kFp8Max;
}

// A row's scale as quantize_fp8_rows gives it, with the row spread over the
// block (each thread passes the largest |value| of its part): Static,
// *static_scale; Token (static_scale null), fp8_scale_for_amax of the row's
// amax. Every thread of the block gets it; scratch: 33 floats of shared memory.
__device__ __forceinline__ float fp8_block_row_scale(float thread_amax, const float* static_scale,
                                                     float* scratch) {
  return static_scale ? *static_scale : fp8_scale_for_amax(block_max(thread_amax, scratch));
}

// A per-row scaled FP8 product's output before rounding to bf16:
// (row_scale * col_scale) * v + bias as one fused multiply-add (bias +0.0
// when absent), the arithmetic of the CUTLASS row-scaled GEMM's epilogue
// (its multiplies and FusedMultiplyAdd, fp8_row_gemm_sm90.cuh), so that every
// kernel computing the same f32 sum v gives the same bits.
__device__ __forceinline__ float fp8_scale_bias(float v, float row_scale, float col_scale,
                                                bf16 bias) {
  return __fmaf_rn(row_scale * col_scale, v, __bfloat162float(bias));
}

// fp8(a), fp8(b) packed, a in the low byte.
__device__ __forceinline__ uint16_t fp8x2_from_float(float a, float b) {
  return static_cast<uint16_t>(
      __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}

// Eight floats times inv as 8 fp8 bytes (element i in byte i).
__device__ __forceinline__ uint2 fp8x8_from_float(const float (&f)[8], float inv) {
  uint2 v;
  v.x = uint32_t(fp8x2_from_float(f[0] * inv, f[1] * inv)) |
        (uint32_t(fp8x2_from_float(f[2] * inv, f[3] * inv)) << 16);
  v.y = uint32_t(fp8x2_from_float(f[4] * inv, f[5] * inv)) |
        (uint32_t(fp8x2_from_float(f[6] * inv, f[7] * inv)) << 16);
  return v;
}

// Two fp8 values (the low and high byte of `v`) as floats, exactly.
__device__ __forceinline__ float2 fp8x2_to_float2(uint16_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// Two fp8 values (the low and high byte of `v`) as an f16x2 register (the
// low byte in the low half), exactly: one cvt.rn.f16x2.e4m3x2 on sm_89 and
// later (cuda_fp8.hpp's choice), a bit-level conversion before.
__device__ __forceinline__ uint32_t fp8x2_to_half2_bits(uint16_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// Eight fp8 bytes (element i in byte i) as floats.
__device__ __forceinline__ void fp8x8_to_float(const uint2& v, float (&f)[8]) {
  const uint32_t w[2] = {v.x, v.y};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float2 lo = fp8x2_to_float2(static_cast<uint16_t>(w[i] & 0xffffu));
    const float2 hi = fp8x2_to_float2(static_cast<uint16_t>(w[i] >> 16));
    f[4 * i] = lo.x;
    f[4 * i + 1] = lo.y;
    f[4 * i + 2] = hi.x;
    f[4 * i + 3] = hi.y;
  }
}

__device__ __forceinline__ float amax8(const float (&f)[8]) {
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) m = fmaxf(m, fabsf(f[i]));
  return m;
}

// c += A (16 x 32, rows g and g + 8 of lane (g = lane / 4, c = lane % 4):
// registers a0..a3) times B (32 x 8, b0, b1), FP8 E4M3 in, f32 out:
// mma.m16n8k32 (PTX ISA fragment layouts).
__device__ __forceinline__ void mma_e4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();  // FP8 tensor cores need sm_89+; the host refuses FP8 weights on older GPUs
#endif
}

// The largest |x| over the 8-value pieces t, t + n, t + 2n, ... of row x (k
// values, a multiple of 8; x 16-byte aligned), reduced over the calling warp:
// with n threads at t = 0..n-1, the warps' results together cover the row.
__device__ __forceinline__ float warp_row_amax(const bf16* x, int64_t k, int t, int n) {
  const uint4* v = reinterpret_cast<const uint4*>(x);
  float m = 0.0f;
#pragma unroll 8
  for (int64_t q = t; q < k / 8; q += n) {
    float f[8];
    bf16x8_to_float(__ldg(v + q), f);
    m = fmaxf(m, amax8(f));
  }
  return warp_max(m);
}

// One 128-column group of the FP8 matmul kernels (fp8_matmul.cu,
// fp8_stream.cu): c += the products of a lane's 32 bytes of weight rows g
// (w0) and g + 8 (w1) with the same 32 columns of x row g (x), as four mmas;
// mma j takes bytes 8j .. 8j + 7 (words 2j, 2j + 1), so A and B see the
// group's k in the same permuted order.
__device__ __forceinline__ void mma_group_e4m3(float (&c)[4], const uint32_t* w0,
                                               const uint32_t* w1, const uint32_t* x) {
#pragma unroll
  for (int j = 0; j < 4; ++j)
    mma_e4m3(c, w0[2 * j], w1[2 * j], w0[2 * j + 1], w1[2 * j + 1], x[2 * j], x[2 * j + 1]);
}

// A group's products g (mma_group_e4m3 from zero) promoted into the f32
// accumulators: scaled per column (block-scaled weights: sa for the lane's
// columns 2c, sb for 2c + 1; registers 0 and 2, 1 and 3) or added as they are.
template <bool kScaled>
__device__ __forceinline__ void promote_group(float (&acc)[4], const float (&g)[4], float sa,
                                              float sb) {
  if constexpr (kScaled) {
    acc[0] = fmaf(g[0], sa, acc[0]);
    acc[1] = fmaf(g[1], sb, acc[1]);
    acc[2] = fmaf(g[2], sa, acc[2]);
    acc[3] = fmaf(g[3], sb, acc[3]);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[e] += g[e];
  }
}

}  // namespace loom::cuda
