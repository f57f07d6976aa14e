// Paged attention kernels over FP8 E4M3 caches for head_dim 64 (all heads-per-block variants).
#include "backend/cuda/kernels/attention/paged_attention.cuh"

namespace loom::cuda {
template void launch_paged_attention_fp8_hd<64>(const PagedAttentionArgs& a, cudaStream_t stream);
template int paged_attention_blocks_per_sm_fp8_hd<64>(int heads_per_block);
}  // namespace loom::cuda
