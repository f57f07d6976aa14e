// Kernels after fused projection GEMMs. split_qkv: blocks of one token split
// the [q | k | v] row of the fused QKV GEMM into q and k/v (or straight into
// the KV cache slot, skipping write_kv), rotating q and k on the way when
// asked: a vector kernel for the usual shapes, and a general one (cos/sin
// once per token and pair, in shared memory, as rope.cu does) for rotary
// sizes the vector kernel cannot cut in 16-byte units.
// gated_fused: act(gate) * up over the [gate | up] halves of one row, 8 values
// a thread where the shapes allow (with the row quantised to FP8 too, for an
// FP8 down projection, one block per row).
// An FP8 KV cache gets k and v quantised with their head's scale (k rotated
// and rounded to bf16 first, as the unfused path stores it before write_kv).
#include <algorithm>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/fp8/fp8.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/launch.cuh"

namespace loom::cuda {
namespace {

constexpr int kMaxHalf = 256;
constexpr int kThreads = 256;

// General path. Block (token t, y) handles kHeadsPerBlock of the token's head slots [q
// heads | k heads | v heads]: several blocks per token, so a decode step of a
// few tokens still spreads over the GPU. Each block computes the token's
// cos/sin table when it has a rotated head.
constexpr int kHeadsPerBlock = 4;
constexpr int kSplitThreads = 128;

// Where one head's values go: a bf16 row (q, k or v, or a bf16 cache slot) or
// an FP8 cache slot, quantised with inv = 1 / the head's scale. Neither: a
// padding token's cache row (nothing is written).
struct HeadOut {
  bf16* b = nullptr;
  uint8_t* q8 = nullptr;
  float inv = 1.0f;

