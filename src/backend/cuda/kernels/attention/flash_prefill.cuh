// FlashAttention-2-style paged attention for prefill tokens (flash_prefill_bf16
// in kernels.h), one template per head size HD (64, 128, 256), instantiated in
// flash_prefill_hd*.cu. Tensor cores through mma.sync m16n8k16 (bf16 in, f32
// accumulate), ldmatrix for the fragments, cp.async for the copies.
//
// A CUDA block of 4 warps serves kFlashBlockM = 64 query rows of one sequence
// and one kv head; row r of the sequence is token r / group with query head
// kv_head * group + r % group, so one K/V tile in shared memory serves every
// head of the group. Each warp owns 16 rows and keeps their online softmax
// (max, sum) and output accumulator in registers (FA2: no cross-warp
// reduction). The block walks the keys its rows see, [kv_lo, kv_hi), in tiles
// of kBlockN keys, double buffered: tile t + 1 is copied while tile t is
// multiplied, one block-wide barrier per tile. Keys are gathered one row at a
// time through the block table (a tile may span any number of cache blocks);
// keys at or past kv_hi are zero-filled, never read. Rows past the sequence's last token are
// padding: their q is zero and they are never written.
//
// Shared memory rows are HD * 2 bytes; their 16-byte chunks are XOR-swizzled
// by (row % 8), so the 8 rows an ldmatrix phase reads, and the rows a warp's
// cp.async writes, fall in different bank groups.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 .bf16; g = lane / 4, c = lane % 4):
//   A 16x16 (row-major): reg0 = (g, 2c..2c+1), reg1 = (g+8, 2c..), reg2 =
//     (g, 2c+8..), reg3 = (g+8, 2c+8..); low half = lower column.
//   B 16x8 (k x n): reg0 = (k 2c..2c+1, n g), reg1 = (k 2c+8..2c+9, n g).
//   C 16x8 f32: c0, c1 = (g, 2c..2c+1), c2, c3 = (g+8, 2c..2c+1).
//   ldmatrix .x4: lanes 8i..8i+7 give the row addresses of matrix i; lane l
//     receives row l / 4, columns 2 (l % 4) .. +1 of matrix i in reg i (with
//     .trans: row 2 (l % 4) .. +1, column l / 4).
// So S = Q K^T takes A from Q rows (non-transposed) and B from K rows
// (non-transposed: a K row is a column of K^T); O += P V takes A from the S
// accumulators repacked to bf16 and B from V rows with .trans.
//
// FP8 E4M3 caches (kFp8): tiles are copied as FP8 into a plain staging area
// (double buffered), then converted, exactly, into one bf16 K/V tile pair the
// mmas read as above; two barriers per tile. The KV head's K scale folds into
// the softmax scale and its V scale into the final normalisation.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/fp8/fp8.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/launch.cuh"

