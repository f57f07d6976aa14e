// Paged attention kernel, one template per (head size HD, query heads per
// block G, cache element KV), instantiated in paged_attention_hd*.cu. A CUDA
// block serves one query token, G query heads sharing one kv head, and one
// partition of the token's keys. Its 4 warps are cut into "virtual warps" of
// kLanes lanes (HD/8 rounded up to a power of two); each active lane holds 8
// consecutive dims and each virtual warp walks its own share of the keys with
// its own online softmax (no block-wide syncs in the loop). Lanes past the
// head's last dims (HD 48, 80, 96, 112, 160, 192...) hold zeros. HD == 0 is
// the runtime-sized path for uncommon sizes: the head size is a.head_dim (a
// multiple of 8, at most 256) on 32 lanes per key.
//
// Bandwidth: the keys are walked in tiles (kStageKeys keys per virtual warp)
// that cp.async copies into a ring of shared-memory stages (kAttnRingBytes),
// so all but one tile are in flight while one is used. Every lane copies exactly
// the 8 dims of the keys it later reads (16 bytes of bf16, 8 of FP8), so its
// own cp.async.wait_group is all the ordering it needs; keys past the
// partition and idle lanes are zero-filled. Block-table entries are loaded a
// tile ahead of their copies. Scores are kept in log2 units (q carries
// log2 e), so a softmax weight is one ex2 instruction.
//
// Handles prefill chunks with cached prefixes and decodes alike: token t of
// sequence s sits at position ctx - new + j and sees keys (pos - window,
// pos]. With a.token_index, block x serves token token_index[x] (its partials
// sit at row x). Invariant: the loop bounds are the same for the whole block,
// so every lane reaches every shuffle. KV is the cache's element type: bf16,
// or uint8_t for FP8 E4M3 (exact as floats); the KV head's scales fold into q
// (k_scale) and the output (v_scale). FP8 caches at head sizes 64, 128 and
// 256 take the tensor-core kernel instead (paged_attention_mma.cuh).
#pragma once

#include <cfloat>

#include "backend/cuda/kernels/attention/paged_attention_common.cuh"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/fp8/fp8.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/launch.cuh"

