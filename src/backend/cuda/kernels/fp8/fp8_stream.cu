// FP8 matmul for one or two rows of x whose weight stream never drains
// (fp8_kernels.h): one persistent CUDA block per SM walks its 16-row weight
// tiles one after another, and a producer thread keeps a ring of kStages
// shared-memory stages filled with bulk copies (cp.async.bulk, the Hopper
// copy engine), each stage 16 rows x `chunk` bytes of k (Fp8StreamConfig),
// across tile ends. So
// the bytes in flight per SM do not depend on registers or on how many warps
// wait, and no block's pipeline runs dry between tiles (the small-m kernel's
// blocks each stream one tile and stop).
//
// Consumer warp w takes the chunks whose fill number t (counted over the
// block's tiles) has t % kConsumers == w, and the stages are a multiple of
// kConsumers, so each stage has one consumer; in a chunk, each 128-column
// group is four mma.m16n8k32.e4m3 in the layout of the
// small-m kernel (fp8_matmul.cu): lane (g, c) holds bytes [16c, 16c + 16) and
// [64 + 16c, 64 + 16c + 16) of the group in weight rows g and g + 8 and in x
// row g, here read from shared memory. x is quantised once per block, before
// the loop, exactly as quantize_fp8_rows quantises it (Token: the row's amax;
// Group: each 128-column group's; Static: the layer's scale). A group's
// products are promoted to f32 registers after the group, as in the small-m
// kernel; the warps' sums of a tile meet in shared memory in a fixed order.
// A row's result depends only on that row (k, the tile and the chunk fix the
// order of every sum), not on the other row of x.
#include <algorithm>
#include <atomic>

#include "backend/cuda/kernels/fp8/fp8.cuh"
#include "backend/cuda/kernels/fp8/fp8_kernels.h"
#include "backend/cuda/kernels/launch.cuh"

