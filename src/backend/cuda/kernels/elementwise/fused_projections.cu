// Kernels after fused projection GEMMs. split_qkv: one block per token splits
// the [q | k | v] row of the fused QKV GEMM into q and k/v (or straight into
// the KV cache slot, skipping write_kv), rotating q and k on the way when
// asked (cos/sin once per token and pair, in shared memory, as rope.cu does).
// gated_fused: act(gate) * up over the [gate | up] halves of one row.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {
namespace {

constexpr int kMaxHalf = 256;
constexpr int kThreads = 256;

// Block (token t, y) handles kHeadsPerBlock of the token's head slots [q
// heads | k heads | v heads]: several blocks per token, so a decode step of a
// few tokens still spreads over the GPU. Each block computes the token's
// cos/sin table when it has a rotated head.
constexpr int kHeadsPerBlock = 4;
constexpr int kSplitThreads = 128;

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
  bf16* k_dst = a.slots ? (slot >= 0 ? a.k_cache + slot * a.kv_heads * hd : nullptr) : a.k + t * a.kv_heads * hd;
  bf16* v_dst = a.slots ? (slot >= 0 ? a.v_cache + slot * a.kv_heads * hd : nullptr) : a.v + t * a.kv_heads * hd;
  bf16* q_dst = a.q + t * a.heads * hd;
  // Rotated heads of this block: pairs in the first rotary_dim dims, copies after.
  const int r_end = min(h_end, rot_heads);
  const int per_head = half + (hd - a.rotary_dim);  // work items per head
  for (int w = threadIdx.x; w < (r_end - h_begin) * per_head; w += blockDim.x) {
    const int h = h_begin + w / per_head, j = w % per_head;
    const bf16* src = in + static_cast<int64_t>(h) * hd;
    bf16* dst = h < a.heads ? q_dst + static_cast<int64_t>(h) * hd
                            : (k_dst ? k_dst + static_cast<int64_t>(h - a.heads) * hd : nullptr);
    if (!dst) continue;
    if (j < half) {
      const int x = a.interleaved ? 2 * j : j, y = a.interleaved ? 2 * j + 1 : j + half;
      const float x0 = __bfloat162float(src[x]), x1 = __bfloat162float(src[y]);
      dst[x] = __float2bfloat16(x0 * cs[j] - x1 * sn[j]);
      dst[y] = __float2bfloat16(x0 * sn[j] + x1 * cs[j]);
    } else {
      const int d = a.rotary_dim + (j - half);
      dst[d] = src[d];
    }
  }
  // v heads of this block: plain copies.
  const int v_begin = max(h_begin, rot_heads) - rot_heads, v_end = h_end - rot_heads;
  if (v_dst && v_end > v_begin) {
    const bf16* vs = in + static_cast<int64_t>(rot_heads + v_begin) * hd;
    bf16* vd = v_dst + static_cast<int64_t>(v_begin) * hd;
    for (int i = threadIdx.x; i < (v_end - v_begin) * hd; i += blockDim.x) vd[i] = vs[i];
  }
}

template <bool kGelu>
__global__ void gated_fused_kernel(const bf16* gu, bf16* out, int64_t rows, int64_t inter) {
  const int64_t n = rows * inter;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / inter, c = i % inter;
    const float g = __bfloat162float(gu[r * 2 * inter + c]);
    const float u = __bfloat162float(gu[r * 2 * inter + inter + c]);
    float y;
    if constexpr (kGelu) {
      constexpr float kSqrt2OverPi = 0.7978845608028654f;
      y = 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * u;
    } else {
      y = g / (1.0f + __expf(-g)) * u;
    }
    out[i] = __float2bfloat16(y);
  }
}

}  // namespace

void split_qkv_bf16(const void* qkv, int64_t tokens, const SplitQkvArgs& args, cudaStream_t stream) {
  if (tokens <= 0) return;
  const int slots = args.heads + 2 * args.kv_heads;
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((slots + kHeadsPerBlock - 1) / kHeadsPerBlock));
  split_qkv_kernel<<<grid, kSplitThreads, 0, stream>>>(static_cast<const bf16*>(qkv), args);
}

void gated_activation_fused_bf16(const void* gate_up, void* out, int64_t rows, int64_t inter, bool gelu,
                                 cudaStream_t stream) {
  if (rows <= 0 || inter <= 0) return;
  const unsigned grid = grid_for(rows * inter, kThreads);
  if (gelu)
    gated_fused_kernel<true><<<grid, kThreads, 0, stream>>>(static_cast<const bf16*>(gate_up),
                                                            static_cast<bf16*>(out), rows, inter);
  else
    gated_fused_kernel<false><<<grid, kThreads, 0, stream>>>(static_cast<const bf16*>(gate_up),
                                                             static_cast<bf16*>(out), rows, inter);
}

}  // namespace loom::cuda
