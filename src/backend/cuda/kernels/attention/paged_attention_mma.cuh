// Decode attention on tensor cores over FP8 E4M3 caches (KV = uint8_t) and
// bf16 ones (KV = bf16), head sizes 64, 128 and 256 (instantiated in
// paged_attention_fp8_hd*.cu and paged_attention_mma_hd*.cu): the same grid,
// key partitions, block tables, sliding window, softcap and merge as the
// CUDA-core kernel (paged_attention.cuh, which serves the other head sizes).
// That kernel spends 2 x head_dim FMAs per key and query head (besides any
// dequantisation), which at GQA 4-8, not the memory, sets its pace. Here the
// block's G <= 8 query heads are the N = 8 columns of mma.m16n8k16 (f32
// accumulate) and each warp takes 16 keys at a time with its own online
// softmax (the 4 warps are merged at the end, as the virtual warps are there):
//   S^T (16 keys x 8 heads)    = K (16 keys x head_dim) . Q^T      head_dim/16 mmas
//   O^T (head_dim x 8 heads)  += V^T (head_dim x 16 keys) . P^T    head_dim/16 mmas
// FP8: the cache bytes go from shared memory into f16 fragments with
// cvt.rn.f16x2.e4m3x2 (two exact values per instruction); the KV head's K
// scale multiplies the f32 scores, its V scale the output. q is converted to
// f16 unscaled (bf16 -> f16 is exact for |q| in [2^-14, 65504]). bf16: K, V
// and q enter bf16 mmas as they are (products exact in f32), and P^T as two
// bf16 terms, hi = bf16(p) and lo = bf16(p - hi), each through the mma
// (O^T += V^T hi + V^T lo), so the weights keep ~16 significant bits, near
// the CUDA-core kernel's f32.
//
// Fragments (PTX ISA, m16n8k16 .f16 / .bf16; g = lane / 4, c = lane % 4): A 16x16:
// reg0 = (row g, cols 2c, 2c+1), reg1 = (row g+8, cols 2c, 2c+1), reg2 = (row
// g, cols 2c+8, 2c+9), reg3 = (row g+8, cols 2c+8, 2c+9); B 16x8: reg0 = (rows
// 2c, 2c+1, col g), reg1 = (rows 2c+8, 2c+9, col g); C 16x8: c0, c1 = (row g,
// cols 2c, 2c+1), c2, c3 = (row g+8, ...); the lower index in the low half.
// A dot product may sum its terms in any order and the output rows may be
// any dims, so each lane's fragments are made of contiguous cache bytes:
// - S^T: row r = key r of the warp's 16; k-step ks covers, in lane (g, c),
//   4 dims D0..D3 of 16-byte chunk c + 4 (ks / S) of the key's row, S = 4
//   k-steps per chunk (FP8: dims 4 (ks % 4) + 0..3 of the chunk's 16, one
//   32-bit word) or 2 (bf16: dims 4 (ks % 2) + 0..3 of its 8, two words):
//   cols 2c, 2c+1 are D0, D1 and cols 2c+8, 2c+9 are D2, D3. A = those
//   dims of keys g and g+8, B = q of head g at the same dims. So a lane
//   reads, per key, kKChunks 16-byte chunks c + 4i.
// - O^T: the k index (keys) runs over keys c, c+8, c+4, c+12 for cols 2c,
//   2c+1, 2c+8, 2c+9; lane (g, c) reads V of keys c + 4j (slot j = 0..3),
//   HD / 8 dims of each ("local" dims e; 8- or 16-byte vectors v at bytes
//   size (g + 8v) of the row), and m-tile mt's rows g, g+8 are its local
//   dims 2mt, 2mt+1: A regs = the values of (slot 0, slot 2) and (slot 1,
//   slot 3) at those dims, interleaved by prmt (before the cvt, FP8).
// - P^T (B of O^T): S^T's accumulators hold key g / g+8 x heads 2c, 2c+1;
//   lane (g, c) needs head g of keys c, c+8 (lane 4c + g/2 holds them,
//   packed) and c+4, c+12 (lane 4c + 16 + g/2): 4 shuffles a tile (8 for
//   bf16's two terms). The
//   running max and sum of a head live in the lanes holding its columns, so
//   rescaling O^T needs no exchange.
//
// Copies: a warp's 16 keys per tile go through a ring of kStages tiles in
// dynamic shared memory; keys past the partition are zero-filled and masked.
// K and V are copied by whole rows, 16-byte chunk q = 32 i + lane being
// chunk q % (HD / 16) of key q / (HD / 16), so 8 lanes fetch 128 contiguous
// bytes of a cache. (Copied as the reads want them, 2-4 keys x 16 or 32
// bytes per 8 lanes, they reach the L2 as one- or two-sector requests, and
// its tag lookups become the kernel's limit.) Both are stored [key][chunk]
// with the chunk index XORed by mma_k_swizzle / mma_v_swizzle(key), so the
// row copies and the reads hit distinct banks; lanes read what other lanes
// copied, so a warp barrier follows each cp.async wait (it also orders the
// refill of a stage after the reads of it). A lane's K and V copies are of
// the same keys, so they share its block-table entries, loaded a tile ahead
// of the copies.
#pragma once

