// Paged attention kernel, one template per (head size HD, query heads per
// block G), instantiated in paged_attention_hd*.cu. A CUDA block serves one
// query token, G query heads sharing one kv head, and one partition of the
// token's keys. Its 4 warps are cut into "virtual warps" of kLanes lanes (HD/8
// rounded up to a power of two); each active lane holds 8 consecutive dims
// (one 16-byte load) and each virtual warp walks its own share of the keys
// with its own online softmax (no block-wide syncs in the loop). Lanes past
// the head's last dims (HD 48, 80, 96, 112, 160, 192...) load nothing and add
// zeros. The virtual warps' (max, sum, acc) are merged through shared memory
// at the end. HD == 0 is the runtime-sized path for uncommon sizes: the head
// size is a.head_dim (a multiple of 8, at most 256) on 32 lanes per key.
// Handles prefill chunks with cached prefixes and decodes alike: token t of
// sequence s sits at position ctx - new + j and sees keys (pos - window,
// pos]. With a.token_index, block x serves token token_index[x] (its partials
// sit at row x). Invariant: the warp-level loop bounds depend only on the warp
// index, so every lane reaches every shuffle.
// KV is the cache's element type: bf16, or uint8_t for FP8 E4M3 (a lane's 8
// dims are then one 8-byte load, exact as floats); the KV head's scales fold
// into q (k_scale) and the output (v_scale).
#pragma once

#include <cfloat>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/fp8/fp8.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {

constexpr int kAttnWarps = 4;
constexpr int kAttnThreads = kAttnWarps * 32;
constexpr int kAttnMaxHeadDim = 256;

// Dims a block holds per head (HD, or the runtime path's maximum) and the
// lanes per key: the power of two covering kCap / 8.
template <int HD>
struct AttnShape {
  static constexpr int kCap = HD > 0 ? HD : kAttnMaxHeadDim;
  static constexpr int kLanes = kCap <= 16 ? 2 : kCap <= 32 ? 4 : kCap <= 64 ? 8 : kCap <= 128 ? 16 : 32;
  static_assert(kCap % 8 == 0 && kCap <= kAttnMaxHeadDim, "head size");
};

// 8 cached values of a lane: one 16-byte load of bf16, or 8 bytes of FP8.
template <class KV>
struct KvLoad {
  using Vec = uint4;
  static __device__ __forceinline__ void to_float(const Vec& v, float (&f)[8]) {
    bf16x8_to_float(v, f);
  }
};
template <>
struct KvLoad<uint8_t> {
  using Vec = uint2;
  static __device__ __forceinline__ void to_float(const Vec& v, float (&f)[8]) {
    fp8x8_to_float(v, f);
  }
};

template <int HD, int G, class KV>
__global__ void __launch_bounds__(kAttnThreads) paged_attention_kernel(const PagedAttentionArgs a) {
  constexpr bool kFp8 = sizeof(KV) == 1;
  using Vec = typename KvLoad<KV>::Vec;
  constexpr int kCap = AttnShape<HD>::kCap;
  constexpr int kLanesPerKey = AttnShape<HD>::kLanes;
  constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  constexpr int kUnroll = 2;  // keys per virtual warp per iteration
  constexpr int kVirtualWarps = kAttnWarps * kKeysPerWarp;
  constexpr int kWarpKeys = kKeysPerWarp * kUnroll;   // keys per warp per iteration
  constexpr int kBlockKeys = kAttnWarps * kWarpKeys;  // keys per block per iteration
  static_assert(kLanesPerKey >= 1 && kLanesPerKey <= 32 && 32 % kLanesPerKey == 0, "head_dim");
  const int hd = HD > 0 ? HD : a.head_dim;  // dims per head

  __shared__ float s_acc[kVirtualWarps][G][kCap];
  __shared__ float s_m[kVirtualWarps][G];
  __shared__ float s_l[kVirtualWarps][G];

  const int tok = a.token_index ? a.token_index[blockIdx.x] : static_cast<int>(blockIdx.x);
  const int kv_head = blockIdx.y / a.head_chunks;
  const int chunk = blockIdx.y % a.head_chunks;
  const int group = a.num_heads / a.num_kv_heads;
  const int head0 = kv_head * group + chunk * G;
  const int ng = min(G, group - chunk * G);  // heads of this block that exist
  const int seq = a.token_seq[tok];
  const int q_begin = a.query_start[seq];
  const int n_new = a.query_start[seq + 1] - q_begin;
  const int pos = a.context_lens[seq] - n_new + (tok - q_begin);
  const int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
  const int hi = pos + 1;  // keys [lo, hi)
  // This token's partitions: the first n_parts of the grid's (none for a
  // token without keys: a padded row, which writes nothing). The host sizes
  // the grid for the longest key range; the min only guards the arrival
  // counters should it not.
  const int n_parts = hi > lo ? min((hi - lo + a.partition_keys - 1) / a.partition_keys, a.num_partitions) : 0;
  if (static_cast<int>(blockIdx.z) >= n_parts) return;
  const int part_lo = lo + static_cast<int>(blockIdx.z) * a.partition_keys;
  const int part_hi = min(hi, part_lo + a.partition_keys);
  const int64_t row_base = static_cast<int64_t>(tok) * a.num_heads;         // rows of q and out
  const int64_t part_base = static_cast<int64_t>(blockIdx.x) * a.num_heads;  // rows of the partials

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int vw = lane / kLanesPerKey, sub = lane % kLanesPerKey;
  const int gv = warp * kKeysPerWarp + vw;
  const bool active = sub * 8 < hd;  // this lane holds dims of the head

  // q (pre-scaled, with the K scale of an FP8 cache) for this lane's 8 dims of each head.
  const float q_scale = kFp8 ? a.scale * a.k_scale[kv_head] : a.scale;
  const float v_scale = kFp8 ? a.v_scale[kv_head] : 1.0f;
  float q[G][8];
  const bf16* qs = static_cast<const bf16*>(a.q);
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g < ng && active) {
      bf16x8_to_float(*reinterpret_cast<const uint4*>(qs + (row_base + head0 + g) * hd + sub * 8), q[g]);
#pragma unroll
      for (int d = 0; d < 8; ++d) q[g][d] *= q_scale;
    } else {
#pragma unroll
      for (int d = 0; d < 8; ++d) q[g][d] = 0.0f;
    }
  }

  float m[G], l[G], acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -FLT_MAX;
    l[g] = 0.0f;