namespace loom::cuda {

// Tile shape per head size. BLOCK_M 64 (4 warps x 16 rows) for all sizes, so
// the work list depends only on the group size. BLOCK_N 64 keys for HD <= 128;
// 32 for HD 256, whose 16 x 256 f32 output accumulator already takes 128
// registers per thread (Q is then re-read from shared memory at each k-step
// instead of held in 64 more registers). Shared memory: Q tile + two K/V
// buffers: HD 64: 8 + 32 KB; HD 128: 16 + 64 KB; HD 256: 32 + 64 KB. With
// ptxas (CUDA 13, sm_90a) at 131 / 232 / 254 registers and no spills, that is
// 3 / 2 / 2 blocks per SM.
template <int HD>
struct FlashShape {
  static_assert(HD == 64 || HD == 128 || HD == 256, "flash prefill head size");
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockM = 16 * kWarps;
  static constexpr int kBlockN = HD >= 256 ? 32 : 64;
  static constexpr bool kQInRegs = HD <= 128;
  static constexpr int kChunks = HD / 8;  // 16-byte chunks per row
  static constexpr int kRowBytes = HD * 2;
  static constexpr int kQBytes = kBlockM * kRowBytes;
  static constexpr int kTileBytes = kBlockN * kRowBytes;  // one K or V tile
  static constexpr int kSmemBytes = kQBytes + 4 * kTileBytes;
  // FP8 caches: Q, one bf16 K/V pair, two FP8 K/V staging pairs.
  static constexpr int kStageBytes = kBlockN * HD;  // one FP8 K or V tile
  static constexpr int kSmemBytesFp8 = kQBytes + 2 * kTileBytes + 4 * kStageBytes;
  static constexpr int kChunks8 = HD / 16;  // 16-byte chunks of an FP8 row
  static_assert(kThreads % kChunks8 == 0 && kBlockN % (kThreads / kChunks8) == 0, "FP8 copy loops");
  static_assert(kBlockM == kFlashBlockM, "the work list is built for kFlashBlockM rows");
  static_assert(kChunks % 8 == 0, "the swizzle permutes chunks within groups of 8");
  static_assert(kThreads % kChunks == 0 && kBlockN % (kThreads / kChunks) == 0 &&
                    kBlockM % (kThreads / kChunks) == 0,
                "copy loops");
};

namespace flash {

constexpr float kLog2e = 1.4426950408889634f;

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile.
template <int kRowBytes>
__device__ __forceinline__ uint32_t swizzle(int row, int chunk) {
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// 2^x (MUFU; 2^-inf = 0).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace flash

template <int HD, bool kFp8>
__global__ void __launch_bounds__(FlashShape<HD>::kThreads)
    flash_prefill_kernel(const FlashPrefillArgs a) {
  using Shape = FlashShape<HD>;
  constexpr int kBlockM = Shape::kBlockM, kBlockN = Shape::kBlockN, kThreads = Shape::kThreads;
  constexpr int kChunks = Shape::kChunks, kRowBytes = Shape::kRowBytes, kTileBytes = Shape::kTileBytes;
  constexpr int kRowStep = kThreads / kChunks;  // rows one pass of the copy loops covers
  constexpr int kKSteps = HD / 16;              // k-steps of Q K^T (over head dims)
  constexpr int kSTiles = kBlockN / 8;          // 8-key column tiles of S
  constexpr int kOTiles = HD / 8;               // 8-dim column tiles of O
  using flash::swizzle;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t s_q = smem_addr(smem);
  const uint32_t s_kv = s_q + Shape::kQBytes;  // buffer b: K at s_kv + 2 b kTileBytes, V after it
  // FP8: staging buffer b: K at s_stage + 2 b kStageBytes, V after it.
  const uint32_t s_stage = s_kv + 2 * kTileBytes;

  // Block x: tile x / kv_heads of the work list, kv head x % kv_heads.
  const int tile = static_cast<int>(blockIdx.x) / a.num_kv_heads;
  const int kv_head = static_cast<int>(blockIdx.x) % a.num_kv_heads;
  const int seq = a.tiles[2 * tile], row0 = a.tiles[2 * tile + 1];
  const int group = a.num_heads / a.num_kv_heads;
  const int q_begin = a.query_start[seq];
  const int n_new = a.query_start[seq + 1] - q_begin;
  const int first_pos = a.context_lens[seq] - n_new;    // position of the sequence's first new token
  const int rows = min(kBlockM, n_new * group - row0);  // rows of this tile that exist
  if (rows <= 0) return;                                // (never, for a well-built list)
  const int window = a.sliding_window;

  // Keys any row of the block sees: [kv_lo, kv_hi).
  const int kv_lo = window > 0 ? max(0, first_pos + row0 / group - window + 1) : 0;
  const int kv_hi = first_pos + (row0 + rows - 1) / group + 1;
  const int num_kv_tiles = (kv_hi - kv_lo + kBlockN - 1) / kBlockN;

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int warp_row0 = warp * 16;  // the warp's rows: warp_row0 .. + 15 of the block
  const bool warp_active = warp_row0 < rows;
  // Positions of the warp's first and last existing rows, and the keys they see.
  const int w_pos_lo = first_pos + (row0 + warp_row0) / group;
  const int w_pos_hi = first_pos + (row0 + min(warp_row0 + 15, rows - 1)) / group;
  const int w_kv_lo = window > 0 ? max(0, w_pos_lo - window + 1) : 0;
  const int w_kv_hi = w_pos_hi + 1;
  // Positions of this thread's two fragment rows (g and g + 8).
  const int pos_a = first_pos + (row0 + warp_row0 + lane / 4) / group;
  const int pos_b = first_pos + (row0 + warp_row0 + lane / 4 + 8) / group;

  const bf16* k_cache = static_cast<const bf16*>(a.k_cache);
  const bf16* v_cache = static_cast<const bf16*>(a.v_cache);
  const uint8_t* k_cache8 = static_cast<const uint8_t*>(a.k_cache);
  const uint8_t* v_cache8 = static_cast<const uint8_t*>(a.v_cache);
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;
  const int chunk = static_cast<int>(threadIdx.x) % kChunks;  // the 16-byte chunk this thread copies
  const int copy_row = static_cast<int>(threadIdx.x) / kChunks;

  // Q rows -> shared (padding rows zero-filled).
  {
    const bf16* q = static_cast<const bf16*>(a.q);
#pragma unroll
    for (int i = 0; i < kBlockM / kRowStep; ++i) {
      const int r = copy_row + i * kRowStep;
      const void* src = q;
      int bytes = 0;
      if (r < rows) {
        const int row = row0 + r;
        const int64_t tok = q_begin + row / group;
        const int head = kv_head * group + row % group;
        src = q + (tok * a.num_heads + head) * HD + chunk * 8;
        bytes = 16;
      }
      cp_async<16>(s_q + swizzle<kRowBytes>(r, chunk), src, bytes);
    }
    cp_async_commit();
  }

  // Keys [n0, n0 + kBlockN) of tile t -> buffer buf (keys >= kv_hi zero-filled).
  // The block-table reads come first, all in flight together.
  auto load_kv_tile = [&](int t, int buf) {
    constexpr int kKeys = kBlockN / kRowStep;  // keys this thread copies a chunk of
    const int n0 = kv_lo + t * kBlockN;
    int32_t phys[kKeys];  // physical block of each key (-1: past kv_hi)
#pragma unroll
    for (int i = 0; i < kKeys; ++i) {
      const int key = n0 + copy_row + i * kRowStep;
      const int blk = a.block_shift >= 0 ? key >> a.block_shift : key / a.block_size;
      phys[i] = key < kv_hi ? __ldg(table + blk) : -1;
    }
    const uint32_t k_dst = s_kv + 2 * buf * kTileBytes, v_dst = k_dst + kTileBytes;
#pragma unroll
    for (int i = 0; i < kKeys; ++i) {
      const int j = copy_row + i * kRowStep;
      const int key = n0 + j;
      const bf16* ksrc = k_cache;
      const bf16* vsrc = v_cache;
      int bytes = 0;
      if (phys[i] >= 0) {
        const int in_block = a.block_shift >= 0 ? key & (a.block_size - 1) : key % a.block_size;
        const int64_t slot = static_cast<int64_t>(phys[i]) * a.block_size + in_block;
        const int64_t e = (slot * a.num_kv_heads + kv_head) * HD + chunk * 8;
        ksrc += e;
        vsrc += e;
        bytes = 16;
      }
      const uint32_t off = swizzle<kRowBytes>(j, chunk);
      cp_async<16>(k_dst + off, ksrc, bytes);
      cp_async<16>(v_dst + off, vsrc, bytes);
    }
    cp_async_commit();
  };

  // FP8: keys [n0, n0 + kBlockN) of tile t, as stored, -> staging buffer buf
  // (rows of HD bytes; keys >= kv_hi zero-filled).
  auto load_kv_stage = [&](int t, int buf) {
    constexpr int kRowStep8 = kThreads / Shape::kChunks8;
    constexpr int kKeys = kBlockN / kRowStep8;
    const int chunk8 = static_cast<int>(threadIdx.x) % Shape::kChunks8;
    const int row8 = static_cast<int>(threadIdx.x) / Shape::kChunks8;
    const int n0 = kv_lo + t * kBlockN;
    int32_t phys[kKeys];
#pragma unroll
    for (int i = 0; i < kKeys; ++i) {
      const int key = n0 + row8 + i * kRowStep8;
      const int blk = a.block_shift >= 0 ? key >> a.block_shift : key / a.block_size;
      phys[i] = key < kv_hi ? __ldg(table + blk) : -1;
    }
    const uint32_t k_dst = s_stage + 2 * buf * Shape::kStageBytes,
                   v_dst = k_dst + Shape::kStageBytes;
#pragma unroll
    for (int i = 0; i < kKeys; ++i) {
      const int j = row8 + i * kRowStep8;
      const int key = n0 + j;
      const uint8_t* ksrc = k_cache8;
      const uint8_t* vsrc = v_cache8;
      int bytes = 0;
      if (phys[i] >= 0) {
        const int in_block = a.block_shift >= 0 ? key & (a.block_size - 1) : key % a.block_size;
        const int64_t slot = static_cast<int64_t>(phys[i]) * a.block_size + in_block;
        const int64_t e = (slot * a.num_kv_heads + kv_head) * HD + chunk8 * 16;
        ksrc += e;
        vsrc += e;
        bytes = 16;
      }
      const uint32_t off = static_cast<uint32_t>(j * HD + chunk8 * 16);
      cp_async<16>(k_dst + off, ksrc, bytes);
      cp_async<16>(v_dst + off, vsrc, bytes);
    }
    cp_async_commit();
  };
  // FP8: staging buffer buf -> the bf16 K/V tile pair (buffer 0), exactly.
  auto convert_stage = [&](int buf) {
    const unsigned char* stage =
        smem + Shape::kQBytes + 2 * kTileBytes + 2 * buf * Shape::kStageBytes;
    for (int idx = static_cast<int>(threadIdx.x); idx < 2 * kBlockN * Shape::kChunks8;
         idx += kThreads) {
      const int kv = idx / (kBlockN * Shape::kChunks8);  // 0: K, 1: V
      const int rem = idx % (kBlockN * Shape::kChunks8);
      const int j = rem / Shape::kChunks8, c8 = rem % Shape::kChunks8;
      const uint4 v =
          *reinterpret_cast<const uint4*>(stage + kv * Shape::kStageBytes + j * HD + c8 * 16);
      float lo[8], hi[8];
      fp8x8_to_float(make_uint2(v.x, v.y), lo);
      fp8x8_to_float(make_uint2(v.z, v.w), hi);
      unsigned char* tile = smem + Shape::kQBytes + kv * kTileBytes;
      *reinterpret_cast<uint4*>(tile + swizzle<kRowBytes>(j, 2 * c8)) = float_to_bf16x8(lo);
      *reinterpret_cast<uint4*>(tile + swizzle<kRowBytes>(j, 2 * c8 + 1)) = float_to_bf16x8(hi);
    }
  };

  if constexpr (kFp8)
    load_kv_stage(0, 0);
  else
    load_kv_tile(0, 0);       // num_kv_tiles >= 1: every row sees at least its own key
  cp_async_wait<0>();  // this thread's copies of Q and tile 0 landed
  __syncthreads();            // everyone's

  uint32_t qf[Shape::kQInRegs ? kKSteps : 1][4];  // Q A-fragments per k-step (HD <= 128)
  if constexpr (Shape::kQInRegs) {
    if (warp_active) {
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks)
        flash::ldmatrix_x4(qf[ks], s_q + swizzle<kRowBytes>(warp_row0 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                             2 * ks + (lane >> 4)));
    }
  }

  float o[kOTiles][4];
#pragma unroll
  for (int d = 0; d < kOTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // running max of rows g, g + 8 (log2 units)
  float l[2] = {0.0f, 0.0f};            // running sum of this thread's columns (summed over the quad at the end)
  const bool capped = a.softcap > 0.0f;
  const float scale = kFp8 ? a.scale * a.k_scale[kv_head] : a.scale;  // logits of the stored K
  const float scale_log2 = scale * flash::kLog2e;
  const float cap_log2 = a.softcap * flash::kLog2e;
  const float scale_over_cap = capped ? scale / a.softcap : 0.0f;

  // One barrier per tile: after it, tile t is visible to every thread and
  // every warp is done with tile t - 1, whose buffer then receives tile t + 1
  // while tile t is multiplied.
  for (int t = 0; t < num_kv_tiles; ++t) {
    const int buf = kFp8 ? 0 : t & 1;
    if constexpr (kFp8) {
      // After the first barrier tile t is staged and every warp is done with
      // the bf16 pair (tile t - 1); staging buffer (t + 1) & 1 was converted
      // in iteration t - 1. After the second the converted tile is visible.
      if (t > 0) {
        cp_async_wait<0>();
        __syncthreads();
      }
      convert_stage(t & 1);
      if (t + 1 < num_kv_tiles) load_kv_stage(t + 1, (t + 1) & 1);
      __syncthreads();
    } else {
      if (t > 0) {
        cp_async_wait<0>();  // this thread's copies of tile t (the only group in flight)
        __syncthreads();
      }
      if (t + 1 < num_kv_tiles) load_kv_tile(t + 1, buf ^ 1);
    }

    const int n0 = kv_lo + t * kBlockN;
    // Warp-uniform: skip tiles none of the warp's rows sees.
    if (warp_active && n0 < w_kv_hi && n0 + kBlockN > w_kv_lo) {
      const uint32_t k_tile = s_kv + 2 * buf * kTileBytes, v_tile = k_tile + kTileBytes;

      // S = Q K^T for the warp's 16 rows x kBlockN keys.
      float s[kSTiles][4];
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        uint32_t qa[4];
        if constexpr (Shape::kQInRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) qa[i] = qf[ks][i];
        } else {
          flash::ldmatrix_x4(qa, s_q + swizzle<kRowBytes>(warp_row0 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                            2 * ks + (lane >> 4)));
        }
#pragma unroll
        for (int np = 0; np < kSTiles / 2; ++np) {
          // Matrices: keys 16np + 0..7 (dims 16ks + 0..7, + 8..15), keys 16np + 8..15 (same dims).
          uint32_t kb[4];
          flash::ldmatrix_x4(kb, k_tile + swizzle<kRowBytes>(np * 16 + (lane & 7) + (lane >> 4) * 8,
                                                               2 * ks + ((lane >> 3) & 1)));
          mma_bf16(s[2 * np], qa, kb[0], kb[1]);
          mma_bf16(s[2 * np + 1], qa, kb[2], kb[3]);
        }
      }

      // Logits in log2 units (scale, softcap), then the causal / window mask,
      // needed only where the tile reaches past the warp's first position or
      // below its last row's window.
      const bool need_mask = n0 + kBlockN - 1 > w_pos_lo || (window > 0 && n0 <= w_pos_hi - window);
#pragma unroll
      for (int n = 0; n < kSTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[n][e];
          x = capped ? cap_log2 * tanhf(x * scale_over_cap) : x * scale_log2;
          if (need_mask) {
            const int key = n0 + n * 8 + 2 * (lane & 3) + (e & 1);
            const int pos = e < 2 ? pos_a : pos_b;
            if (key > pos || (window > 0 && key <= pos - window)) x = -INFINITY;
          }
          s[n][e] = x;
        }

      // Online softmax per row (rows g: elements 0, 1; g + 8: elements 2, 3).
      // A row the tile fully masks keeps max -inf; its probabilities use base
      // 0 (2^-inf = 0) so no inf - inf appears.
      float mx[2] = {m[0], m[1]};
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
        mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
      }
      float base[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));  // the quad holds the row
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
        base[i] = mx[i] == -INFINITY ? 0.0f : mx[i];
        const float corr = flash::exp2_approx(m[i] - base[i]);  // 0 while m was -inf
        m[i] = mx[i];
        l[i] *= corr;
#pragma unroll
        for (int d = 0; d < kOTiles; ++d) {
          o[d][2 * i] *= corr;
          o[d][2 * i + 1] *= corr;
        }
      }
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
        s[n][0] = flash::exp2_approx(s[n][0] - base[0]);
        s[n][1] = flash::exp2_approx(s[n][1] - base[0]);
        s[n][2] = flash::exp2_approx(s[n][2] - base[1]);
        s[n][3] = flash::exp2_approx(s[n][3] - base[1]);
        l[0] += s[n][0] + s[n][1];
        l[1] += s[n][2] + s[n][3];
      }

      // O += P V: the S accumulators of key tiles 2kk, 2kk + 1 are the A
      // fragment of k-step kk.
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        const uint32_t pa[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                                pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < HD / 16; ++dp) {
          // Matrices (transposed): keys 16kk + 0..7 and + 8..15 of dims 16dp + 0..7, then of dims + 8..15.
          uint32_t vb[4];
          flash::ldmatrix_x4_trans(vb, v_tile + swizzle<kRowBytes>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                                     2 * dp + (lane >> 4)));
          mma_bf16(o[2 * dp], pa, vb[0], vb[1]);
          mma_bf16(o[2 * dp + 1], pa, vb[2], vb[3]);
        }
      }
    }
  }

  // Epilogue: O / l to bf16, staged through the warp's own Q rows (only this
  // warp ever reads them, and its reads are done), then copied out 16 bytes per
  // lane. No copy is in flight: the last tile issued none.
  if (!warp_active) return;
  __syncwarp();
  float inv[2];
  const float v_scale = kFp8 ? a.v_scale[kv_head] : 1.0f;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    inv[i] = l[i] > 0.0f ? (kFp8 ? v_scale / l[i] : 1.0f / l[i]) : 0.0f;
  }
  const int ra = warp_row0 + lane / 4, rb = ra + 8;