#include <atomic>
#include <cmath>
#include <type_traits>

#include "backend/cuda/kernels/attention/paged_attention_common.cuh"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/fp8/fp8.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/launch.cuh"

namespace loom::cuda {

template <int HD, class KV>
struct MmaAttnShape {
  static_assert(HD == 64 || HD == 128 || HD == 256, "tensor-core decode attention head size");
  static_assert(sizeof(KV) == 1 || sizeof(KV) == 2, "FP8 or bf16 cache");
  static constexpr bool kFp8 = sizeof(KV) == 1;
  static constexpr int kElem = static_cast<int>(sizeof(KV));  // bytes per cached value
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpKeys = 16;                  // keys per warp and tile
  static constexpr int kTileKeys = kWarps * kWarpKeys;  // keys per block and tile
  static constexpr int kKSteps = HD / 16;               // k-steps of S^T (over dims)
  static constexpr int kMTiles = HD / 16;               // 16-dim row tiles of O^T
  static constexpr int kRowBytes = HD * kElem;          // a key's row of one cache
  static constexpr int kRowChunks = kRowBytes / 16;     // 16-byte chunks of a key's row
  static constexpr int kStepsPerChunk = 16 / (4 * kElem);    // k-steps a K chunk feeds
  static constexpr int kKChunks = kKSteps / kStepsPerChunk;  // K chunks per lane and key
  // Chunks of each cache a lane copies per tile (of as many keys: block-table entries).
  static constexpr int kEntries = kWarpKeys * kRowChunks / 32;
  static constexpr int kVBytes = HD / 8 * kElem;  // V bytes per lane and key read
  using VVec = std::conditional_t<(kVBytes >= 16), uint4, uint2>;
  static constexpr int kVVecs = kVBytes / static_cast<int>(sizeof(VVec));
  static constexpr int kVVecElems = static_cast<int>(sizeof(VVec)) / kElem;  // dims per vector
  static constexpr int kVWords = kVBytes / 4;
  // Tiles in the ring: two in flight while one is used (64 KB of loads per
  // SM at head size 128 with 4 blocks, more than the bandwidth-delay product).
  static constexpr int kStages = 3;
  static constexpr int kWarpStageBytes = kWarpKeys * kRowBytes * 2;  // K and V
  static constexpr int kSmemBytes = kStages * kWarps * kWarpStageBytes;
  // Blocks per SM the rings allow: 4 of 48 KB (FP8 up to head size 128,
  // bf16 at 64), 2 of 96 KB, 1 of 192 KB (bf16 at 256).
  static constexpr int kMinBlocks = kSmemBytes <= 49152 ? 4 : kSmemBytes <= 98304 ? 2 : 1;
  static_assert(kWarps * 8 * HD * 4 <= kSmemBytes, "the warps' accumulators fit in the ring");
};

// A warp's share of one tile: K and V of its 16 keys by rows, chunk e of key
// r at k[r][e ^ mma_k_swizzle<HD, KV>(r)] and v[r][e ^ mma_v_swizzle<HD, KV>(r)].
template <int HD, class KV>
struct MmaAttnStage {
  using Shape = MmaAttnShape<HD, KV>;
  uint4 k[Shape::kWarpKeys][Shape::kRowChunks];
  uint4 v[Shape::kWarpKeys][Shape::kRowChunks];
};

// The XOR on K's chunk index for key r of a tile. Reads: 8 lanes take keys
// r, r + 1 (r even) at the same chunks c + 4i, c = 0..3; where a row spans
// all banks (128 bytes or more: FP8 at head size >= 128, bf16), odd keys
// move by 4 chunks (the other half of the banks); FP8's 64-byte rows at 64
// lie in different halves already. Row copies: 8 lanes take 8 consecutive
// chunks, which an XOR below 8 keeps apart.
template <int HD, class KV>
__device__ __forceinline__ int mma_k_swizzle(int r) {
  return MmaAttnShape<HD, KV>::kRowBytes >= 128 ? 4 * (r % 2) : 0;
}

// The XOR on V's chunk index for key r of a tile. Reads: 8 lanes (16-byte
// vectors; 16 lanes for 8-byte ones at head size 64) take keys c + 4j, c =
// 0..3, at chunks g, g + 1 (head size 64: half chunks of chunks 0, 1), so
// keys of different c must land on different banks; row copies: 8 lanes take
// 8 consecutive chunks of one key (two keys at head size 64, whose 64-byte
// rows lie in the two halves of the banks), which any XOR below 8 keeps
// apart. Rows of 128 bytes or more (FP8 at head size >= 128, bf16): a key's
// row spans all banks, so chunks shift by 2 (r % 4); FP8 at 64: keys r, r +
// 1 share the banks' halves by parity, so the pairs shift by 2 ((r / 2) % 2).
template <int HD, class KV>
__device__ __forceinline__ int mma_v_swizzle(int r) {
  return MmaAttnShape<HD, KV>::kRowBytes >= 128 ? 2 * (r % 4) : 2 * ((r / 2) % 2);
}

namespace mma_attn {

// c += A (16x16 f16) * B (16x8 f16), f32 accumulators.
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The cache's mma: f16 for FP8 (converted), bf16 for bf16 (common.cuh).
template <class KV>
__device__ __forceinline__ void mma_kv(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
  if constexpr (sizeof(KV) == 1)
    mma_f16(c, a, b0, b1);
  else
    mma_bf16(c, a, b0, b1);
}

__device__ __forceinline__ uint32_t half2_bits(__half2 h) {
  return *reinterpret_cast<const uint32_t*>(&h);
}

// A bf16x2 word as f16x2.
__device__ __forceinline__ uint32_t bf16x2_to_half2(uint32_t w) {
  return half2_bits(__floats2half2_rn(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u)));
}

// The low and high FP8 pairs of a word as f16x2.
__device__ __forceinline__ uint32_t fp8_lo(uint32_t w) {
  return fp8x2_to_half2_bits(static_cast<uint16_t>(w & 0xffffu));
}
__device__ __forceinline__ uint32_t fp8_hi(uint32_t w) {
  return fp8x2_to_half2_bits(static_cast<uint16_t>(w >> 16));
}

}  // namespace mma_attn