  __device__ bool valid() const { return b != nullptr || q8 != nullptr; }
  __device__ static float round_bf16(float f) { return __bfloat162float(__float2bfloat16(f)); }
  // dims [d, d + 8) from floats, or from 8 bf16 values
  __device__ void store8(int d, const float (&f)[8]) const {
    if (q8) {
      float r[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) r[i] = round_bf16(f[i]);
      *reinterpret_cast<uint2*>(q8 + d) = fp8x8_from_float(r, inv);
    } else {
      *reinterpret_cast<uint4*>(b + d) = float_to_bf16x8(f);
    }
  }
  __device__ void store8(int d, const uint4& bits) const {
    if (q8) {
      float f[8];
      bf16x8_to_float(bits, f);
      *reinterpret_cast<uint2*>(q8 + d) = fp8x8_from_float(f, inv);
    } else {
      *reinterpret_cast<uint4*>(b + d) = bits;
    }
  }
  __device__ void store1(int d, float f) const {
    if (q8)
      q8[d] = static_cast<uint8_t>(fp8x2_from_float(round_bf16(f) * inv, 0.0f) & 0xffu);
    else
      b[d] = __float2bfloat16(f);
  }
};

// Token t's output row for KV head h (k or v): its k/v row, or its cache slot.
__device__ HeadOut kv_head_out(const SplitQkvArgs& a, int64_t t, int64_t slot, int h, bool is_k) {
  HeadOut o;
  const int64_t hd = a.head_dim;
  if (!a.slots) {
    o.b = (is_k ? a.k : a.v) + (t * a.kv_heads + h) * hd;
  } else if (slot >= 0) {
    const int64_t off = (slot * a.kv_heads + h) * hd;
    if (a.k_cache8) {
      o.q8 = (is_k ? a.k_cache8 : a.v_cache8) + off;
      o.inv = 1.0f / (is_k ? a.k_scale : a.v_scale)[h];
    } else {
      o.b = (is_k ? a.k_cache : a.v_cache) + off;
    }
  }
  return o;
}

__global__ void split_qkv_kernel(const bf16* qkv, SplitQkvArgs a) {
  __shared__ float cs[kMaxHalf], sn[kMaxHalf];
  const int64_t t = blockIdx.x;
  const int h_begin = static_cast<int>(blockIdx.y) * kHeadsPerBlock;
  const int rot_heads = a.heads + a.kv_heads;  // q and k heads: rotated
  const int h_end = min(h_begin + kHeadsPerBlock, rot_heads + a.kv_heads);
  const int half = a.rotary_dim / 2;
  if (half > 0 && h_begin < rot_heads) rope_table(static_cast<float>(a.positions[t]), a.inv_freq, half, a.mscale, cs, sn);
  const int hd = a.head_dim;
  const int64_t row = static_cast<int64_t>(a.heads + 2 * a.kv_heads) * hd;
  const bf16* in = qkv + t * row;
  const int64_t slot = a.slots ? a.slots[t] : -1;
  // Rotated heads of this block: pairs in the first rotary_dim dims, copies after.
  const int r_end = min(h_end, rot_heads);
  const int per_head = half + (hd - a.rotary_dim);  // work items per head
  for (int w = threadIdx.x; w < (r_end - h_begin) * per_head; w += blockDim.x) {
    const int h = h_begin + w / per_head, j = w % per_head;
    const bf16* src = in + static_cast<int64_t>(h) * hd;
    HeadOut dst;
    if (h < a.heads)
      dst.b = a.q + (t * a.heads + h) * hd;
    else
      dst = kv_head_out(a, t, slot, h - a.heads, true);
    if (!dst.valid()) continue;
    if (j < half) {
      const int x = a.interleaved ? 2 * j : j, y = a.interleaved ? 2 * j + 1 : j + half;
      float x0 = __bfloat162float(src[x]), x1 = __bfloat162float(src[y]);
      rotate_pair(x0, x1, cs[j], sn[j]);
      dst.store1(x, x0);
      dst.store1(y, x1);
    } else {
      const int d = a.rotary_dim + (j - half);
      dst.store1(d, __bfloat162float(src[d]));
    }
  }
  // v heads of this block: plain copies.
  const int v_begin = max(h_begin, rot_heads) - rot_heads, v_end = h_end - rot_heads;
  const bf16* vs = in + static_cast<int64_t>(rot_heads) * hd;
  for (int i = threadIdx.x; i < (v_end - v_begin) * hd; i += blockDim.x) {
    const int h = v_begin + i / hd, d = i % hd;
    const HeadOut dst = kv_head_out(a, t, slot, h, false);
    if (dst.valid()) dst.store1(d, __bfloat162float(vs[static_cast<int64_t>(h) * hd + d]));
  }
}

// Vector path (head_dim a multiple of 8; rotary_dim a multiple of 16, or of
// 8 when interleaved): one thread per 16-byte unit of one head, every load
// issued before any store, so a decode step costs one round trip to memory
// rather than one per element. A rotated head's units: neox, rotary_dim / 16
// pair units (dims [8u, 8u + 8) with [half + 8u, ...)); interleaved,
// rotary_dim / 8 units of 4 adjacent pairs; then (head_dim - rotary_dim) / 8
// copies. A v head (or any head without rotation): head_dim / 8 copies. Each
// thread computes its own factors (rope_cos_sin, as rope_table does).
__global__ void split_qkv_vec_kernel(const bf16* __restrict__ qkv, SplitQkvArgs a, int rot_units, int units_per_rot,
                                     int units_per_v) {
  const int64_t t = blockIdx.x;
  const int rot_heads = a.heads + a.kv_heads;
  const int u = static_cast<int>(blockIdx.y) * blockDim.x + threadIdx.x;
  const int rot_total = rot_heads * units_per_rot;
  if (u >= rot_total + a.kv_heads * units_per_v) return;
  const int hd = a.head_dim;
  const int64_t row = static_cast<int64_t>(a.heads + 2 * a.kv_heads) * hd;
  const bf16* in = qkv + t * row;
  const int64_t slot = a.slots ? a.slots[t] : -1;
  if (u >= rot_total) {  // v head: a copy
    const int h = (u - rot_total) / units_per_v, d = ((u - rot_total) % units_per_v) * 8;
    const HeadOut v_dst = kv_head_out(a, t, slot, h, false);
    if (!v_dst.valid()) return;
    v_dst.store8(
        d,
        __ldg(reinterpret_cast<const uint4*>(in + static_cast<int64_t>(rot_heads + h) * hd + d)));
    return;
  }
  const int h = u / units_per_rot, j = u % units_per_rot;
  HeadOut dst;
  if (h < a.heads) {
    dst.b = a.q + (t * a.heads + h) * hd;
  } else {
    dst = kv_head_out(a, t, slot, h - a.heads, true);
    if (!dst.valid()) return;
  }
  const bf16* src = in + static_cast<int64_t>(h) * hd;
  if (j >= rot_units) {  // past the rotary dims: a copy
    const int d = a.rotary_dim + (j - rot_units) * 8;
    dst.store8(d, __ldg(reinterpret_cast<const uint4*>(src + d)));
    return;
  }
  const float pos = static_cast<float>(a.positions[t]);
  const int half = a.rotary_dim / 2;
  if (a.interleaved) {  // dims [8j, 8j + 8): pairs (2i, 2i + 1) of frequency 4j + i
    float x[8];
    bf16x8_to_float(__ldg(reinterpret_cast<const uint4*>(src + 8 * j)), x);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float c, s;
      rope_cos_sin(pos, a.inv_freq[4 * j + i], a.mscale, c, s);
      rotate_pair(x[2 * i], x[2 * i + 1], c, s);
    }
    dst.store8(8 * j, x);
    return;
  }
  float x[8], y[8];  // dims 8j + i and half + 8j + i: the pairs of frequency 8j + i
  bf16x8_to_float(__ldg(reinterpret_cast<const uint4*>(src + 8 * j)), x);
  bf16x8_to_float(__ldg(reinterpret_cast<const uint4*>(src + half + 8 * j)), y);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    float c, s;
    rope_cos_sin(pos, a.inv_freq[8 * j + i], a.mscale, c, s);
    rotate_pair(x[i], y[i], c, s);
  }
  dst.store8(8 * j, x);
  dst.store8(half + 8 * j, y);
}