#pragma unroll
  for (int d = 0; d < kOTiles; ++d) {
    *reinterpret_cast<uint32_t*>(smem + swizzle<kRowBytes>(ra, d) + 4 * (lane & 3)) =
        pack_bf16x2(o[d][0] * inv[0], o[d][1] * inv[0]);
    *reinterpret_cast<uint32_t*>(smem + swizzle<kRowBytes>(rb, d) + 4 * (lane & 3)) =
        pack_bf16x2(o[d][2] * inv[1], o[d][3] * inv[1]);
  }
  __syncwarp();
  bf16* out = static_cast<bf16*>(a.out);
#pragma unroll
  for (int i = 0; i < 16 * kChunks / 32; ++i) {
    const int idx = lane + i * 32;
    const int r = warp_row0 + idx / kChunks, c = idx % kChunks;
    if (r < rows) {
      const int row = row0 + r;
      const int64_t tok = q_begin + row / group;
      const int head = kv_head * group + row % group;
      *reinterpret_cast<uint4*>(out + (tok * a.num_heads + head) * HD + c * 8) =
          *reinterpret_cast<const uint4*>(smem + swizzle<kRowBytes>(r, c));
    }
  }
}

// Launches flash_prefill_kernel<HD> over num_tiles * num_kv_heads blocks. The
// kernel's shared memory limit is raised once per device (bit d of
// `configured`; devices >= 64 every time); a failure there is left for
// cudaGetLastError and nothing is launched.
template <int HD, bool kFp8>
void launch_flash_prefill_kv(const FlashPrefillArgs& a, cudaStream_t stream) {
  using Shape = FlashShape<HD>;
  constexpr int kSmem = kFp8 ? Shape::kSmemBytesFp8 : Shape::kSmemBytes;
  static std::atomic<uint64_t> configured{0};
  if (!configure_shared_memory(flash_prefill_kernel<HD, kFp8>, kSmem, configured)) return;
  const unsigned grid = static_cast<unsigned>(a.num_tiles) * static_cast<unsigned>(a.num_kv_heads);
  flash_prefill_kernel<HD, kFp8><<<grid, Shape::kThreads, kSmem, stream>>>(a);
}

// bf16 caches (flash_prefill_hd*.cu) and FP8 ones (flash_prefill_fp8_hd*.cu).
template <int HD>
void launch_flash_prefill_hd(const FlashPrefillArgs& a, cudaStream_t stream) {
  launch_flash_prefill_kv<HD, false>(a, stream);
}
template <int HD>
void launch_flash_prefill_fp8_hd(const FlashPrefillArgs& a, cudaStream_t stream) {
  launch_flash_prefill_kv<HD, true>(a, stream);
}

}  // namespace loom::cuda
