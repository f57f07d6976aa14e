// Paged attention entry: dispatch on head_dim to the kernels instantiated in
// paged_attention_hd*.cu (the common sizes fixed at compile time, any other
// multiple of 8 up to 256 on the runtime-sized path; FP8 caches: 64, 128 and
// 256, the rest runtime-sized). Split keys are merged by the kernel itself
// (the last partition of a token's heads to finish).
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

// FP8 caches: the common head sizes have their own kernels, the others the runtime-sized one.
template <int HD>
void launch_paged_attention_fp8_hd(const PagedAttentionArgs& a, cudaStream_t stream);
extern template void launch_paged_attention_fp8_hd<0>(const PagedAttentionArgs&, cudaStream_t);
extern template void launch_paged_attention_fp8_hd<64>(const PagedAttentionArgs&, cudaStream_t);
extern template void launch_paged_attention_fp8_hd<128>(const PagedAttentionArgs&, cudaStream_t);
extern template void launch_paged_attention_fp8_hd<256>(const PagedAttentionArgs&, cudaStream_t);

bool paged_attention_supports_head_dim(int64_t head_dim) {
  return head_dim >= 8 && head_dim <= 256 && head_dim % 8 == 0;
}

bool paged_attention_bf16(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (!paged_attention_supports_head_dim(a.head_dim)) return false;
  if (a.num_tokens <= 0) return true;
  if (a.k_scale) {
    switch (a.head_dim) {
      case 64:
        launch_paged_attention_fp8_hd<64>(a, stream);
        break;
      case 128:
        launch_paged_attention_fp8_hd<128>(a, stream);
        break;
      case 256:
        launch_paged_attention_fp8_hd<256>(a, stream);
        break;
      default:
        launch_paged_attention_fp8_hd<0>(a, stream);
        break;
    }
    return true;
  }
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
  return true;
}

}  // namespace loom::cuda