template <bool kGelu>
__device__ __forceinline__ float gated_value(float g, float u) {
  if constexpr (kGelu) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * u;
  } else {
    return g / (1.0f + __expf(-g)) * u;
  }
}

// 8 values a thread (16-byte loads and stores; inter a multiple of 8, the
// rows 16-byte aligned): block (x, y) takes chunks x * blockDim.x + tid of
// rows y, y + gridDim.y, ... (no divisions). The same values as the scalar
// kernel below, which serves the other shapes.
template <bool kGelu>
__global__ void gated_fused_vec_kernel(const bf16* gu, bf16* out, int64_t rows, int64_t inter) {
  pdl_trigger();  // the GEMV after this one may start loading its weights
  const int64_t chunks = inter / 8;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const auto* row = reinterpret_cast<const uint4*>(gu + r * 2 * inter);
    float g[8], u[8], y[8];
    bf16x8_to_float(row[c], g);
    bf16x8_to_float(row[chunks + c], u);
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = gated_value<kGelu>(g[e], u[e]);
    reinterpret_cast<uint4*>(out + r * inter)[c] = float_to_bf16x8(y);
  }
}

template <bool kGelu>
__global__ void gated_fused_kernel(const bf16* gu, bf16* out, int64_t rows, int64_t inter) {
  pdl_trigger();  // the GEMV after this one may start loading its weights
  const int64_t n = rows * inter;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / inter, c = i % inter;
    out[i] = __float2bfloat16(gated_value<kGelu>(__bfloat162float(gu[r * 2 * inter + c]),
                                                 __bfloat162float(gu[r * 2 * inter + inter + c])));
  }
}

// The same values, one block per row, 8 at a time, with the row also
// quantised to FP8 (Fp8RowsOut): a thread's first kCachedRowChunks chunks
// are all loaded before any is computed (the loads in flight together) and
// stay in registers between the amax and the quantising pass; later ones are
// read back from out (this thread's own stores).
constexpr int kCachedRowChunks = 4;

template <bool kGelu>
__global__ void __launch_bounds__(1024) gated_fused_fp8_kernel(const bf16* gu, bf16* out, int64_t inter, Fp8RowsOut fp8) {
  pdl_trigger();
  __shared__ float scratch[33];
  const int64_t row = blockIdx.x, chunks = inter / 8;
  const auto* g_row = reinterpret_cast<const uint4*>(gu + row * 2 * inter);
  const auto* u_row = reinterpret_cast<const uint4*>(gu + row * 2 * inter + inter);
  auto* o_row = reinterpret_cast<uint4*>(out + row * inter);
  uint4 cached[kCachedRowChunks], gv[kCachedRowChunks], uv[kCachedRowChunks];
#pragma unroll
  for (int j = 0; j < kCachedRowChunks; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < chunks) {
      gv[j] = g_row[i];
      uv[j] = u_row[i];
    }
  }
  float amax = 0.0f;
  // One chunk: the activation stored, its amax taken from the rounded values.
  auto activate = [&](const uint4& gp, const uint4& up, int64_t i) {
    float g[8], u[8], y[8];
    bf16x8_to_float(gp, g);
    bf16x8_to_float(up, u);
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = gated_value<kGelu>(g[e], u[e]);
    const uint4 packed = float_to_bf16x8(y);
    o_row[i] = packed;
    bf16x8_to_float(packed, y);  // quantised from the values stored
    amax = fmaxf(amax, amax8(y));
    return packed;
  };
