// fp8_row_split (fp8_block_gemm.h) on sm_90a: products of few rows of x
// (decode steps) with per-row scales, the same bits as the row-scaled GEMM
// (fp8_row_gemm_sm90.cuh) and as cuBLASLt's unit-scale GEMM with the scaling
// pass where cuBLASLt sums k in one pass, but with k split over CUDA blocks
// so that the weights stream through every SM.
//
// Those GEMMs sum k in 128-column groups: four wgmmas (k 32 each, in k's
// order) from a zero accumulator give a group's partial sum t_g, which is
// then added to the f32 result, acc = ((0 + t_0) + t_1) + ... in g's order;
// the epilogue rounds bf16(fma(x_scale * w_scale, acc, bias)). A group's
// t_g depends on nothing but its 128 columns, so any CUDA block may compute
// it: here a block owns 64 weight rows (wgmma's M; w is the A operand, so
// the weights need no transposition) by 8 rows of x, or 16 past 8 rows
// (wgmma's N, rows past m zero), and a run of consecutive groups. With one run per tile the block
// adds its t_g in order itself; otherwise every block stores its t_g
// (partials) and the tile's last block to finish (a counter per tile, left
// at zero again) adds them up in g's order and writes out. Whatever the
// split, the arithmetic and its order are the GEMMs' own. (The last block
// stages the partial sums through shared memory, a run of groups at a time.)
//
// Each block is one warpgroup (128 threads). Groups stream through a ring of
// kStages shared-memory stages (64 x 128 weight bytes and 8 or 16 x 128
// bytes of x each, in wgmma's 128-byte swizzled K-major layout) filled by cp.async,
// kStages - 1 groups ahead; the first weights are requested before
// pdl_wait() (launched with PDL: weights need nothing from the kernel before).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>

#include "backend/cuda/kernels/fp8/fp8.cuh"
#include "backend/cuda/kernels/fp8/fp8_sm90_checks.h"
#include "backend/cuda/kernels/launch.cuh"

