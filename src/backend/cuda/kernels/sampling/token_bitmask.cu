// A token constraint's mask on the device: logits of disallowed tokens become
// -inf before argmax or sampling. One thread per (row, 32-token word): it
// reads the word once and writes only the masked tokens.
#include <cstdint>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {
namespace {

template <typename T>
__device__ __forceinline__ T neg_inf_of();
template <>
__device__ __forceinline__ float neg_inf_of<float>() {
  return -__int_as_float(0x7f800000);
}
template <>
__device__ __forceinline__ __nv_bfloat16 neg_inf_of<__nv_bfloat16>() {
  return __ushort_as_bfloat16(0xFF80);
}
template <>
__device__ __forceinline__ __half neg_inf_of<__half>() {
  return __ushort_as_half(0xFC00);
}

template <typename T>
__global__ void token_bitmask_kernel(char* logits, int64_t row_stride_bytes, int64_t vocab, const int32_t* rows,
                                     const uint32_t* words, int64_t words_per_row) {
  const int64_t w = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (w >= words_per_row) return;
  const int32_t i = blockIdx.y;
  const uint32_t bits = words[int64_t(i) * words_per_row + w];
  if (bits == 0xFFFFFFFFu) return;
  T* row = reinterpret_cast<T*>(logits + int64_t(rows[i]) * row_stride_bytes);
  const int64_t first = w * 32;
  const int64_t end = first + 32 < vocab ? first + 32 : vocab;
  for (int64_t t = first; t < end; ++t)
    if (!(bits >> (t - first) & 1u)) row[t] = neg_inf_of<T>();
}

}  // namespace

void apply_token_bitmask(DType type, void* logits, int64_t row_stride_bytes, int64_t vocab, const int32_t* rows,
                         int32_t num_rows, const uint32_t* words, cudaStream_t stream) {
  const int64_t words_per_row = (vocab + 31) / 32;
  constexpr int kThreads = 256;
  const dim3 grid(unsigned((words_per_row + kThreads - 1) / kThreads), unsigned(num_rows));
  char* base = static_cast<char*>(logits);
  switch (type) {
    case DType::F32:
      token_bitmask_kernel<float><<<grid, kThreads, 0, stream>>>(base, row_stride_bytes, vocab, rows, words,
                                                                 words_per_row);
      break;
    case DType::F16:
      token_bitmask_kernel<__half><<<grid, kThreads, 0, stream>>>(base, row_stride_bytes, vocab, rows, words,
                                                                  words_per_row);
      break;
    default:
      token_bitmask_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(base, row_stride_bytes, vocab, rows,
                                                                         words, words_per_row);
  }
}

}  // namespace loom::cuda