template <int HD, int G, class KV>
__global__ void __launch_bounds__(MmaAttnShape<HD, KV>::kThreads, MmaAttnShape<HD, KV>::kMinBlocks)
    paged_attention_mma_kernel(const PagedAttentionArgs a) {
  pdl_trigger();  // the GEMV after this one may start loading its weights
  using Shape = MmaAttnShape<HD, KV>;
  using Stage = MmaAttnStage<HD, KV>;
  using VVec = typename Shape::VVec;
  using mma_attn::fp8_hi;
  using mma_attn::fp8_lo;
  constexpr bool kFp8 = Shape::kFp8;
  constexpr int kWarps = Shape::kWarps, kStages = Shape::kStages, kTileKeys = Shape::kTileKeys;
  constexpr int kKChunks = Shape::kKChunks, kVVecs = Shape::kVVecs, kMTiles = Shape::kMTiles;
  constexpr int kVWords = Shape::kVWords, kRowChunks = Shape::kRowChunks;
  constexpr int kEntries = Shape::kEntries, kSteps = Shape::kStepsPerChunk;
  constexpr int kVecBytes = static_cast<int>(sizeof(VVec)), kVecElems = Shape::kVVecElems;
  static_assert(G >= 1 && G <= 8, "the heads of a block are the mma's 8 columns");
  static_assert(sizeof(Stage) == Shape::kWarpStageBytes, "stage layout");

  // The ring [stage][warp] while the keys are walked, then the warps'
  // accumulators [warp][head][dim] (the same bytes).
  extern __shared__ __align__(16) unsigned char smem[];
  auto ring = reinterpret_cast<Stage(*)[kWarps]>(smem);
  auto s_acc = reinterpret_cast<float(*)[G][HD]>(smem);
  __shared__ float s_m[kWarps][G];
  __shared__ float s_l[kWarps][G];

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
  // This token's partitions, as in the CUDA-core kernel.
  const int n_parts =
      hi > lo ? min((hi - lo + a.partition_keys - 1) / a.partition_keys, a.num_partitions) : 0;
  if (static_cast<int>(blockIdx.z) >= n_parts) return;
  const int part_lo = lo + static_cast<int>(blockIdx.z) * a.partition_keys;
  const int part_hi = min(hi, part_lo + a.partition_keys);
  const int64_t row_base = static_cast<int64_t>(tok) * a.num_heads;  // rows of q and out
  const int64_t part_base = static_cast<int64_t>(tb) * a.num_heads;  // rows of the partials

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;

  // Q^T B fragments: head g (zero past the block's heads), k-step ks = S i +
  // j at dims 4j + 0..3 of K chunk c + 4i (FP8: 16 dims a chunk, q as f16;
  // bf16: 8 dims, q as it is).
  uint32_t qf[Shape::kKSteps][2];
  {
    constexpr int kChunkDims = 16 / Shape::kElem;
    const bf16* qs = static_cast<const bf16*>(a.q) + (row_base + head0 + g) * HD;
#pragma unroll
    for (int i = 0; i < kKChunks; ++i) {
      uint4 v0 = make_uint4(0, 0, 0, 0), v1 = v0;
      if (g < ng) {
        const uint4* src = reinterpret_cast<const uint4*>(qs + kChunkDims * (c + 4 * i));
        v0 = src[0];
        if constexpr (kFp8) v1 = src[1];
      }
      const uint32_t w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
      for (int j = 0; j < kSteps; ++j) {
        if constexpr (kFp8) {
          qf[kSteps * i + j][0] = mma_attn::bf16x2_to_half2(w[2 * j]);
          qf[kSteps * i + j][1] = mma_attn::bf16x2_to_half2(w[2 * j + 1]);
        } else {
          qf[kSteps * i + j][0] = w[2 * j];
          qf[kSteps * i + j][1] = w[2 * j + 1];
        }
      }
    }
  }
  const float k_scale = kFp8 ? a.k_scale[kv_head] : 1.0f;
  const float v_scale = kFp8 ? a.v_scale[kv_head] : 1.0f;
  const bool capped = a.softcap > 0.0f;
  const float scale_log2 = a.scale * k_scale * kLog2e;  // logits of the stored K, log2 units
  const float cap_log2 = a.softcap * kLog2e;
  const float scale_over_cap = capped ? a.scale * k_scale / a.softcap : 0.0f;

  float o[kMTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // running max of heads 2c, 2c+1 (log2 units)
  float l[2] = {0.0f, 0.0f};            // their sums over this lane's keys
  const int src0 = 4 * c + (g >> 1), src1 = src0 + 16;  // lanes holding this lane's P^T
  const bool odd_head = (g & 1) != 0;
  const int v_sw = mma_v_swizzle<HD, KV>(c);  // = that of the keys c + 4j this lane reads V of
  const int k_sw = mma_k_swizzle<HD, KV>(g);  // = that of keys g, g + 8 (this lane's K)

  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;
  constexpr int kRowBytes = Shape::kRowBytes;
  const int64_t slot_stride = static_cast<int64_t>(a.num_kv_heads) * kRowBytes;  // bytes per slot
  const uint8_t* kbase = static_cast<const uint8_t*>(a.k_cache) + kv_head * kRowBytes;
  const uint8_t* vbase = static_cast<const uint8_t*>(a.v_cache) + kv_head * kRowBytes;
  const int bs = a.block_size, shift = a.block_shift;

  // Tile u holds keys part_lo + u * kTileKeys + [0, kTileKeys), the warp's
  // 16 from warp * 16; this lane copies chunks 32 i + lane of the K and V
  // rows: chunk copy_chunk of the warp's key row0 + i * kRowsPerCopy, key_of(u, i).
  const int n_tiles = (part_hi - part_lo + kTileKeys - 1) / kTileKeys;
  constexpr int kRowsPerCopy = 32 / kRowChunks;
  const int row0 = lane / kRowChunks, copy_chunk = lane % kRowChunks;
  auto key_of = [&](int u, int i) {
    return part_lo + u * kTileKeys + warp * 16 + row0 + i * kRowsPerCopy;
  };
  auto load_table = [&](int u, int32_t(&entries)[kEntries]) {
#pragma unroll
    for (int i = 0; i < kEntries; ++i) {
      const int key = key_of(u, i);
      entries[i] = key < part_hi ? __ldg(table + (shift >= 0 ? key >> shift : key / bs)) : 0;
    }
  };
  auto copy_tile = [&](int u, const int32_t(&entries)[kEntries]) {
    Stage& st = ring[u % kStages][warp];
#pragma unroll
    for (int i = 0; i < kEntries; ++i) {
      const int key = key_of(u, i);
      const bool fill = key < part_hi;
      const int in_block = shift >= 0 ? key & (bs - 1) : key % bs;
      const int64_t off =
          fill ? (static_cast<int64_t>(entries[i]) * bs + in_block) * slot_stride : 0;
      const int r = row0 + i * kRowsPerCopy;
      attn_copy_async(&st.k[r][copy_chunk ^ mma_k_swizzle<HD, KV>(r)],
                      kbase + off + 16 * copy_chunk, fill, a.l2_prefetch);
      attn_copy_async(&st.v[r][copy_chunk ^ mma_v_swizzle<HD, KV>(r)],
                      vbase + off + 16 * copy_chunk, fill, a.l2_prefetch);
    }
  };

  // Prologue: tiles 0 .. kStages - 2 in flight, one commit group each (empty
  // past the last tile, so the wait count below holds).
  int32_t blk[kEntries];
  {
    int32_t first[kStages][kEntries];
#pragma unroll
    for (int u = 0; u < kStages; ++u)
      if (u < n_tiles) load_table(u, first[u]);
#pragma unroll
    for (int u = 0; u < kStages - 1; ++u) {
      if (u < n_tiles) copy_tile(u, first[u]);
      cp_async_commit();
    }
#pragma unroll
    for (int i = 0; i < kEntries; ++i) blk[i] = first[kStages - 1][i];
  }

  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<kStages - 2>();  // this thread's copies of tile t landed
    __syncwarp();                  // ... and the warp's; its reads of tile t - 1 are done
    // Refill the stage tile t - 1 used.
    const int u = t + kStages - 1;
    if (u < n_tiles) {
      copy_tile(u, blk);
      if (u + 1 < n_tiles) load_table(u + 1, blk);
    }
    cp_async_commit();

    const int key0 = part_lo + t * kTileKeys + warp * 16;  // the warp's first key of the tile
    if (key0 >= part_hi) continue;                         // warp-uniform: none of its keys left
    const Stage& st = ring[t % kStages][warp];

    // S^T = K Q^T, in two accumulators (alternate k-steps) for a shorter chain.
    float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < kKChunks; ++i) {
      const uint4 k0 = st.k[g][(c + 4 * i) ^ k_sw], k1 = st.k[g + 8][(c + 4 * i) ^ k_sw];
      const uint32_t w0[4] = {k0.x, k0.y, k0.z, k0.w}, w1[4] = {k1.x, k1.y, k1.z, k1.w};
#pragma unroll
      for (int j = 0; j < kSteps; ++j) {
        uint32_t af[4];
        if constexpr (kFp8) {
          af[0] = fp8_lo(w0[j]);
          af[1] = fp8_lo(w1[j]);
          af[2] = fp8_hi(w0[j]);
          af[3] = fp8_hi(w1[j]);
        } else {
          af[0] = w0[2 * j];
          af[1] = w1[2 * j];
          af[2] = w0[2 * j + 1];
          af[3] = w1[2 * j + 1];
        }
        if (j % 2 == 0)
          mma_attn::mma_kv<KV>(sa, af, qf[kSteps * i + j][0], qf[kSteps * i + j][1]);
        else
          mma_attn::mma_kv<KV>(sb, af, qf[kSteps * i + j][0], qf[kSteps * i + j][1]);
      }
    }
    // Logits in log2 units (scale, softcap); keys past the partition masked.
    // s[0], s[1]: key g, heads 2c, 2c+1; s[2], s[3]: key g+8.
    const bool valid_lo = key0 + g < part_hi, valid_hi = key0 + g + 8 < part_hi;
    float s[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float x = sa[e] + sb[e];
      const float y = capped ? cap_log2 * tanhf(x * scale_over_cap) : x * scale_log2;
      s[e] = (e < 2 ? valid_lo : valid_hi) ? y : -INFINITY;
    }

    // Online softmax of heads 2c, 2c+1 over the lanes holding their columns
    // (same c). The running max moves rarely once the first keys are seen:
    // only then are the sums and O^T rescaled. A head with no key yet keeps
    // max -inf; its weights use base 0 (2^-inf = 0), so no inf - inf appears.
    float mx[2] = {fmaxf(m[0], fmaxf(s[0], s[2])), fmaxf(m[1], fmaxf(s[1], s[3]))};
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int off = 4; off < 32; off <<= 1)
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], off));
    const bool grew = mx[0] > m[0] || mx[1] > m[1];
    if (__any_sync(0xffffffffu, grew)) {
      float corr[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        corr[h] = mx[h] > m[h] ? attn_exp2(m[h] - mx[h]) : 1.0f;  // 0 from the -inf start
        l[h] *= corr[h];
      }
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        o[mt][0] *= corr[0];
        o[mt][1] *= corr[1];
        o[mt][2] *= corr[0];
        o[mt][3] *= corr[1];
      }
    }
    m[0] = mx[0];
    m[1] = mx[1];
    const float base0 = m[0] == -INFINITY ? 0.0f : m[0];
    const float base1 = m[1] == -INFINITY ? 0.0f : m[1];
    const float p0 = attn_exp2(s[0] - base0), p1 = attn_exp2(s[1] - base1);
    const float p2 = attn_exp2(s[2] - base0), p3 = attn_exp2(s[3] - base1);
    l[0] += p0 + p2;
    l[1] += p1 + p3;

    // P^T B fragment: head g of keys c, c+8 (reg 0) and c+4, c+12 (reg 1),
    // from the packed pairs of heads 2c (even) and 2c+1 (odd); bf16: its hi
    // terms (pb) and lo terms (pl), the same way.
    auto p_fragment = [&](uint32_t even, uint32_t odd, uint32_t& r0, uint32_t& r1) {
      const uint32_t e0 = __shfl_sync(0xffffffffu, even, src0);
      const uint32_t o0 = __shfl_sync(0xffffffffu, odd, src0);
      const uint32_t e1 = __shfl_sync(0xffffffffu, even, src1);
      const uint32_t o1 = __shfl_sync(0xffffffffu, odd, src1);
      r0 = odd_head ? o0 : e0;
      r1 = odd_head ? o1 : e1;
    };
    uint32_t pb0, pb1, pl0 = 0, pl1 = 0;
    if constexpr (kFp8) {
      p_fragment(mma_attn::half2_bits(__floats2half2_rn(p0, p2)),
                 mma_attn::half2_bits(__floats2half2_rn(p1, p3)), pb0, pb1);
    } else {
      // x, y less the hi pair's two values: the lo terms, as a bf16 pair.
      auto rest = [](uint32_t hi, float x, float y) {
        return pack_bf16x2(x - __uint_as_float(hi << 16), y - __uint_as_float(hi & 0xffff0000u));
      };
      const uint32_t he = pack_bf16x2(p0, p2), ho = pack_bf16x2(p1, p3);
      p_fragment(he, ho, pb0, pb1);
      p_fragment(rest(he, p0, p2), rest(ho, p1, p3), pl0, pl1);
    }

    // O^T += V^T P^T: m-tile mt takes local dims 2mt, 2mt+1 (FP8: bytes 2
    // (mt % 2) and + 1 of word mt / 2; bf16: the halves of word mt) of slots
    // (0, 2) and (1, 3), interleaved. Slot j's vector v is bytes kVecBytes (g
    // + 8v) of key c + 4j's row (its swizzle, v_sw, the same for every j).
    uint32_t vw[4][kVWords];
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int v = 0; v < kVVecs; ++v) {
        const int b = kVecBytes * (g + 8 * v);
        const VVec x = *reinterpret_cast<const VVec*>(
            reinterpret_cast<const unsigned char*>(&st.v[c + 4 * j][(b / 16) ^ v_sw]) + b % 16);
        if constexpr (sizeof(VVec) == 16) {
          vw[j][4 * v] = x.x;
          vw[j][4 * v + 1] = x.y;
          vw[j][4 * v + 2] = x.z;
          vw[j][4 * v + 3] = x.w;
        } else {
          vw[j][2 * v] = x.x;
          vw[j][2 * v + 1] = x.y;
        }
      }
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      if constexpr (kFp8) {
        const uint32_t sel = mt % 2 == 0 ? 0x5140u : 0x7362u;
        const uint32_t p02 = __byte_perm(vw[0][mt / 2], vw[2][mt / 2], sel);
        const uint32_t p13 = __byte_perm(vw[1][mt / 2], vw[3][mt / 2], sel);
        const uint32_t af[4] = {fp8_lo(p02), fp8_hi(p02), fp8_lo(p13), fp8_hi(p13)};
        mma_attn::mma_f16(o[mt], af, pb0, pb1);
      } else {
        const uint32_t af[4] = {
            __byte_perm(vw[0][mt], vw[2][mt], 0x5410u), __byte_perm(vw[0][mt], vw[2][mt], 0x7632u),
            __byte_perm(vw[1][mt], vw[3][mt], 0x5410u), __byte_perm(vw[1][mt], vw[3][mt], 0x7632u)};
        mma_bf16(o[mt], af, pb0, pb1);
        mma_bf16(o[mt], af, pl0, pl1);
      }
    }
  }
  cp_async_wait<0>();  // only empty groups are left; the ring becomes s_acc
  __syncthreads();

  // The warp's state: sums over the lanes of a head; heads past G are the
  // mma's unused columns.
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) l[h] += __shfl_xor_sync(0xffffffffu, l[h], off);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = 2 * c + h;
    if (head < G) {
      if (g == 0) {
        s_m[warp][head] = m[h];
        s_l[warp][head] = l[h];
      }
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        // Local dim e is value e % n of the lane's vector e / n (n values a
        // vector), at dims n (g + 8 (e / n)).
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int e = 2 * mt + r;
          const int d = kVecElems * (g + 8 * (e / kVecElems)) + e % kVecElems;
          s_acc[warp][head][d] = o[mt][2 * r + h];
        }
      }
    }
  }
  __syncthreads();
  paged_attention_finish<G, kWarps, HD, Shape::kThreads>(a, s_m, s_l, s_acc, ng, HD, head0, n_parts,
                                                         row_base, part_base, v_scale);
}

