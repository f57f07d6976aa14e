// Paged attention kernels for head_dim 128 (all heads-per-block variants).
#include "backend/cuda/kernels/attention/paged_attention.cuh"

namespace loom::cuda {
template void launch_paged_attention_hd<128>(const PagedAttentionArgs& a, cudaStream_t stream);
template int paged_attention_blocks_per_sm_hd<128>(int heads_per_block);
}  // namespace loom::cuda
