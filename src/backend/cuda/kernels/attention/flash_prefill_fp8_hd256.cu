// Flash prefill attention kernel over FP8 E4M3 caches for head_dim 256 (see flash_prefill.cuh).
#include "backend/cuda/kernels/attention/flash_prefill.cuh"

namespace loom::cuda {
template void launch_flash_prefill_fp8_hd<256>(const FlashPrefillArgs& a, cudaStream_t stream);
}  // namespace loom::cuda
