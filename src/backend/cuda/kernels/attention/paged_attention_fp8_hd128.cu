// Decode attention over FP8 E4M3 caches for head_dim 128, on tensor cores (all heads-per-block
// variants).
#include "backend/cuda/kernels/attention/paged_attention_mma.cuh"

namespace loom::cuda {
template void launch_paged_attention_mma<128, uint8_t>(const PagedAttentionArgs& a,
                                                       cudaStream_t stream);
template int paged_attention_blocks_per_sm_mma<128, uint8_t>(int heads_per_block);
}  // namespace loom::cuda
