// Paged attention kernels for head sizes without their own instantiation (a
// multiple of 8 up to 256, e.g. 144, 176, 208, 224, 240): the head size is read
// at run time and every key uses 32 lanes (see paged_attention.cuh).
#include "backend/cuda/kernels/attention/paged_attention.cuh"

namespace loom::cuda {
template void launch_paged_attention_hd<0>(const PagedAttentionArgs& a, cudaStream_t stream);
template int paged_attention_blocks_per_sm_hd<0>(int heads_per_block);
}  // namespace loom::cuda
