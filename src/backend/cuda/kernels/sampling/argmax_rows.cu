// Greedy token choice on the device: the index of each row's largest logit,
// the lowest index among equal maxima, NaNs skipped (a row of only NaNs gives
// 0) — the Sampler's rule at temperature 0. One block per row; each thread
// scans its share with 16-byte loads, keeping the first of equal maxima, and
// (value, index) pairs are reduced by warp shuffles and shared memory.
#include <climits>
#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {
namespace {

constexpr int kArgmaxThreads = 512;

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

struct Best {
  float v;    // -inf when there is no candidate
  int32_t i;  // INT32_MAX: no candidate (only NaNs so far)
};

// a is better than b: larger, or equal and earlier. A candidate equal to
// -inf still beats "no candidate" (-inf, INT32_MAX).
__device__ __forceinline__ bool better(float av, int32_t ai, float bv, int32_t bi) {
  return av > bv || (av == bv && ai < bi);
}

__device__ __forceinline__ void consider(Best& b, float v, int32_t i) {
  // Indices arrive in increasing order per thread, so ties keep the first.
  if (!isnan(v) && (v > b.v || b.i == INT32_MAX)) {
    b.v = v;
    b.i = i;
  }
}

__device__ __forceinline__ Best warp_best(Best b) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, b.v, off);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, b.i, off);
    if (better(ov, oi, b.v, b.i)) {
      b.v = ov;
      b.i = oi;
    }
  }
  return b;
}


template <class T>
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_rows_kernel(const T* logits, int64_t vocab, bool vec, int32_t* out) {
  __shared__ float s_v[kArgmaxThreads / 32];
  __shared__ int32_t s_i[kArgmaxThreads / 32];
  const T* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  Best b{neg_inf(), INT32_MAX};
  const int64_t n8 = vec ? vocab / 8 : 0;
#pragma unroll 4  // several 16-byte loads in flight per thread (one row per block: latency-bound)
  for (int64_t j = threadIdx.x; j < n8; j += kArgmaxThreads) {
    float f[8];
    load8(row + j * 8, f);
#pragma unroll
    for (int k = 0; k < 8; ++k) consider(b, f[k], static_cast<int32_t>(j * 8 + k));
  }
  for (int64_t i = n8 * 8 + threadIdx.x; i < vocab; i += kArgmaxThreads)
    consider(b, to_float(row[i]), static_cast<int32_t>(i));
  b = warp_best(b);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    s_v[warp] = b.v;
    s_i[warp] = b.i;
  }
  __syncthreads();
  if (warp == 0) {
    b = lane < kArgmaxThreads / 32 ? Best{s_v[lane], s_i[lane]} : Best{neg_inf(), INT32_MAX};
    b = warp_best(b);
    if (lane == 0) out[blockIdx.x] = b.i == INT32_MAX ? 0 : b.i;
  }
}

template <class T>
void launch(const void* logits, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream) {
  const int64_t row_bytes = vocab * static_cast<int64_t>(sizeof(T));
  const bool vec = row_bytes % 16 == 0 && aligned16(logits);
  argmax_rows_kernel<T><<<static_cast<unsigned>(rows), kArgmaxThreads, 0, stream>>>(static_cast<const T*>(logits),
                                                                                  vocab, vec, out);
}

}  // namespace

void argmax_rows(DType type, const void* logits, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return;
  switch (type) {
    case DType::F32: launch<float>(logits, rows, vocab, out, stream); break;
    case DType::F16: launch<__half>(logits, rows, vocab, out, stream); break;
    default: launch<bf16>(logits, rows, vocab, out, stream); break;
  }
}

}  // namespace loom::cuda
