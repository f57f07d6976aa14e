// Rotary position embedding in place on bf16 [tokens, heads, head_dim]: pairs
// (2i, 2i+1) when interleaved (GPT-J), else (i, i + rotary_dim/2) (NEOX /
// HF rotate_half). The angle is pos * inv_freq in f32 as HF computes it; cos
// and sin use the accurate sincosf (angles reach 1e5 rad), once per token and
// pair, shared by the token's heads through shared memory.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {
namespace {

constexpr int kMaxHalf = 256;  // rotary_dim <= 512

__global__ void rope_kernel(bf16* x_all, int64_t heads, int64_t head_dim, const int32_t* positions,
                            const float* inv_freq, int half, bool interleaved, float mscale) {
  __shared__ float cs[kMaxHalf], sn[kMaxHalf];
  const int64_t t = blockIdx.x;
  rope_table(static_cast<float>(positions[t]), inv_freq, half, mscale, cs, sn);
  bf16* x = x_all + t * heads * head_dim;
  const int64_t pairs = heads * half;
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int64_t h = p / half;
    const int j = static_cast<int>(p % half);
    bf16* v = x + h * head_dim;
    const int a = interleaved ? 2 * j : j, b = interleaved ? 2 * j + 1 : j + half;
    float x0 = __bfloat162float(v[a]), x1 = __bfloat162float(v[b]);
    rotate_pair(x0, x1, cs[j], sn[j]);
    v[a] = __float2bfloat16(x0);
    v[b] = __float2bfloat16(x1);
  }
}

}  // namespace

void rope_bf16(void* x, int64_t tokens, int64_t heads, int64_t head_dim, const int32_t* positions,
               const float* inv_freq, int rotary_dim, bool interleaved, float mscale, cudaStream_t stream) {
  if (tokens <= 0 || heads <= 0) return;
  rope_kernel<<<static_cast<unsigned>(tokens), 256, 0, stream>>>(static_cast<bf16*>(x), heads, head_dim,
                                                                  positions, inv_freq, rotary_dim / 2,
                                                                  interleaved, mscale);
}

}  // namespace loom::cuda
