// Decode attention over bf16 caches for head_dim 64, on tensor cores (all heads-per-block
// variants).
#include "backend/cuda/kernels/attention/paged_attention_mma.cuh"

namespace loom::cuda {
template void launch_paged_attention_mma<64, bf16>(const PagedAttentionArgs& a,
                                                    cudaStream_t stream);
template int paged_attention_blocks_per_sm_mma<64, bf16>(int heads_per_block);
}  // namespace loom::cuda
