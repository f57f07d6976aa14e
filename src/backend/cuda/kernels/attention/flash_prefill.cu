// Flash prefill attention entry: dispatch on head_dim to the kernels
// instantiated in flash_prefill_hd*.cu.
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {

template <int HD>
void launch_flash_prefill_hd(const FlashPrefillArgs& a, cudaStream_t stream);
extern template void launch_flash_prefill_hd<64>(const FlashPrefillArgs&, cudaStream_t);
extern template void launch_flash_prefill_hd<128>(const FlashPrefillArgs&, cudaStream_t);
extern template void launch_flash_prefill_hd<256>(const FlashPrefillArgs&, cudaStream_t);
template <int HD>
void launch_flash_prefill_fp8_hd(const FlashPrefillArgs& a, cudaStream_t stream);
extern template void launch_flash_prefill_fp8_hd<64>(const FlashPrefillArgs&, cudaStream_t);
extern template void launch_flash_prefill_fp8_hd<128>(const FlashPrefillArgs&, cudaStream_t);
extern template void launch_flash_prefill_fp8_hd<256>(const FlashPrefillArgs&, cudaStream_t);

bool flash_prefill_supports_head_dim(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

bool flash_prefill_bf16(const FlashPrefillArgs& a, cudaStream_t stream) {
  if (!flash_prefill_supports_head_dim(a.head_dim)) return false;
  if (a.num_tiles <= 0) return true;
  if (a.k_scale) {  // FP8 E4M3 cache
    switch (a.head_dim) {
      case 64:
        launch_flash_prefill_fp8_hd<64>(a, stream);
        break;
      case 128:
        launch_flash_prefill_fp8_hd<128>(a, stream);
        break;
      default:
        launch_flash_prefill_fp8_hd<256>(a, stream);
        break;
    }
    return true;
  }
  switch (a.head_dim) {
    case 64: launch_flash_prefill_hd<64>(a, stream); break;
    case 128: launch_flash_prefill_hd<128>(a, stream); break;
    default: launch_flash_prefill_hd<256>(a, stream); break;
  }
  return true;
}

}  // namespace loom::cuda