#pragma unroll
    for (int d = 0; d < 8; ++d) acc[g][d] = 0.0f;
  }

  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;
  const int64_t slot_stride = static_cast<int64_t>(a.num_kv_heads) * hd;  // elements per cache slot
  const KV* kbase = static_cast<const KV*>(a.k_cache) + kv_head * hd + sub * 8;
  const KV* vbase = static_cast<const KV*>(a.v_cache) + kv_head * hd + sub * 8;
  const bool capped = a.softcap > 0.0f;
  const float inv_cap = capped ? 1.0f / a.softcap : 0.0f;

  for (int base = part_lo + warp * kWarpKeys; base < part_hi; base += kBlockKeys) {
    Vec kr[kUnroll], vr[kUnroll];
    bool valid[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int key = base + j * kKeysPerWarp + vw;
      valid[j] = key < part_hi;  // the same for all lanes of the virtual warp
      if (valid[j] && active) {
        const int64_t slot =
            static_cast<int64_t>(table[key / a.block_size]) * a.block_size + key % a.block_size;
        kr[j] = __ldg(reinterpret_cast<const Vec*>(kbase + slot * slot_stride));
        vr[j] = __ldg(reinterpret_cast<const Vec*>(vbase + slot * slot_stride));
      } else {
        kr[j] = Vec{};
        vr[j] = Vec{};
      }
    }
    float s[kUnroll][G];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      float kf[8];
      KvLoad<KV>::to_float(kr[j], kf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float d0 = 0.0f;
#pragma unroll
        for (int d = 0; d < 8; ++d) d0 = fmaf(q[g][d], kf[d], d0);
        s[j][g] = d0;
      }
    }
    // Sum the partial dots over the virtual warp's lanes (aligned groups).
#pragma unroll
    for (int off = kLanesPerKey / 2; off > 0; off >>= 1)
#pragma unroll
      for (int j = 0; j < kUnroll; ++j)
#pragma unroll
        for (int g = 0; g < G; ++g) s[j][g] += __shfl_xor_sync(0xffffffffu, s[j][g], off);
    if (capped) {
#pragma unroll
      for (int j = 0; j < kUnroll; ++j)
#pragma unroll
        for (int g = 0; g < G; ++g) s[j][g] = a.softcap * tanhf(s[j][g] * inv_cap);
    }
    float vf[kUnroll][8];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) KvLoad<KV>::to_float(vr[j], vf[j]);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mx = m[g];
#pragma unroll
      for (int j = 0; j < kUnroll; ++j)
        if (valid[j]) mx = fmaxf(mx, s[j][g]);
      const float c = __expf(m[g] - mx);  // 0 when m was the -FLT_MAX start
      l[g] *= c;
#pragma unroll
      for (int d = 0; d < 8; ++d) acc[g][d] *= c;
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        const float p = valid[j] ? __expf(s[j][g] - mx) : 0.0f;
        l[g] += p;
