// Flash prefill attention kernel for head_dim 64 (see flash_prefill.cuh).
#include "backend/cuda/kernels/attention/flash_prefill.cuh"

namespace loom::cuda {
template void launch_flash_prefill_hd<64>(const FlashPrefillArgs& a, cudaStream_t stream);
}  // namespace loom::cuda
