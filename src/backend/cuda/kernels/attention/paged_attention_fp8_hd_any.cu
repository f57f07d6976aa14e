// Paged attention kernels over FP8 E4M3 caches for head sizes without their own FP8 instantiation
// (read at run time) (all heads-per-block variants).
#include "backend/cuda/kernels/attention/paged_attention.cuh"

namespace loom::cuda {
template void launch_paged_attention_fp8_hd<0>(const PagedAttentionArgs& a, cudaStream_t stream);
template int paged_attention_blocks_per_sm_fp8_hd<0>(int heads_per_block);
}  // namespace loom::cuda