namespace loom::cuda {
namespace {

constexpr int kRows = 16;                        // weight rows per tile (mma m16)
constexpr int kConsumers = 4;                    // consumer warps
constexpr int kThreads = (kConsumers + 1) * 32;  // + the producer warp
constexpr int kGroup = 128;
constexpr int kMaxRows = 2;  // rows of x
constexpr int kMaxStages = 8;
constexpr size_t kSmemPerSm = 200 * 1024;  // dynamic shared memory of an SM's blocks, at most

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Returns once the barrier's phase of this parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// bytes (a multiple of 16, both addresses 16-byte aligned) from global to
// shared memory; completes as transaction bytes on bar.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers * 32) : "memory");
}

// A launch's shared-memory plan: stages of 16 rows x chunk bytes (rows
// pitch = chunk + 16 apart: fewer bank conflicts), then x's quantised rows,
// x's group scales and the barriers.
struct Plan {
  int chunk = 0, pitch = 0, stage_bytes = 0, stages = 0;
  size_t x_offset = 0, xs_offset = 0, bar_offset = 0, bytes = 0;
};

Plan plan_for(int64_t k, const Fp8StreamConfig& cfg) {
  Plan p;
  if (cfg.chunk < kGroup || cfg.chunk > 4096 || cfg.chunk % kGroup != 0 || cfg.blocks_per_sm < 1 ||
      cfg.blocks_per_sm > 4)
    return p;  // stages stays 0: not supported
  const size_t limit = kSmemPerSm / static_cast<size_t>(cfg.blocks_per_sm);
  const int64_t groups = (k + kGroup - 1) / kGroup;
  const size_t x_bytes = static_cast<size_t>(kMaxRows * k + 15) / 16 * 16;
  const size_t xs_bytes = (static_cast<size_t>(kMaxRows * groups) * 4 + 15) / 16 * 16;
  const size_t tail = x_bytes + xs_bytes + 2 * kMaxStages * 8;
  p.chunk = cfg.chunk;
  p.pitch = cfg.chunk + 16;
  p.stage_bytes = kRows * p.pitch;
  const auto stage = static_cast<size_t>(p.stage_bytes);
  if (tail + kConsumers * stage > limit) return Plan{};
  // A multiple of kConsumers: stage s is always consumed by warp s % kConsumers.
  p.stages = static_cast<int>(std::min<size_t>((limit - tail) / stage, kMaxStages)) /
             kConsumers * kConsumers;
  p.x_offset = static_cast<size_t>(p.stages) * stage;
  p.xs_offset = p.x_offset + x_bytes;
  p.bar_offset = p.xs_offset + xs_bytes;
  p.bytes = p.bar_offset + 2 * kMaxStages * 8;
  return p;
}

template <Fp8ActMode kMode>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_stream_kernel(const Fp8MatmulArgs a, const Plan plan) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr bool kBlock = kMode == Fp8ActMode::Group;
  const int stages = plan.stages, chunk_bytes = plan.chunk, pitch = plan.pitch;
  uint8_t* xq = smem + plan.x_offset;                           // [kMaxRows][k] fp8
  float* xs = reinterpret_cast<float*>(smem + plan.xs_offset);  // Group: [kMaxRows][groups]
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + plan.bar_offset);
  uint64_t* empty = full + kMaxStages;
  __shared__ float red[2][kConsumers][4][32];
  __shared__ float row_scale[kMaxRows];
  __shared__ float amax_part[kMaxRows][kConsumers];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tiles = (a.n + kRows - 1) / kRows;
  const int chunks = static_cast<int>((a.k + chunk_bytes - 1) / chunk_bytes);
  const int groups = static_cast<int>((a.k + kGroup - 1) / kGroup);
  // This block's tiles: blockIdx.x, + gridDim.x, ...
  const int my_tiles =
      blockIdx.x < tiles ? static_cast<int>((tiles - 1 - blockIdx.x) / gridDim.x + 1) : 0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, 1);  // one consumer warp takes each fill
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp == kConsumers) {
    // The producer: the weights need nothing from the kernel before this one
    // (launched with PDL), so the ring fills while it finishes.
    // Lane r copies row r of a stage, after lane 0 has armed the stage's
    // barrier; the stage, its fill's parity, the chunk and the tile advance
    // by counting (no 64-bit division in the loop).
    int s = 0, chunk = 0;
    uint32_t parity = 0;
    int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
    const int64_t row_step = static_cast<int64_t>(gridDim.x) * kRows;
    const int total = my_tiles * chunks;
    for (int t = 0; t < total; ++t) {
      // Fill f = t / stages of stage s waits for the consumers' release of fill f - 1.
      if (t >= stages) mbar_wait(empty + s, parity ^ 1u);
      const int64_t k0 = static_cast<int64_t>(chunk) * chunk_bytes;
      const auto bytes = static_cast<uint32_t>(a.k - k0 < chunk_bytes ? a.k - k0 : chunk_bytes);
      const int rows = static_cast<int>(a.n - row0 < kRows ? a.n - row0 : kRows);
      if (lane == 0) mbar_expect_tx(full + s, bytes * static_cast<uint32_t>(rows));
      __syncwarp();
      if (lane < rows)
        bulk_copy(smem + static_cast<size_t>(s) * plan.stage_bytes + lane * pitch,
                  a.w + (row0 + lane) * a.k + k0, bytes, full + s);
      if (++s == stages) s = 0, parity ^= 1u;
      if (++chunk == chunks) chunk = 0, row0 += row_step;
    }
    return;
  }

  // Consumers: x's rows quantised into shared memory, as quantize_fp8_rows does.
  pdl_wait();
  const int tid = threadIdx.x;  // < kConsumers * 32
  const int64_t chunks8 = a.k / 8;
  const int live = static_cast<int>(a.m < kMaxRows ? a.m : kMaxRows);
  const bf16* xg = static_cast<const bf16*>(a.x);
  if constexpr (kBlock) {
    for (int i = 0; i < live; ++i)
      for (int q = tid; q < groups; q += kConsumers * 32) {
        const int64_t begin = static_cast<int64_t>(q) * (kGroup / 8);
        const int64_t end = begin + kGroup / 8 < chunks8 ? begin + kGroup / 8 : chunks8;
        float m = 0.0f;
        for (int64_t p = begin; p < end; ++p) {
          float f[8];
          bf16x8_to_float(__ldg(reinterpret_cast<const uint4*>(xg + i * a.k) + p), f);
          m = fmaxf(m, amax8(f));
        }
        const float s = fp8_scale_for_amax(m), inv = 1.0f / s;
        xs[i * groups + q] = s;
        for (int64_t p = begin; p < end; ++p) {
          float f[8];
          bf16x8_to_float(__ldg(reinterpret_cast<const uint4*>(xg + i * a.k) + p), f);
          reinterpret_cast<uint2*>(xq + i * a.k)[p] = fp8x8_from_float(f, inv);
        }
      }
  } else {
    if constexpr (kMode == Fp8ActMode::Token)
      for (int i = 0; i < live; ++i) {
        const float m = warp_row_amax(xg + i * a.k, a.k, tid, kConsumers * 32);
        if (lane == 0) amax_part[i][warp] = m;
      }
    consumers_sync();
    if (tid < live) {
      float s = 1.0f;
      if constexpr (kMode == Fp8ActMode::Static) {
        s = *a.static_scale;
      } else {
        float m = 0.0f;
        for (int w = 0; w < kConsumers; ++w) m = fmaxf(m, amax_part[tid][w]);
        s = fp8_scale_for_amax(m);
      }
      row_scale[tid] = s;
    }
    consumers_sync();
    for (int i = 0; i < live; ++i) {
      const float inv = 1.0f / row_scale[i];
      for (int64_t p = tid; p < chunks8; p += kConsumers * 32) {
        float f[8];
        bf16x8_to_float(__ldg(reinterpret_cast<const uint4*>(xg + i * a.k) + p), f);
        reinterpret_cast<uint2*>(xq + i * a.k)[p] = fp8x8_from_float(f, inv);
      }
    }
  }
  consumers_sync();

  const int g = lane / 4, c = lane % 4;
  const bool x_ok = g < live;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  bf16* out = static_cast<bf16*>(a.out);
  const bf16* bias = static_cast<const bf16*>(a.bias);
  for (int i = 0; i < my_tiles; ++i) {
    const int64_t row0 = (blockIdx.x + static_cast<int64_t>(i) * gridDim.x) * kRows;
    const float* w_block_scale = kBlock ? a.w_scale + (row0 / kGroup) * a.w_scale_ld : nullptr;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // Fill t (over all tiles) is warp t % kConsumers's, so each stage has one
    // consumer, which waits for its fills in order, never more than one
    // phase ahead of the barrier (what a parity wait can tell apart).
    const int first = (warp - (i * chunks) % kConsumers + kConsumers) % kConsumers;
    for (int ch = first; ch < chunks; ch += kConsumers) {
      const int t = i * chunks + ch;
      const int s = t % stages;
      mbar_wait(full + s, static_cast<uint32_t>((t / stages) & 1));
      const uint8_t* st = smem + static_cast<size_t>(s) * plan.stage_bytes;
      const int64_t k0 = static_cast<int64_t>(ch) * chunk_bytes;
#pragma unroll 2
      for (int q = 0; q < chunk_bytes / kGroup; ++q) {
        const int64_t kk = k0 + q * kGroup + 16 * c;  // the lane's first byte in k
        if (k0 + q * kGroup >= a.k) break;            // warp-uniform
        const int off = q * kGroup + 16 * c;          // ... in the stage's row
        const bool in0 = kk < a.k, in1 = kk + 64 < a.k;
        // Rows past n were not copied: their bytes are stale, their sums unused.
        const uint4 w00 = in0 ? *reinterpret_cast<const uint4*>(st + g * pitch + off) : zero;
        const uint4 w01 = in1 ? *reinterpret_cast<const uint4*>(st + g * pitch + off + 64) : zero;
        const uint4 w10 = in0 ? *reinterpret_cast<const uint4*>(st + (g + 8) * pitch + off) : zero;
        const uint4 w11 =
            in1 ? *reinterpret_cast<const uint4*>(st + (g + 8) * pitch + off + 64) : zero;
        uint4 x0 = zero, x1 = zero;
        if (x_ok) {
          if (in0) x0 = *reinterpret_cast<const uint4*>(xq + g * a.k + kk);
          if (in1) x1 = *reinterpret_cast<const uint4*>(xq + g * a.k + kk + 64);
        }
        const uint32_t A0[8] = {w00.x, w00.y, w00.z, w00.w, w01.x, w01.y, w01.z, w01.w};
        const uint32_t A1[8] = {w10.x, w10.y, w10.z, w10.w, w11.x, w11.y, w11.z, w11.w};
        const uint32_t X[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        float cg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_group_e4m3(cg, A0, A1, X);
        if constexpr (kBlock) {
          const int grp = static_cast<int>((k0 + q * kGroup) / kGroup);
          const float ws = __ldg(w_block_scale + grp);
          // Columns 2c and 2c + 1 of the tile: x rows 2c, 2c + 1.
          const float sa = 2 * c < live ? ws * xs[(2 * c) * groups + grp] : 0.0f;
          const float sb = 2 * c + 1 < live ? ws * xs[(2 * c + 1) * groups + grp] : 0.0f;
          promote_group<true>(acc, cg, sa, sb);
        } else {
          promote_group<false>(acc, cg, 0.0f, 0.0f);
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(empty + s);
    }
    // The tile's sums: the warps' partials in a fixed order (double-buffered
    // by tile, so one barrier a tile suffices).
    float(&r)[kConsumers][4][32] = red[i & 1];
#pragma unroll
    for (int e = 0; e < 4; ++e) r[warp][e][lane] = acc[e];
    consumers_sync();
    if (warp == 0) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < kConsumers; ++w) v += r[w][e][lane];
        const int64_t row = row0 + g + (e < 2 ? 0 : 8);
        const int col = 2 * c + (e & 1);
        if (row >= a.n || col >= live) continue;
        if constexpr (kMode == Fp8ActMode::Token || kMode == Fp8ActMode::Static)
          v *= a.w_scale[row] * row_scale[col];
        if (bias) v += __bfloat162float(bias[row]);
        out[col * a.n + row] = __float2bfloat16(v);
      }
    }
  }
}