// The kernel for G heads per block (1, 2, 4, else 8).
template <int HD, class KV>
auto paged_attention_mma_kernel_for(int g) {
  switch (g) {
    case 1:
      return paged_attention_mma_kernel<HD, 1, KV>;
    case 2:
      return paged_attention_mma_kernel<HD, 2, KV>;
    case 4:
      return paged_attention_mma_kernel<HD, 4, KV>;
    default:
      return paged_attention_mma_kernel<HD, 8, KV>;
  }
}

// Raises the kernel's dynamic shared memory limit to its ring (over the
// 48 KB default past 48 KB) and prefers shared memory over L1, once per
// device (bit d of `configured`; devices >= 64 every time). False if the
// runtime refused (the error is left for cudaGetLastError).
template <int HD, int G, class KV>
bool configure_paged_attention_mma() {
  static std::atomic<uint64_t> configured{0};
  return configure_shared_memory(paged_attention_mma_kernel<HD, G, KV>,
                                 MmaAttnShape<HD, KV>::kSmemBytes, configured);
}

template <int HD, class KV>
bool configure_paged_attention_mma_for(int g) {
  switch (g) {
    case 1:
      return configure_paged_attention_mma<HD, 1, KV>();
    case 2:
      return configure_paged_attention_mma<HD, 2, KV>();
    case 4:
      return configure_paged_attention_mma<HD, 4, KV>();
    default:
      return configure_paged_attention_mma<HD, 8, KV>();
  }
}

template <int HD, class KV>
void launch_paged_attention_mma(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (!configure_paged_attention_mma_for<HD, KV>(a.heads_per_block)) return;
  const dim3 grid = paged_attention_grid(a);
  paged_attention_mma_kernel_for<HD, KV>(
      a.heads_per_block)<<<grid, MmaAttnShape<HD, KV>::kThreads, MmaAttnShape<HD, KV>::kSmemBytes,
                           stream>>>(a);
}

// Blocks of the kernel for `heads_per_block` that one SM holds at once (0 if
// the query fails).
template <int HD, class KV>
int paged_attention_blocks_per_sm_mma(int heads_per_block) {
  if (!configure_paged_attention_mma_for<HD, KV>(heads_per_block)) return 0;
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocks, paged_attention_mma_kernel_for<HD, KV>(heads_per_block),
          MmaAttnShape<HD, KV>::kThreads, MmaAttnShape<HD, KV>::kSmemBytes) != cudaSuccess)
    return 0;
  return blocks;
}

}  // namespace loom::cuda