namespace loom::cuda {
namespace {

using namespace cute;

constexpr int kTileN = 64;  // weight rows per block (wgmma M)
constexpr int kGroup = 128;
constexpr int kStages = 6;
constexpr int kThreads = 128;

using SwizzleAtom = GMMA::Layout_K_SW128_Atom<float_e4m3_t>;  // 8 rows x 128 bytes
using LayoutW =
    decltype(tile_to_shape(SwizzleAtom{}, Shape<Int<kTileN>, Int<kGroup>, Int<kStages>>{}));
constexpr int kWBytes = kTileN * kGroup * kStages;

// A block's rows of x (wgmma's N): 8, or 16 past 8 rows (the weights are
// then streamed once for all of them). The per-element sums do not depend
// on N, so the bits are the same either way.
template <int kTileM>
struct XTile {
  static_assert(kTileM == 8 || kTileM == 16);
  using Mma =
      decltype(make_tiled_mma(cute::conditional_t<kTileM == 8, SM90_64x8x32_F32E4M3E4M3_SS_TN<>,
                                                  SM90_64x16x32_F32E4M3E4M3_SS_TN<>>{}));
  using Layout =
      decltype(tile_to_shape(SwizzleAtom{}, Shape<Int<kTileM>, Int<kGroup>, Int<kStages>>{}));
  static constexpr int kBytes = kTileM * kGroup * kStages;
  // + slack to align to 1024 (the swizzle)
  static constexpr int kSmemBytes = kWBytes + kBytes + 1024;
};

struct Params {
  const uint8_t* xq;
  const float* x_scale;
  const uint8_t* w;
  const float* w_scale;
  const bf16* bias;
  bf16* out;
  float* partials;     // [m tiles][n tiles][groups][cols][kTileN], cols = min(m, x's tile)
  unsigned* counters;  // [m tiles][n tiles]
  int64_t m, n, k;
  int64_t n_tiles, groups;
  int splits, groups_per_split, cols;
};

__device__ __forceinline__ bf16 epilogue(const Params& p, float acc, int64_t row_m, int64_t row_n) {
  const bf16 b = p.bias ? p.bias[row_n] : __ushort_as_bfloat16(0);
  return __float2bfloat16(fp8_scale_bias(acc, p.x_scale[row_m], p.w_scale[row_n], b));
}

// Tile `tile`'s outputs from its groups' partial sums, added in g's order;
// `stage` (kWBytes of shared memory) holds runs of groups on the way.
template <int kTileM>
__device__ void finish_tile(const Params& p, int64_t tile, int64_t m0, float* stage) {
  const int tid = threadIdx.x;
  const int cols = p.cols;
  const int per_group = cols * kTileN;  // floats
  const float* part = p.partials + (blockIdx.y * p.n_tiles + tile) * p.groups * per_group;
  const int64_t n0 = tile * kTileN;
  constexpr int kOuts = kTileN * kTileM / kThreads;  // outputs per thread, at most
  float sum[kOuts];
#pragma unroll
  for (int j = 0; j < kOuts; ++j) sum[j] = 0.0f;
  const int64_t run = kWBytes / 4 / per_group;  // groups per shared-memory run
  for (int64_t g0 = 0; g0 < p.groups; g0 += run) {
    const int64_t gs = min(run, p.groups - g0);
    const int64_t vecs = gs * per_group / 4;
    const float4* src = reinterpret_cast<const float4*>(part + g0 * per_group);
    for (int64_t v = tid; v < vecs; v += kThreads)
      reinterpret_cast<float4*>(stage)[v] = __ldcg(src + v);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kOuts; ++j) {
      const int o = tid + j * kThreads;
      if (o < per_group) {
        // The adds stay in g's order; unrolled, the loads go out ahead of them.
#pragma unroll 8
        for (int g = 0; g < static_cast<int>(gs); ++g) sum[j] += stage[g * per_group + o];
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < kOuts; ++j) {
    const int o = tid + j * kThreads;
    const int64_t rn = n0 + o % kTileN, rm = m0 + o / kTileN;
    if (o < per_group && rn < p.n && rm < p.m) p.out[rm * p.n + rn] = epilogue(p, sum[j], rm, rn);
  }
}

// Grid: (n tiles x splits, m tiles); a block takes groups [split *
// groups_per_split, + groups_per_split) of its tile.
template <int kTileM>
__global__ void __launch_bounds__(kThreads) fp8_row_split_kernel(const Params p) {
  using Mma = typename XTile<kTileM>::Mma;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) / 1024 * 1024);
  Tensor sW = make_tensor(make_smem_ptr(reinterpret_cast<float_e4m3_t*>(smem)), LayoutW{});
  Tensor sX = make_tensor(make_smem_ptr(reinterpret_cast<float_e4m3_t*>(smem + kWBytes)),
                          typename XTile<kTileM>::Layout{});
  const int tid = threadIdx.x;
  const int64_t groups = p.groups, tile = blockIdx.x / p.splits;
  const int64_t g0 = static_cast<int64_t>(blockIdx.x % p.splits) * p.groups_per_split;
  const int count = static_cast<int>(min<int64_t>(p.groups_per_split, groups - g0));
  const int64_t n0 = tile * kTileN, m0 = static_cast<int64_t>(blockIdx.y) * kTileM;

