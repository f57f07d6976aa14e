// KV cache writes: token t's K and V rows ([kv_heads * head_dim] bf16 each) go
// to cache slot slots[t] (block * block_size + offset); slot < 0 marks a
// padding token and writes nothing. Slots are checked on the host. FP8 caches
// get each value quantised with its KV head's scale (8 values per thread).
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/fp8/fp8.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {
namespace {

template <class V>
__global__ void write_kv_kernel(const V* k, const V* v, const int64_t* slots, int64_t row, V* kc, V* vc) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot < 0) return;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    kc[slot * row + i] = k[t * row + i];
    vc[slot * row + i] = v[t * row + i];
  }
}

__global__ void write_kv_fp8_kernel(const bf16* __restrict__ k, const bf16* __restrict__ v,
                                    const int64_t* __restrict__ slots, int64_t row,
                                    int64_t head_dim, const float* __restrict__ k_scale,
                                    const float* __restrict__ v_scale, uint8_t* __restrict__ kc,
                                    uint8_t* __restrict__ vc) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot < 0) return;
  for (int64_t i = threadIdx.x; i < row / 8; i += blockDim.x) {
    const int64_t head = i * 8 / head_dim;
    float f[8];
    bf16x8_to_float(__ldg(reinterpret_cast<const uint4*>(k + t * row) + i), f);
    reinterpret_cast<uint2*>(kc + slot * row)[i] = fp8x8_from_float(f, 1.0f / k_scale[head]);
    bf16x8_to_float(__ldg(reinterpret_cast<const uint4*>(v + t * row) + i), f);
    reinterpret_cast<uint2*>(vc + slot * row)[i] = fp8x8_from_float(f, 1.0f / v_scale[head]);
  }
}

}  // namespace

void write_kv_fp8(const void* k, const void* v, const int64_t* slots, int64_t tokens,
                  int64_t row_elems, int64_t head_dim, const float* k_scale, const float* v_scale,
                  void* k_cache, void* v_cache, cudaStream_t stream) {
  if (tokens <= 0 || row_elems <= 0) return;
  write_kv_fp8_kernel<<<static_cast<unsigned>(tokens), 128, 0, stream>>>(
      static_cast<const bf16*>(k), static_cast<const bf16*>(v), slots, row_elems, head_dim, k_scale,
      v_scale, static_cast<uint8_t*>(k_cache), static_cast<uint8_t*>(v_cache));
}

void write_kv_bf16(const void* k, const void* v, const int64_t* slots, int64_t tokens, int64_t row_elems,
                   void* k_cache, void* v_cache, cudaStream_t stream) {
  if (tokens <= 0 || row_elems <= 0) return;
  const auto grid = static_cast<unsigned>(tokens);
  if (row_elems % 8 == 0 && aligned16(k) && aligned16(v) && aligned16(k_cache) && aligned16(v_cache))
    write_kv_kernel<<<grid, 128, 0, stream>>>(static_cast<const uint4*>(k), static_cast<const uint4*>(v), slots,
                                              row_elems / 8, static_cast<uint4*>(k_cache),
                                              static_cast<uint4*>(v_cache));
  else
    write_kv_kernel<<<grid, 128, 0, stream>>>(static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v),
                                              slots, row_elems, static_cast<uint16_t*>(k_cache),
                                              static_cast<uint16_t*>(v_cache));
}

}  // namespace loom::cuda
