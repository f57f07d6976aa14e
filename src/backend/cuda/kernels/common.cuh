// Device helpers shared by the CUDA kernels: bf16 <-> f32 conversion of 8-value
// (16-byte) vectors and warp reductions. Internal to backend/cuda/kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace loom::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ void bf16x8_to_float(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ uint4 float_to_bf16x8(const float (&f)[8]) {
  uint4 v;
  v.x = pack_bf16x2(f[0], f[1]);
  v.y = pack_bf16x2(f[2], f[3]);
  v.z = pack_bf16x2(f[4], f[5]);
  v.w = pack_bf16x2(f[6], f[7]);
  return v;
}

// c += A (16x16 bf16) * B (16x8 bf16), f32 accumulators: mma.m16n8k16 (sm_80+;
// the attention kernels' fragment layouts are in their headers).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One value of T (f32, f16 or bf16) as float.
template <class T>
__device__ __forceinline__ float to_float(T x) {
  if constexpr (sizeof(T) == 4)
    return x;
  else if constexpr (std::is_same_v<T, __half>)
    return __half2float(x);
  else
    return __bfloat162float(x);
}

// Eight values of a 16-byte vector of T (bf16/f16: one uint4; f32: two).
template <class T>
__device__ __forceinline__ void load8(const T* p, float (&f)[8]) {
  if constexpr (sizeof(T) == 4) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  } else {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    if constexpr (std::is_same_v<T, __half>) {
      const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 x = __half22float2(h[k]);
        f[2 * k] = x.x;
        f[2 * k + 1] = x.y;
      }
    } else {
      bf16x8_to_float(v, f);
    }
  }
}

// Fills cs/sn[j] = cos/sin(pos * inv_freq[j]) * mscale for j < half, with the
// accurate sincosf (angles reach 1e5 rad), then syncs the block: the rotary
// table a token's heads share (rope.cu, the fused QKV split).
// cos and sin of the angle pos * freq, times mscale: one rotary pair's factors.
__device__ __forceinline__ void rope_cos_sin(float pos, float freq, float mscale, float& c,
                                             float& s) {
  sincosf(pos * freq, &s, &c);
  c *= mscale;
  s *= mscale;
}

// Rotates the pair (x0, x1) by the factors (c, s) in place.
__device__ __forceinline__ void rotate_pair(float& x0, float& x1, float c, float s) {
  const float a = x0, b = x1;
  x0 = a * c - b * s;
  x1 = a * s + b * c;
}

__device__ __forceinline__ void rope_table(float pos, const float* inv_freq, int half, float mscale,
                                           float* cs, float* sn) {
  for (int j = threadIdx.x; j < half; j += blockDim.x)
    rope_cos_sin(pos, inv_freq[j], mscale, cs[j], sn[j]);
  __syncthreads();
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// A shared-memory pointer as the 32-bit address PTX's shared-space
// instructions take.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// cp.async (sm_80 and later): `bytes` (16 or 8) from global memory to the
// shared address dst, asynchronously, of which src_bytes are read and the
// rest zero-filled (src_bytes 0: src is not read); 16 bytes bypass L1 (.cg),
// 8 go through it (.ca).
template <int kBytes>
__device__ __forceinline__ void cp_async(uint32_t dst, const void* src, int src_bytes) {
  static_assert(kBytes == 16 || kBytes == 8, "8- or 16-byte copies");
  if constexpr (kBytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
// cp_async<16> whose L2 fetches l2_prefetch bytes (128 or 256: cp.async's
// prefetch-size hint) around src from memory; any other value: no hint.
__device__ __forceinline__ void cp_async16_prefetch(uint32_t dst, const void* src, int src_bytes,
                                                    int l2_prefetch) {
  if (l2_prefetch == 256)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
  else if (l2_prefetch == 128)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
  else
    cp_async<16>(dst, src, src_bytes);
}
// Closes this thread's group of cp.async copies issued since the last.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Sum (or, kMax, maximum) over the whole block (blockDim.x a multiple of 32,
// at most 1024); every thread gets the result. `scratch` holds 33 floats of
// shared memory.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* scratch) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
    t = kMax ? warp_max(t) : warp_sum(t);
    if (lane == 0) scratch[32] = t;
  }
  __syncthreads();
  return scratch[32];
}
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  return block_reduce<false>(v, scratch);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  return block_reduce<true>(v, scratch);
}

inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Blocks for a grid-stride loop over n items with `threads` per block.
inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 8192) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<unsigned>(b);
}

}  // namespace loom::cuda