  // Stage s <- group g: 512 16-byte pieces of weights (4 per thread), 8 per row of x.
  auto load_w = [&](int s, int64_t g) {
    const int64_t col = g * kGroup;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int piece = tid + i * kThreads, r = piece / 8, c = piece % 8 * 16;
      const int64_t row = n0 + r;
      const bool ok = row < p.n;
      cp_async<16>(smem_addr(&sW(r, c, s)), p.w + (ok ? row : 0) * p.k + col + c, ok ? 16 : 0);
    }
  };
  auto load_x = [&](int s, int64_t g) {
    const int64_t col = g * kGroup;
    if (tid < kTileM * 8) {
      const int r = tid / 8, c = tid % 8 * 16;
      const int64_t row = m0 + r;
      const bool ok = row < p.m;
      cp_async<16>(smem_addr(&sX(r, c, s)), p.xq + (ok ? row : 0) * p.k + col + c, ok ? 16 : 0);
    }
  };
  // The first kStages - 1 groups: weights before pdl_wait, x after; one
  // commit group per stage (the first also holding every prologue weight).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (s < count) load_w(s, g0 + s);
  pdl_wait();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < count) load_x(s, g0 + s);
    cp_async_commit();
  }

  Mma mma;
  auto thr = mma.get_thread_slice(tid);
  Tensor tCrW = thr.make_fragment_A(thr.partition_A(sW));  // (MMA, 1, 4 k-steps, stages)
  Tensor tCrX = thr.make_fragment_B(thr.partition_B(sX));
  Tensor t = partition_fragment_C(mma, Shape<Int<kTileN>, Int<kTileM>>{});
  Tensor acc = partition_fragment_C(mma, Shape<Int<kTileN>, Int<kTileM>>{});
  Tensor coord = thr.partition_C(make_identity_tensor(Shape<Int<kTileN>, Int<kTileM>>{}));
  clear(acc);
  const int per_group = p.cols * kTileN;

  for (int i = 0; i < count; ++i) {
    cp_async_wait<kStages - 2>();  // group g0 + i has landed (this thread's pieces)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // visible to wgmma
    __syncthreads();  // everyone's pieces; and stage (i - 1) is no longer read
    const int next = i + kStages - 1;
    if (next < count) {
      load_w(next % kStages, g0 + next);
      load_x(next % kStages, g0 + next);
    }
    cp_async_commit();
    const int s = i % kStages;
    warpgroup_fence_operand(t);
    warpgroup_arrive();
    mma.accumulate_ = GMMA::ScaleOut::Zero;
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tCrW); ++kb) {
      cute::gemm(mma, tCrW(_, _, kb, s), tCrX(_, _, kb, s), t);
      mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(t);
    const int64_t g = g0 + i;
    if (p.splits == 1) {
      // Every group of this tile is ours: add in order, write out at the last.
      CUTE_UNROLL
      for (int e = 0; e < size(acc); ++e) acc(e) += t(e);
      if (g == groups - 1) {
        CUTE_UNROLL
        for (int e = 0; e < size(acc); ++e) {
          const int64_t rn = n0 + get<0>(coord(e)), rm = m0 + get<1>(coord(e));
          if (rn < p.n && rm < p.m) p.out[rm * p.n + rn] = epilogue(p, acc(e), rm, rn);
        }
      }
    } else {
      float* dst = p.partials + ((blockIdx.y * p.n_tiles + tile) * groups + g) * per_group;
      CUTE_UNROLL
      for (int e = 0; e < size(t); ++e) {
        const int r = get<0>(coord(e)), c = get<1>(coord(e));
        if (c < p.cols) __stcg(dst + c * kTileN + r, t(e));
      }
    }
  }
  pdl_trigger();  // the kernel after this one may start its own loads

  if (p.splits == 1) return;  // written above
  // The tile's last block to get here adds its groups' partial sums up.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    unsigned* counter = p.counters + blockIdx.y * p.n_tiles + tile;
    last = atomicAdd(counter, 1u) == static_cast<unsigned>(p.splits - 1);
    if (last) *counter = 0;  // for the next product (every other block has arrived)
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  finish_tile<kTileM>(p, tile, m0, reinterpret_cast<float*>(smem));
}

struct Grid {
  int64_t tile_m = 8, n_tiles = 0, m_tiles = 0, groups = 0, cols = 0;
  int splits = 1, groups_per_split = 1;
};

// Rows of x per block for a product of m rows.
int64_t tile_rows_for(int64_t m) {
  return m > 8 ? 16 : 8;
}

// The grid at a given split (a count grid_for chose: ceil(groups / per block)).
Grid grid_with(const Fp8BlockGemmArgs& a, int64_t splits) {
  Grid g;
  g.tile_m = tile_rows_for(a.m);
  g.n_tiles = (a.n + kTileN - 1) / kTileN;
  g.m_tiles = (a.m + g.tile_m - 1) / g.tile_m;
  g.groups = a.k / kGroup;
  g.cols = std::min<int64_t>(a.m, g.tile_m);
  splits = std::clamp<int64_t>(splits, 1, std::max<int64_t>(g.groups, 1));
  g.groups_per_split = static_cast<int>((g.groups + splits - 1) / splits);
  g.splits = static_cast<int>((g.groups + g.groups_per_split - 1) / g.groups_per_split);
  return g;
}

// k split over `splits` blocks per tile: args.row_split_splits (clamped to
// 1..groups),
// or chosen for the least time in a simple model: the blocks run in waves
// of `slots` (resident blocks on the GPU), each wave as long as a block's
// groups plus kBlockOverhead groups' worth (its pipeline filling, its
// partial sums); fewer splits win ties.
constexpr int64_t kBlockOverhead = 4;