template <Fp8ActMode kMode>
void launch(const Fp8MatmulArgs& a, int sms, const Fp8StreamConfig& cfg, cudaStream_t stream) {
  const Plan plan = plan_for(a.k, cfg);
  // The limit is the largest any configuration asks for.
  static std::atomic<uint64_t> configured{0};
  if (!configure_shared_memory(fp8_stream_kernel<kMode>, static_cast<int>(kSmemPerSm), configured))
    return;
  const int64_t tiles = (a.n + kRows - 1) / kRows;
  const int64_t blocks = static_cast<int64_t>(sms) * cfg.blocks_per_sm;
  const auto grid = static_cast<unsigned>(tiles < blocks ? tiles : blocks);
  launch_dependent(fp8_stream_kernel<kMode>, dim3(grid), dim3(kThreads), plan.bytes, stream, a,
                   plan);
}

}  // namespace

bool fp8_stream_matmul_supported(int64_t m, int64_t k, const Fp8StreamConfig& cfg) {
  return m >= 1 && m <= kMaxRows && k > 0 && k % 16 == 0 && plan_for(k, cfg).stages >= 2;
}

void fp8_stream_matmul(const Fp8MatmulArgs& a, int sms, const Fp8StreamConfig& cfg,
                       cudaStream_t stream) {
  if (a.m <= 0 || a.n <= 0) return;
  switch (a.mode) {
    case Fp8ActMode::Group:
      launch<Fp8ActMode::Group>(a, sms, cfg, stream);
      break;
    case Fp8ActMode::Static:
      launch<Fp8ActMode::Static>(a, sms, cfg, stream);
      break;
    default:
      launch<Fp8ActMode::Token>(a, sms, cfg, stream);
      break;
  }
}

}  // namespace loom::cuda