namespace loom::cuda {

constexpr int kAttnWarps = 4;
constexpr int kAttnThreads = kAttnWarps * 32;
constexpr int kAttnMaxHeadDim = 256;

// Dims a block holds per head (HD, or the runtime path's maximum) and the
// lanes per key: the power of two covering kCap / 8.
template <int HD>
struct AttnShape {
  static constexpr int kCap = HD > 0 ? HD : kAttnMaxHeadDim;
  static constexpr int kLanes = kCap <= 16    ? 2
                                : kCap <= 32  ? 4
                                : kCap <= 64  ? 8
                                : kCap <= 128 ? 16
                                              : 32;
  static_assert(kCap % 8 == 0 && kCap <= kAttnMaxHeadDim, "head size");
};

// 8 cached values of a lane: one 16-byte vector of bf16, or 8 bytes of FP8.
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

// Keys per virtual warp in a tile: 2 (a tile is then 8 KB of K and V per
// block for bf16, 4 KB for FP8), or 4 for FP8 caches with 4 heads per block
// on 16 lanes, so each lane owns one (key, head) score of the tile
// (kOwnScores below) in an 8 KB tile.
template <int HD, int G, class KV>
__host__ __device__ constexpr int attn_stage_keys() {
  return sizeof(KV) == 1 && G == 4 && AttnShape<HD>::kLanes == 16 ? 4 : 2;
}
// Bytes of the ring of tiles: 5 bf16 tiles or 5-10 FP8 ones, so a block has
// 32-36 KB of loads in flight while it works on one tile.
constexpr int kAttnRingBytes = 40960;

// Blocks per SM the kernel's registers are sized for: 4 up to 4 heads per
// block, 3 for 8 heads where the lanes share the softmax (kOwnScores below;
// 168 registers without spills), else what 8 heads need (2 per SM).
template <int HD, int G, class KV>
constexpr int attn_min_blocks() {
  return G < 8 ? 4 : AttnShape<HD>::kLanes == attn_stage_keys<HD, G, KV>() * G ? 3 : 1;
}

template <int HD, int G, class KV>
__global__ void __launch_bounds__(kAttnThreads, (attn_min_blocks<HD, G, KV>()))
    paged_attention_kernel(const PagedAttentionArgs a) {
  pdl_trigger();  // the GEMV after this one may start loading its weights
  constexpr bool kFp8 = sizeof(KV) == 1;
  using Vec = typename KvLoad<KV>::Vec;
  constexpr int kCap = AttnShape<HD>::kCap;
  constexpr int kLanesPerKey = AttnShape<HD>::kLanes;
  constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  constexpr int kVirtualWarps = kAttnWarps * kKeysPerWarp;
  constexpr int kStageKeys = attn_stage_keys<HD, G, KV>();  // keys per virtual warp and tile
  constexpr int kAttnStages =                               // tiles in the ring
      kAttnRingBytes / (kStageKeys * 2 * kAttnThreads * static_cast<int>(sizeof(Vec)));
  static_assert(kAttnStages >= 3, "a ring of at least 3 tiles");
  constexpr int kTileKeys = kVirtualWarps * kStageKeys;  // keys per block and tile
  static_assert(kLanesPerKey >= 1 && kLanesPerKey <= 32 && 32 % kLanesPerKey == 0, "head_dim");
  // One score per lane (head size 128 with 8 heads, or 4 over FP8; 64 with
  // 4): the lanes of a key own one (key slot, head) score each and share the
  // softmax work instead of all repeating it; m_own/l_own then replace m/l.
  constexpr bool kOwnScores = kLanesPerKey == kStageKeys * G && G >= 4;
  const int hd = HD > 0 ? HD : a.head_dim;  // dims per head

  // The ring of K/V tiles ([stage][key][K, V][thread]: each thread reads back
  // only its own vectors, conflict-free) while the keys are walked, then the
  // virtual warps' accumulators (the same bytes).
  constexpr int kRingBytes =
      kAttnStages * kStageKeys * 2 * kAttnThreads * static_cast<int>(sizeof(Vec));
  constexpr int kAccBytes = kVirtualWarps * G * kCap * static_cast<int>(sizeof(float));
  __shared__ __align__(16) unsigned char s_raw[kRingBytes > kAccBytes ? kRingBytes : kAccBytes];
  auto ring = reinterpret_cast<Vec(*)[kStageKeys][2][kAttnThreads]>(s_raw);
  auto s_acc = reinterpret_cast<float(*)[G][kCap]>(s_raw);
  __shared__ float s_m[kVirtualWarps][G];
  __shared__ float s_l[kVirtualWarps][G];

  const int tb = static_cast<int>(a.heads_first ? blockIdx.y : blockIdx.x);  // token slot
  const int hb = static_cast<int>(a.heads_first ? blockIdx.x : blockIdx.y);  // kv head chunk
  const int tok = a.token_index ? a.token_index[tb] : tb;
  const int kv_head = hb / a.head_chunks;
  const int chunk = hb % a.head_chunks;
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
  const int n_parts =
      hi > lo ? min((hi - lo + a.partition_keys - 1) / a.partition_keys, a.num_partitions) : 0;
  if (static_cast<int>(blockIdx.z) >= n_parts) return;
  const int part_lo = lo + static_cast<int>(blockIdx.z) * a.partition_keys;
  const int part_hi = min(hi, part_lo + a.partition_keys);
  const int64_t row_base = static_cast<int64_t>(tok) * a.num_heads;  // rows of q and out
  const int64_t part_base = static_cast<int64_t>(tb) * a.num_heads;  // rows of the partials

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int vw = lane / kLanesPerKey, sub = lane % kLanesPerKey;
  const int gv = warp * kKeysPerWarp + vw;
  const bool active = sub * 8 < hd;  // this lane holds dims of the head

  // q (pre-scaled by log2 e, with the K scale of an FP8 cache) for this lane's 8 dims of each head.
  const float q_scale = (kFp8 ? a.scale * a.k_scale[kv_head] : a.scale) * kLog2e;
  const float v_scale = kFp8 ? a.v_scale[kv_head] : 1.0f;
  float q[G][8];
  const bf16* qs = static_cast<const bf16*>(a.q);
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g < ng && active) {
      bf16x8_to_float(*reinterpret_cast<const uint4*>(qs + (row_base + head0 + g) * hd + sub * 8),
                      q[g]);
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
  float m_own = -FLT_MAX, l_own = 0.0f;    // kOwnScores: head sub % G's running max, partial sum
  const int vw_lane0 = vw * kLanesPerKey;  // the warp lane of this virtual warp's sub 0

  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;
  const int64_t slot_stride = static_cast<int64_t>(a.num_kv_heads) * hd;  // elements per cache slot
  const KV* kbase = static_cast<const KV*>(a.k_cache) + kv_head * hd + sub * 8;
  const KV* vbase = static_cast<const KV*>(a.v_cache) + kv_head * hd + sub * 8;
  const bool capped = a.softcap > 0.0f;
  const float cap = a.softcap * kLog2e;  // the softcap in log2 units
  const float inv_cap = capped ? 1.0f / cap : 0.0f;
  const int bs = a.block_size, shift = a.block_shift;

  // Tile u holds keys part_lo + u * kTileKeys + [0, kTileKeys); this lane's
  // j-th key of it is key_of(u, j). Block-table entries are loaded a tile
  // ahead of the copies that need them (blk: those of the next tile to copy).
  const int n_tiles = (part_hi - part_lo + kTileKeys - 1) / kTileKeys;
  auto key_of = [&](int u, int j) { return part_lo + u * kTileKeys + j * kVirtualWarps + gv; };
  auto load_table = [&](int u, int32_t(&entries)[kStageKeys]) {
#pragma unroll
    for (int j = 0; j < kStageKeys; ++j) {
      const int key = key_of(u, j);
      entries[j] = key < part_hi ? __ldg(table + (shift >= 0 ? key >> shift : key / bs)) : 0;
    }
  };
  auto copy_tile = [&](int u, const int32_t(&entries)[kStageKeys]) {
    auto& stage = ring[u % kAttnStages];
#pragma unroll
    for (int j = 0; j < kStageKeys; ++j) {
      const int key = key_of(u, j);
      const bool fill = active && key < part_hi;
      const int in_block = shift >= 0 ? key & (bs - 1) : key % bs;
      const int64_t off =
          fill ? (static_cast<int64_t>(entries[j]) * bs + in_block) * slot_stride : 0;
      attn_copy_async(&stage[j][0][threadIdx.x], kbase + off, fill, a.l2_prefetch);
      attn_copy_async(&stage[j][1][threadIdx.x], vbase + off, fill, a.l2_prefetch);
    }
  };

  // Prologue: tiles 0 .. kAttnStages - 2 in flight, one commit group each
  // (empty past the last tile, so the wait count below holds); their table
  // entries are all loaded first.
  int32_t blk[kStageKeys];
  {
    int32_t first[kAttnStages][kStageKeys];
#pragma unroll
    for (int u = 0; u < kAttnStages; ++u)
      if (u < n_tiles) load_table(u, first[u]);
#pragma unroll
    for (int u = 0; u < kAttnStages - 1; ++u) {
      if (u < n_tiles) copy_tile(u, first[u]);
      cp_async_commit();
    }
#pragma unroll
    for (int j = 0; j < kStageKeys; ++j) blk[j] = first[kAttnStages - 1][j];
  }

  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<kAttnStages - 2>();  // this thread's copies of tile t landed
    // Refill the stage tile t - 1 used (read by this thread only, above).
    const int u = t + kAttnStages - 1;
    if (u < n_tiles) {
      copy_tile(u, blk);
      if (u + 1 < n_tiles) load_table(u + 1, blk);
    }
    cp_async_commit();

    const auto& stage = ring[t % kAttnStages];
    bool valid[kStageKeys];
    float s[kStageKeys][G];
#pragma unroll
    for (int j = 0; j < kStageKeys; ++j) {
      valid[j] = key_of(t, j) < part_hi;  // the same for all lanes of the virtual warp
      float kf[8];
      KvLoad<KV>::to_float(stage[j][0][threadIdx.x], kf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float d0 = 0.0f;
#pragma unroll
        for (int d = 0; d < 8; ++d) d0 = fmaf(q[g][d], kf[d], d0);
        s[j][g] = d0;
      }
    }
    if constexpr (kOwnScores) {
      // Reduce-scatter the partial dots over the virtual warp's lanes: at
      // each step a lane keeps the half of its values whose index bit `off`
      // matches its own and adds its partner's copy of them, so lane `sub`
      // ends with the full score of index sub = key slot sub / G, head
      // sub % G (15 shuffles for 16 scores, not 64).
      float v[kStageKeys * G];
#pragma unroll
      for (int j = 0; j < kStageKeys; ++j)
#pragma unroll
        for (int g = 0; g < G; ++g) v[j * G + g] = s[j][g];
      constexpr int kLevels = kLanesPerKey == 32   ? 5
                              : kLanesPerKey == 16 ? 4
                              : kLanesPerKey == 8  ? 3
                                                   : 2;
#pragma unroll
      for (int level = 0; level < kLevels; ++level) {
        const int off = kLanesPerKey >> (level + 1);
        const bool upper = (sub & off) != 0;
#pragma unroll
        for (int k = 0; k < kStageKeys * G; ++k) {
          if (k < off) {
            const float send = upper ? v[k] : v[k + off];
            const float keep = upper ? v[k + off] : v[k];
            v[k] = keep + __shfl_xor_sync(0xffffffffu, send, off);
          }
        }
      }
      float score = v[0];
      if (capped) score = cap * tanhf(score * inv_cap);
      const bool own_valid = key_of(t, sub / G) < part_hi;
      // The tile's max of this lane's head: over the lanes of the same head.
      float mx = own_valid ? score : -FLT_MAX;
#pragma unroll
      for (int off = G; off < kLanesPerKey; off <<= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      // Rarely (the running max of some head grew): rescale every lane's
      // accumulators by their heads' factors, held by lanes vw_lane0 + g.
      const bool grew = mx > m_own;
      if (__any_sync(0xffffffffu, grew)) {
        const float c = grew ? attn_exp2(m_own - mx) : 1.0f;  // 0 from the -FLT_MAX start
        if (grew) {
          l_own *= c;
          m_own = mx;
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const float cg = __shfl_sync(0xffffffffu, c, vw_lane0 + g);
#pragma unroll
          for (int d = 0; d < 8; ++d) acc[g][d] *= cg;
        }
      }
      const float p = own_valid ? attn_exp2(score - m_own) : 0.0f;
      l_own += p;  // this lane's key slot only: summed over the head's lanes at the end
#pragma unroll
      for (int j = 0; j < kStageKeys; ++j) {
        float vf[8];
        KvLoad<KV>::to_float(stage[j][1][threadIdx.x], vf);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const float pg = __shfl_sync(0xffffffffu, p, vw_lane0 + j * G + g);
#pragma unroll
          for (int d = 0; d < 8; ++d) acc[g][d] = fmaf(pg, vf[d], acc[g][d]);
        }
      }
    } else {
      // Sum the partial dots over the virtual warp's lanes (aligned groups).
#pragma unroll
      for (int off = kLanesPerKey / 2; off > 0; off >>= 1)
#pragma unroll
        for (int j = 0; j < kStageKeys; ++j)
#pragma unroll
          for (int g = 0; g < G; ++g) s[j][g] += __shfl_xor_sync(0xffffffffu, s[j][g], off);
      if (capped) {
#pragma unroll
        for (int j = 0; j < kStageKeys; ++j)
#pragma unroll
          for (int g = 0; g < G; ++g) s[j][g] = cap * tanhf(s[j][g] * inv_cap);
      }
      // Softmax weights in place of the scores. The running max moves only
      // when a key beats it (a handful of times per partition once the first
      // keys are seen): only then is what was summed so far rescaled.
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float mx = m[g];
#pragma unroll
        for (int j = 0; j < kStageKeys; ++j)
          if (valid[j]) mx = fmaxf(mx, s[j][g]);
        if (mx > m[g]) {
          const float c = attn_exp2(m[g] - mx);  // 0 when m was the -FLT_MAX start
          l[g] *= c;
#pragma unroll
          for (int d = 0; d < 8; ++d) acc[g][d] *= c;
          m[g] = mx;
        }
#pragma unroll
        for (int j = 0; j < kStageKeys; ++j) {
          s[j][g] = valid[j] ? attn_exp2(s[j][g] - mx) : 0.0f;
          l[g] += s[j][g];
        }
      }
#pragma unroll
      for (int j = 0; j < kStageKeys; ++j) {
        float vf[8];
        KvLoad<KV>::to_float(stage[j][1][threadIdx.x], vf);
#pragma unroll
        for (int g = 0; g < G; ++g)
#pragma unroll
          for (int d = 0; d < 8; ++d) acc[g][d] = fmaf(s[j][g], vf[d], acc[g][d]);
      }
    }
  }
  cp_async_wait<0>();  // only empty groups are left; the ring becomes s_acc
  __syncthreads();

  // Merge the virtual warps. A virtual warp that saw no key has l = 0 and
  // m = -FLT_MAX, so its weight below is 0 (or its l and acc are 0).
  if constexpr (kOwnScores) {
#pragma unroll
    for (int off = G; off < kLanesPerKey; off <<= 1)
      l_own += __shfl_xor_sync(0xffffffffu, l_own, off);
    if (sub < G) {
      s_m[gv][sub] = m_own;
      s_l[gv][sub] = l_own;
    }
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (sub == 0 && !kOwnScores) {
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
  paged_attention_finish<G, kVirtualWarps, kCap, kAttnThreads>(
      a, s_m, s_l, s_acc, ng, hd, head0, n_parts, row_base, part_base, v_scale);
}

// The kernel for G heads per block (1, 2, 4, else 8).
template <int HD, class KV>
auto paged_attention_kernel_for(int g) {
  switch (g) {
    case 1:
      return paged_attention_kernel<HD, 1, KV>;
    case 2:
      return paged_attention_kernel<HD, 2, KV>;
    case 4:
      return paged_attention_kernel<HD, 4, KV>;
    default:
      return paged_attention_kernel<HD, 8, KV>;
  }
}

template <int HD, class KV>
void launch_paged_attention_kv(const PagedAttentionArgs& a, cudaStream_t stream) {
  const dim3 grid = paged_attention_grid(a);
  paged_attention_kernel_for<HD, KV>(a.heads_per_block)<<<grid, kAttnThreads, 0, stream>>>(a);
}

// Blocks of the kernel for `heads_per_block` that one SM holds at once (0 if
// the query fails).
template <int HD, class KV>
int paged_attention_blocks_per_sm_kv(int heads_per_block) {
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocks, paged_attention_kernel_for<HD, KV>(heads_per_block), kAttnThreads, 0) !=
      cudaSuccess)
    return 0;
  return blocks;
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
template <int HD>
int paged_attention_blocks_per_sm_hd(int heads_per_block) {
  return paged_attention_blocks_per_sm_kv<HD, bf16>(heads_per_block);
}
template <int HD>
int paged_attention_blocks_per_sm_fp8_hd(int heads_per_block) {
  return paged_attention_blocks_per_sm_kv<HD, uint8_t>(heads_per_block);
}

}  // namespace loom::cuda