#pragma unroll
        for (int d = 0; d < 8; ++d) acc[g][d] = fmaf(p, vf[j][d], acc[g][d]);
      }
      m[g] = mx;
    }
  }

  // Merge the virtual warps. A virtual warp that saw no key has l = 0 and
  // m = -FLT_MAX, so its weight below is 0 (or its l and acc are 0).
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (sub == 0) {
      s_m[gv][g] = m[g];
      s_l[gv][g] = l[g];
    }
    if (active) {
      float4* dst = reinterpret_cast<float4*>(&s_acc[gv][g][sub * 8]);
      dst[0] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
      dst[1] = make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
    }
  }
  __syncthreads();
  bf16* out = static_cast<bf16*>(a.out);
  for (int idx = threadIdx.x; idx < ng * hd; idx += kAttnThreads) {
    const int g = idx / hd, d = idx % hd;
    float mx = -FLT_MAX;
#pragma unroll
    for (int v = 0; v < kVirtualWarps; ++v) mx = fmaxf(mx, s_m[v][g]);
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int v = 0; v < kVirtualWarps; ++v) {
      const float w = __expf(s_m[v][g] - mx);
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
          __float2bfloat16(sum > 0.0f ? (kFp8 ? o / sum * v_scale : o / sum) : 0.0f);
    }
  }
  if (n_parts == 1) return;

  // Split keys: the partition that finishes last merges the n_parts partials
  // of its (token, heads) into the output and resets their counter to 0 for
  // the next launch (so a recorded step needs no reset). The fences make
  // every block's partials visible before its arrival is counted, and the
  // last block's reads come after all arrivals (__ldcg: from L2). Merge: a
  // warp per head turns the partitions' (max, sum) into weights in shared
  // memory, then every output element sums its weighted partials (loads of
  // several partitions in flight at once).
  __shared__ bool s_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t* counter = a.partition_counters + static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y;
    s_last = atomicAdd(counter, 1) == n_parts - 1;
    if (s_last) *counter = 0;
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  float* s_w = &s_acc[0][0][0];  // [G][n_parts] weights (the virtual warps' sums are spent)
  __shared__ float s_inv[G];
  static_assert(kVirtualWarps * kCap >= kMaxAttnPartitions, "merge weights fit in s_acc");
  for (int g = warp; g < ng; g += kAttnWarps) {
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
      w[p] = __expf(w[p] - mx);
      sum = fmaf(w[p], __ldcg(a.partial_ml + 2 * (p0 + p) + 1), sum);
    }
    sum = warp_sum(sum);
    if (lane == 0) s_inv[g] = sum > 0.0f ? 1.0f / sum : 0.0f;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < ng * hd; idx += kAttnThreads) {
    const int g = idx / hd, d = idx % hd;
    const float* acc_p = a.partial_acc + (part_base + head0 + g) * a.num_partitions * hd + d;
    const float* w = s_w + g * n_parts;
    float o = 0.0f;
    int p = 0;
    for (; p + 4 <= n_parts; p += 4) {
      const float a0 = __ldcg(acc_p + p * hd), a1 = __ldcg(acc_p + (p + 1) * hd);
      const float a2 = __ldcg(acc_p + (p + 2) * hd), a3 = __ldcg(acc_p + (p + 3) * hd);
      o = fmaf(w[p], a0, o);
      o = fmaf(w[p + 1], a1, o);
      o = fmaf(w[p + 2], a2, o);
      o = fmaf(w[p + 3], a3, o);
    }
    for (; p < n_parts; ++p) o = fmaf(w[p], __ldcg(acc_p + p * hd), o);
    out[(row_base + head0 + g) * hd + d] =
        __float2bfloat16(kFp8 ? o * s_inv[g] * v_scale : o * s_inv[g]);
  }
}

template <int HD, class KV>
void launch_paged_attention_kv(const PagedAttentionArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>(a.num_kv_heads * a.head_chunks),
                  static_cast<unsigned>(a.num_partitions));
  switch (a.heads_per_block) {
    case 1:
      paged_attention_kernel<HD, 1, KV><<<grid, kAttnThreads, 0, stream>>>(a);
      break;
    case 2:
      paged_attention_kernel<HD, 2, KV><<<grid, kAttnThreads, 0, stream>>>(a);
      break;
    case 4:
      paged_attention_kernel<HD, 4, KV><<<grid, kAttnThreads, 0, stream>>>(a);
      break;
    default:
      paged_attention_kernel<HD, 8, KV><<<grid, kAttnThreads, 0, stream>>>(a);
      break;
  }
}

// bf16 caches (paged_attention_hd*.cu) and FP8 ones (paged_attention_fp8_hd*.cu).
template <int HD>
void launch_paged_attention_hd(const PagedAttentionArgs& a, cudaStream_t stream) {
  launch_paged_attention_kv<HD, bf16>(a, stream);
}
template <int HD>
void launch_paged_attention_fp8_hd(const PagedAttentionArgs& a, cudaStream_t stream) {
  launch_paged_attention_kv<HD, uint8_t>(a, stream);
}

}  // namespace loom::cuda
