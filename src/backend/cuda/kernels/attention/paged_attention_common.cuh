// What the two decode attention kernels share, the CUDA-core one
// (paged_attention.cuh) and the tensor-core one over FP8 caches
// (paged_attention_mma.cuh): cp.async copies of a Vec, ex2, and the end of a block
// (paged_attention_finish): the block's partial softmax states (one per warp
// or virtual warp) of its heads are merged, then written as the output (one
// partition) or as the partition's partials; the block that finishes a
// token's partitions last merges those into the output.
#pragma once

#include <cfloat>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {

constexpr float kLog2e = 1.4426950408889634f;

// The decode kernels' grid: (token, kv head chunk, partition), or with
// a.heads_first (kv head chunk, token, partition). The merge's arrival
// counters are indexed y * gridDim.x + x either way (one per block pair).
inline dim3 paged_attention_grid(const PagedAttentionArgs& a) {
  const auto tokens = static_cast<unsigned>(a.num_tokens);
  const auto heads = static_cast<unsigned>(a.num_kv_heads * a.head_chunks);
  const auto parts = static_cast<unsigned>(a.num_partitions);
  return a.heads_first ? dim3(heads, tokens, parts) : dim3(tokens, heads, parts);
}

// One Vec (8 or 16 bytes) from global to shared memory, asynchronously;
// fill == false zero-fills the destination without reading src. 16-byte
// copies with l2_prefetch 128 or 256 ask the L2 to fetch that many bytes
// around src from memory.
template <class Vec>
__device__ __forceinline__ void attn_copy_async(Vec* dst, const void* src, bool fill,
                                                int l2_prefetch) {
  const int n = fill ? static_cast<int>(sizeof(Vec)) : 0;
  if constexpr (sizeof(Vec) == 16)
    cp_async16_prefetch(smem_addr(dst), src, n, l2_prefetch);
  else
    cp_async<sizeof(Vec)>(smem_addr(dst), src, n);
}

// 2^x (ex2.approx: -inf and huge negatives give 0).
__device__ __forceinline__ float attn_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Called by all threads of a block of kThreads, after a barrier that makes
// s_m, s_l (each set's running max in log2 units and sum, per head) and s_acc
// (its unnormalised output, per head and dim) visible. A set that saw no key
// has l = 0 and m = -FLT_MAX or -inf, so its weight is 0. Heads [0, ng) of
// the block are query heads head0 + g of token row row_base / num_heads;
// v_scale multiplies the output (an FP8 cache's V scale, else 1). s_acc is
// overwritten (it holds the merge weights).
template <int G, int kSets, int kCap, int kThreads>
__device__ __forceinline__ void paged_attention_finish(const PagedAttentionArgs& a, float (*s_m)[G],
                                                       float (*s_l)[G], float (*s_acc)[G][kCap],
                                                       int ng, int hd, int head0, int n_parts,
                                                       int64_t row_base, int64_t part_base,
                                                       float v_scale) {
  constexpr int kWarps = kThreads / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  bf16* out = static_cast<bf16*>(a.out);
  for (int idx = threadIdx.x; idx < ng * hd; idx += kThreads) {
    const int g = idx / hd, d = idx % hd;
    float mx = -FLT_MAX;
#pragma unroll
    for (int v = 0; v < kSets; ++v) mx = fmaxf(mx, s_m[v][g]);
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int v = 0; v < kSets; ++v) {
      const float w = attn_exp2(s_m[v][g] - mx);
      sum = fmaf(w, s_l[v][g], sum);
      o = fmaf(w, s_acc[v][g][d], o);
    }
    if (n_parts > 1) {
      const int64_t p = (part_base + head0 + g) * a.num_partitions + blockIdx.z;
      a.partial_acc[p * hd + d] = o;
      if (d == 0) {
        a.partial_ml[2 * p] = mx;
        a.partial_ml[2 * p + 1] = sum;
      }
    } else {
      out[(row_base + head0 + g) * hd + d] =
          __float2bfloat16(sum > 0.0f ? o / sum * v_scale : 0.0f);
    }
  }
  if (n_parts == 1) return;

  // Split keys: the partition that finishes last merges the n_parts partials
  // of its (token, heads) into the output and resets their counter to 0 for
  // the next launch (so a recorded step needs no reset). The fences make
  // every block's partials visible before its arrival is counted, and the
  // last block's reads come after all arrivals (__ldcg: from L2). Merge: a
  // warp per head turns the partitions' (max, sum) into weights in shared
  // memory, then every thread sums 4 dims of one head over the partitions,
  // 16 partitions' 16-byte loads in flight at once.
  __shared__ bool s_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t* counter =
        a.partition_counters + static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
    s_last = atomicAdd(counter, 1) == n_parts - 1;
    if (s_last) *counter = 0;
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  float* s_w = &s_acc[0][0][0];  // [G][n_parts] weights (the sets' sums are spent)
  __shared__ float s_inv[G];
  static_assert(kSets * kCap >= kMaxAttnPartitions, "merge weights fit in s_acc");
  for (int g = warp; g < ng; g += kWarps) {
    const int64_t p0 = (part_base + head0 + g) * a.num_partitions;
    float* w = s_w + g * n_parts;  // each lane's own entries: the maxima, then the weights
    float mx = -FLT_MAX;
    for (int p = lane; p < n_parts; p += 32) {
      w[p] = __ldcg(a.partial_ml + 2 * (p0 + p));
      mx = fmaxf(mx, w[p]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float sum = 0.0f;
    for (int p = lane; p < n_parts; p += 32) {
      w[p] = attn_exp2(w[p] - mx);
      sum = fmaf(w[p], __ldcg(a.partial_ml + 2 * (p0 + p) + 1), sum);
    }
    sum = warp_sum(sum);
    if (lane == 0) s_inv[g] = sum > 0.0f ? 1.0f / sum : 0.0f;
  }
  __syncthreads();
  const int hd4 = hd / 4;  // float4s per partial row (hd is a multiple of 8)
  for (int idx = threadIdx.x; idx < ng * hd4; idx += kThreads) {
    const int g = idx / hd4, d4 = idx % hd4;
    const float4* acc_p = reinterpret_cast<const float4*>(
                              a.partial_acc + (part_base + head0 + g) * a.num_partitions * hd) +
                          d4;
    const float* w = s_w + g * n_parts;
    float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    constexpr int kBatch = 16;  // partitions' loads in flight per round
    for (int p = 0; p < n_parts; p += kBatch) {
      float4 v[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i)
        v[i] = p + i < n_parts ? __ldcg(acc_p + static_cast<int64_t>(p + i) * hd4)
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const float wi = p + i < n_parts ? w[p + i] : 0.0f;
        o[0] = fmaf(wi, v[i].x, o[0]);
        o[1] = fmaf(wi, v[i].y, o[1]);
        o[2] = fmaf(wi, v[i].z, o[2]);
        o[3] = fmaf(wi, v[i].w, o[3]);
      }
    }
    const float f = s_inv[g] * v_scale;
    bf16* dst = out + (row_base + head0 + g) * hd + d4 * 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) dst[i] = __float2bfloat16(o[i] * f);
  }
}

}  // namespace loom::cuda
