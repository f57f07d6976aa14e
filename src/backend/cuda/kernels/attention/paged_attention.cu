// Paged attention entry: dispatch on head_dim to the kernels instantiated in
// paged_attention_hd*.cu (the common sizes fixed at compile time, any other
// multiple of 8 up to 256 on the runtime-sized path), then, when the keys were split in partitions, merge
// the partitions' (max, sum, acc) per (token, head) into the bf16 output.
#include <cfloat>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {

template <int HD>
void launch_paged_attention_hd(const PagedAttentionArgs& a, cudaStream_t stream);
#define LOOM_ATTN_EXTERN(HD) extern template void launch_paged_attention_hd<HD>(const PagedAttentionArgs&, cudaStream_t);
LOOM_ATTN_EXTERN(0)  // runtime head size
LOOM_ATTN_EXTERN(16)
LOOM_ATTN_EXTERN(32)
LOOM_ATTN_EXTERN(48)
LOOM_ATTN_EXTERN(64)
LOOM_ATTN_EXTERN(80)
LOOM_ATTN_EXTERN(96)
LOOM_ATTN_EXTERN(112)
LOOM_ATTN_EXTERN(128)
LOOM_ATTN_EXTERN(160)
LOOM_ATTN_EXTERN(192)
LOOM_ATTN_EXTERN(256)
#undef LOOM_ATTN_EXTERN

namespace {

// One block per (token, head), one thread per dim. Partitions that saw no key
// carry max -FLT_MAX and sum 0 and are skipped (their acc is not written).
// The partials of block x are those of token token_index[x] (token x when
// token_index is null).
__global__ void combine_partitions_kernel(const float* acc, const float* ml, int partitions, int head_dim,
                                          const int32_t* token_index, bf16* out) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y;  // partial row: x * heads + head
  const int64_t tok = token_index ? token_index[blockIdx.x] : static_cast<int64_t>(blockIdx.x);
  const int64_t out_row = tok * gridDim.y + blockIdx.y;
  const float* m = ml + row * partitions * 2;
  float mx = -FLT_MAX;
  for (int p = 0; p < partitions; ++p)
    if (m[2 * p + 1] > 0.0f) mx = fmaxf(mx, m[2 * p]);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float sum = 0.0f, o = 0.0f;
    for (int p = 0; p < partitions; ++p) {
      if (!(m[2 * p + 1] > 0.0f)) continue;
      const float w = __expf(m[2 * p] - mx);
      sum = fmaf(w, m[2 * p + 1], sum);
      o = fmaf(w, acc[(row * partitions + p) * head_dim + d], o);
    }
    out[out_row * head_dim + d] = __float2bfloat16(sum > 0.0f ? o / sum : 0.0f);
  }
}

}  // namespace

bool paged_attention_supports_head_dim(int64_t head_dim) {
  return head_dim >= 8 && head_dim <= 256 && head_dim % 8 == 0;
}

bool paged_attention_bf16(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (!paged_attention_supports_head_dim(a.head_dim)) return false;
  if (a.num_tokens <= 0) return true;
  switch (a.head_dim) {
    case 16: launch_paged_attention_hd<16>(a, stream); break;
    case 32: launch_paged_attention_hd<32>(a, stream); break;
    case 48: launch_paged_attention_hd<48>(a, stream); break;
    case 64: launch_paged_attention_hd<64>(a, stream); break;
    case 80: launch_paged_attention_hd<80>(a, stream); break;
    case 96: launch_paged_attention_hd<96>(a, stream); break;
    case 112: launch_paged_attention_hd<112>(a, stream); break;
    case 128: launch_paged_attention_hd<128>(a, stream); break;
    case 160: launch_paged_attention_hd<160>(a, stream); break;
    case 192: launch_paged_attention_hd<192>(a, stream); break;
    case 256: launch_paged_attention_hd<256>(a, stream); break;
    default: launch_paged_attention_hd<0>(a, stream); break;
  }
  if (a.partial_acc) {
    const dim3 grid(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>(a.num_heads));
    combine_partitions_kernel<<<grid, a.head_dim, 0, stream>>>(a.partial_acc, a.partial_ml, a.num_partitions,
                                                               a.head_dim, a.token_index, static_cast<bf16*>(a.out));
  }
  return true;
}

}  // namespace loom::cuda
