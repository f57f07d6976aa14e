// Paged attention entry: dispatch on head_dim to the kernels instantiated in
// paged_attention_hd*.cu (the common sizes fixed at compile time, any other
// multiple of 8 up to 256 on the runtime-sized path). Head sizes 64, 128 and
// 256 run on tensor cores (paged_attention_mma_hd*.cu, _fp8_hd*.cu): FP8
// caches always, bf16 ones unless args.bf16_mma is off; FP8 caches of other
// sizes on the runtime-sized CUDA-core kernel. Split keys are merged by the
// kernel itself (the last partition of a token's heads to finish).
#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {

template <int HD>
void launch_paged_attention_hd(const PagedAttentionArgs& a, cudaStream_t stream);
template <int HD>
int paged_attention_blocks_per_sm_hd(int heads_per_block);
#define LOOM_ATTN_EXTERN(HD)                                                                   \
  extern template void launch_paged_attention_hd<HD>(const PagedAttentionArgs&, cudaStream_t); \
  extern template int paged_attention_blocks_per_sm_hd<HD>(int);
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

// FP8 caches of other head sizes: the runtime-sized CUDA-core kernel.
template <int HD>
void launch_paged_attention_fp8_hd(const PagedAttentionArgs& a, cudaStream_t stream);
template <int HD>
int paged_attention_blocks_per_sm_fp8_hd(int heads_per_block);
extern template void launch_paged_attention_fp8_hd<0>(const PagedAttentionArgs&, cudaStream_t);
extern template int paged_attention_blocks_per_sm_fp8_hd<0>(int);
// The tensor-core kernel (paged_attention_mma.cuh): head sizes 64, 128, 256.
template <int HD, class KV>
void launch_paged_attention_mma(const PagedAttentionArgs& a, cudaStream_t stream);
template <int HD, class KV>
int paged_attention_blocks_per_sm_mma(int heads_per_block);
#define LOOM_ATTN_EXTERN(HD, KV)                                                     \
  extern template void launch_paged_attention_mma<HD, KV>(const PagedAttentionArgs&, \
                                                          cudaStream_t);             \
  extern template int paged_attention_blocks_per_sm_mma<HD, KV>(int);
LOOM_ATTN_EXTERN(64, uint8_t)
LOOM_ATTN_EXTERN(128, uint8_t)
LOOM_ATTN_EXTERN(256, uint8_t)
LOOM_ATTN_EXTERN(64, bf16)
LOOM_ATTN_EXTERN(128, bf16)
LOOM_ATTN_EXTERN(256, bf16)
#undef LOOM_ATTN_EXTERN

constexpr bool mma_head_dim(int hd) {
  return hd == 64 || hd == 128 || hd == 256;
}

namespace {

// Calls f(std::integral_constant<int, HD>, std::bool_constant<fp8>) for the
// instantiation that serves head_dim (0: the runtime-sized one).
template <class F>
auto dispatch_head_dim(int64_t head_dim, bool fp8, F&& f) {
  using std::integral_constant;
  if (fp8) {
    switch (head_dim) {
      case 64:
        return f(integral_constant<int, 64>{}, std::true_type{});
      case 128:
        return f(integral_constant<int, 128>{}, std::true_type{});
      case 256:
        return f(integral_constant<int, 256>{}, std::true_type{});
      default:
        return f(integral_constant<int, 0>{}, std::true_type{});
    }
  }
  switch (head_dim) {
    case 16:
      return f(integral_constant<int, 16>{}, std::false_type{});
    case 32:
      return f(integral_constant<int, 32>{}, std::false_type{});
    case 48:
      return f(integral_constant<int, 48>{}, std::false_type{});
    case 64:
      return f(integral_constant<int, 64>{}, std::false_type{});
    case 80:
      return f(integral_constant<int, 80>{}, std::false_type{});
    case 96:
      return f(integral_constant<int, 96>{}, std::false_type{});
    case 112:
      return f(integral_constant<int, 112>{}, std::false_type{});
    case 128:
      return f(integral_constant<int, 128>{}, std::false_type{});
    case 160:
      return f(integral_constant<int, 160>{}, std::false_type{});
    case 192:
      return f(integral_constant<int, 192>{}, std::false_type{});
    case 256:
      return f(integral_constant<int, 256>{}, std::false_type{});
    default:
      return f(integral_constant<int, 0>{}, std::false_type{});
  }
}

}  // namespace

bool paged_attention_supports_head_dim(int64_t head_dim) {
  return head_dim >= 8 && head_dim <= 256 && head_dim % 8 == 0;
}

bool paged_attention_bf16(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (!paged_attention_supports_head_dim(a.head_dim)) return false;
  if (a.num_tokens <= 0) return true;
  dispatch_head_dim(a.head_dim, a.k_scale != nullptr, [&](auto hd, auto fp8) {
    constexpr int kHd = decltype(hd)::value;
    if constexpr (decltype(fp8)::value && mma_head_dim(kHd))
      launch_paged_attention_mma<kHd, uint8_t>(a, stream);
    else if constexpr (decltype(fp8)::value)
      launch_paged_attention_fp8_hd<kHd>(a, stream);
    else if constexpr (mma_head_dim(kHd)) {
      if (a.bf16_mma)
        launch_paged_attention_mma<kHd, bf16>(a, stream);
      else
        launch_paged_attention_hd<kHd>(a, stream);
    } else {
      launch_paged_attention_hd<kHd>(a, stream);
    }
  });
  return true;
}

int paged_attention_blocks_per_sm(int64_t head_dim, bool fp8_kv, int heads_per_block,
                                  bool bf16_mma) {
  if (!paged_attention_supports_head_dim(head_dim)) return 0;
  return dispatch_head_dim(head_dim, fp8_kv, [&](auto hd, auto fp8) {
    constexpr int kHd = decltype(hd)::value;
    if constexpr (decltype(fp8)::value && mma_head_dim(kHd))
      return paged_attention_blocks_per_sm_mma<kHd, uint8_t>(heads_per_block);
    else if constexpr (decltype(fp8)::value)
      return paged_attention_blocks_per_sm_fp8_hd<kHd>(heads_per_block);
    else if constexpr (mma_head_dim(kHd))
      return bf16_mma ? paged_attention_blocks_per_sm_mma<kHd, bf16>(heads_per_block)
                      : paged_attention_blocks_per_sm_hd<kHd>(heads_per_block);
    else
      return paged_attention_blocks_per_sm_hd<kHd>(heads_per_block);
  });
}

}  // namespace loom::cuda