#pragma unroll
  for (int j = 0; j < kCachedRowChunks; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < chunks) cached[j] = activate(gv[j], uv[j], i);
  }
  for (int64_t i = threadIdx.x + int64_t{kCachedRowChunks} * blockDim.x; i < chunks;
       i += blockDim.x)
    activate(g_row[i], u_row[i], i);
  const float s = fp8_block_row_scale(amax, fp8.static_scale, scratch);
  const float inv = 1.0f / s;
  auto* q = reinterpret_cast<uint2*>(fp8.q + row * inter);
  for (int64_t i = threadIdx.x, j = 0; i < chunks; i += blockDim.x, ++j) {
    uint4 packed;
    if (j < kCachedRowChunks) {
#pragma unroll
      for (int c = 0; c < kCachedRowChunks; ++c)
        if (c == j) packed = cached[c];
    } else {
      packed = o_row[i];
    }
    float y[8];
    bf16x8_to_float(packed, y);
    q[i] = fp8x8_from_float(y, inv);
  }
  if (threadIdx.x == 0) fp8.scale[row] = s;
}

}  // namespace

void split_qkv_bf16(const void* qkv, int64_t tokens, const SplitQkvArgs& args, cudaStream_t stream) {
  if (tokens <= 0) return;
  const int hd = args.head_dim, rot = args.rotary_dim;
  if (hd % 8 == 0 && rot % (args.interleaved ? 8 : 16) == 0) {
    const int rot_units = args.interleaved ? rot / 8 : rot / 16;
    const int units_per_rot = rot_units + (hd - rot) / 8, units_per_v = hd / 8;
    const int units = (args.heads + args.kv_heads) * units_per_rot + args.kv_heads * units_per_v;
    const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((units + kSplitThreads - 1) / kSplitThreads));
    split_qkv_vec_kernel<<<grid, kSplitThreads, 0, stream>>>(static_cast<const bf16*>(qkv), args, rot_units,
                                                            units_per_rot, units_per_v);
    return;
  }
  const int slots = args.heads + 2 * args.kv_heads;
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((slots + kHeadsPerBlock - 1) / kHeadsPerBlock));
  split_qkv_kernel<<<grid, kSplitThreads, 0, stream>>>(static_cast<const bf16*>(qkv), args);
}

bool gated_activation_fused_bf16(const void* gate_up, void* out, int64_t rows, int64_t inter, bool gelu,
                                 cudaStream_t stream, const Fp8RowsOut* fp8) {
  if (rows <= 0 || inter <= 0) return true;
  const auto* gu = static_cast<const bf16*>(gate_up);
  auto* o = static_cast<bf16*>(out);
  if (fp8) {
    if (inter % 16 != 0 || !aligned16(gate_up) || !aligned16(out) || !aligned16(fp8->q)) return false;
    // Threads enough for kCachedRowChunks chunks each (fewer, smaller blocks:
    // more rows resident at once), at most 1024.
    const int64_t needed = (inter / 8 + kCachedRowChunks - 1) / kCachedRowChunks;
    int threads = static_cast<int>(std::min<int64_t>((needed + 31) / 32 * 32, 1024));
    const auto grid = static_cast<unsigned>(rows);
    if (gelu)
      gated_fused_fp8_kernel<true><<<grid, threads, 0, stream>>>(gu, o, inter, *fp8);
    else
      gated_fused_fp8_kernel<false><<<grid, threads, 0, stream>>>(gu, o, inter, *fp8);
    return true;
  }
  if (inter % 8 == 0 && aligned16(gate_up) && aligned16(out)) {
    const dim3 grid(static_cast<unsigned>((inter / 8 + kThreads - 1) / kThreads),
                    static_cast<unsigned>(rows < 65535 ? rows : 65535));
    if (gelu)
      gated_fused_vec_kernel<true><<<grid, kThreads, 0, stream>>>(gu, o, rows, inter);
    else
      gated_fused_vec_kernel<false><<<grid, kThreads, 0, stream>>>(gu, o, rows, inter);
    return true;
  }
  const unsigned grid = grid_for(rows * inter, kThreads);
  if (gelu)
    gated_fused_kernel<true><<<grid, kThreads, 0, stream>>>(gu, o, rows, inter);
  else
    gated_fused_kernel<false><<<grid, kThreads, 0, stream>>>(gu, o, rows, inter);
  return true;
}

}  // namespace loom::cuda