Grid grid_for(const Fp8BlockGemmArgs& a, int64_t slots) {
  Grid g = grid_with(a, 1);
  const int64_t tiles = g.n_tiles * g.m_tiles;
  slots = std::max<int64_t>(slots, 1);
  int64_t best = -1, best_splits = 1;
  for (int64_t splits = 1; splits <= g.groups; ++splits) {
    const int64_t per_block = (g.groups + splits - 1) / splits;
    if ((g.groups + per_block - 1) / per_block != splits) continue;  // the same as fewer
    const int64_t waves = (tiles * splits + slots - 1) / slots;
    int64_t cost = waves * (per_block + (splits > 1 ? kBlockOverhead : 0));
    if (a.row_split_splits > 0) cost = std::abs(splits - std::min(a.row_split_splits, g.groups));
    if (best < 0 || cost < best) {
      best = cost;
      best_splits = splits;
    }
  }
  return grid_with(a, best_splits);
}

// Resident blocks of fp8_row_split_kernel<kTileM> on `device` (shared
// memory bound), its shared memory limit raised first; 0 if the runtime
// refused (its error cleared). Cached per device (the first 64), refusals too.
template <int kTileM>
int64_t resident_blocks(int device, int sms) {
  static std::atomic<uint64_t> configured{0};
  static std::atomic<int> cached[64];  // 0: not asked yet, -1: refused
  const bool cacheable = device >= 0 && device < 64;
  const int known = cacheable ? cached[device].load(std::memory_order_relaxed) : 0;
  if (known != 0) return known > 0 ? int64_t{known} * sms : 0;
  constexpr int kBytes = XTile<kTileM>::kSmemBytes;
  int per_sm = 0;
  if (!configure_shared_memory(fp8_row_split_kernel<kTileM>, kBytes, configured) ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fp8_row_split_kernel<kTileM>, kThreads,
                                                    kBytes) != cudaSuccess ||
      per_sm < 1) {
    (void)cudaGetLastError();  // not the next launch's error
    per_sm = -1;
  }
  if (cacheable) cached[device].store(per_sm, std::memory_order_relaxed);
  return per_sm > 0 ? int64_t{per_sm} * sms : 0;
}

}  // namespace

bool fp8_row_split_plan(const Fp8BlockGemmArgs& a, Fp8RowSplitPlan& plan) {
  int device = 0, sms = 0;
  if (!a.row_scales || a.m > kFp8RowSplitMaxRows || !sm90::shape_ok(a, 1, kGroup, device, sms))
    return false;
  const int64_t slots =
      tile_rows_for(a.m) == 16 ? resident_blocks<16>(device, sms) : resident_blocks<8>(device, sms);
  if (slots == 0) return false;
  const Grid g = grid_for(a, slots);
  plan.splits = g.splits;
  plan.tile_rows = static_cast<int>(g.tile_m);
  plan.partial_bytes =
      g.splits > 1 ? static_cast<size_t>(g.m_tiles * g.n_tiles * g.groups * g.cols * kTileN) * 4
                   : 0;
  plan.counter_bytes = static_cast<size_t>(g.m_tiles * g.n_tiles) * sizeof(unsigned);
  return true;
}

const char* fp8_row_split(const Fp8BlockGemmArgs& a, const Fp8RowSplitPlan& plan, float* partials,
                          unsigned* counters, cudaStream_t stream) {
  const Grid g = grid_with(a, plan.splits);
  if (g.tile_m != plan.tile_rows || g.splits != plan.splits) return "not this product's plan";
  const Params p{a.xq,
                 a.x_scale,
                 a.w,
                 a.w_scale,
                 static_cast<const bf16*>(a.bias),
                 static_cast<bf16*>(a.out),
                 partials,
                 counters,
                 a.m,
                 a.n,
                 a.k,
                 g.n_tiles,
                 g.groups,
                 g.splits,
                 g.groups_per_split,
                 static_cast<int>(g.cols)};
  const dim3 grid(static_cast<unsigned>(g.n_tiles * g.splits), static_cast<unsigned>(g.m_tiles));
  const cudaError_t st = g.tile_m == 16
                             ? launch_dependent(fp8_row_split_kernel<16>, grid, dim3(kThreads),
                                                XTile<16>::kSmemBytes, stream, p)
                             : launch_dependent(fp8_row_split_kernel<8>, grid, dim3(kThreads),
                                                XTile<8>::kSmemBytes, stream, p);
  return st == cudaSuccess ? nullptr : cudaGetErrorString(st);
}

}  // namespace loom::cuda
