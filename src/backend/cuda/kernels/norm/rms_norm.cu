// RMSNorm over rows of bf16 activations, optionally fused with the residual
// add (residual += x, then normalise the new residual, as HF does in bf16).
// One block per row; each thread keeps to the same elements in both passes, so
// out may alias x or residual. Sum of squares in f32.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/launch.cuh"

namespace loom::cuda {
namespace {

template <class W>
__device__ __forceinline__ float weight_at(const W* w, int64_t i) {
  if constexpr (sizeof(W) == 4)
    return w[i];
  else
    return __bfloat162float(w[i]);
}

template <class W, bool kResidual>
__global__ void rms_norm_kernel(const bf16* x_all, bf16* residual_all, const W* w,
                                float offset, float eps, bf16* out_all, int64_t h, bool vec) {
  pdl_trigger();  // the GEMV after this one may start loading its weights
  __shared__ float scratch[33];
  const int64_t row = blockIdx.x;
  const bf16* x = x_all + row * h;
  bf16* res = kResidual ? residual_all + row * h : nullptr;
  bf16* out = out_all + row * h;
  // The row this block normalises: x, or the updated residual.
  const bf16* src = kResidual ? res : x;
  float ss = 0.0f;
  const int64_t n8 = vec ? h / 8 : 0;
  // A thread's first 8 values stay in registers for the second pass (with one
  // vector per thread, the usual case, the row is read once).
  float first[8];
  for (int64_t i = threadIdx.x; i < n8; i += blockDim.x) {
    float v[8];
    bf16x8_to_float(reinterpret_cast<const uint4*>(x)[i], v);
    if constexpr (kResidual) {
      float r[8];
      bf16x8_to_float(reinterpret_cast<const uint4*>(res)[i], r);
#pragma unroll
      for (int j = 0; j < 8; ++j) r[j] += v[j];
      const uint4 packed = float_to_bf16x8(r);
      reinterpret_cast<uint4*>(res)[i] = packed;
      bf16x8_to_float(packed, v);  // the rounded sum, as stored
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) ss += v[j] * v[j];
    if (i == threadIdx.x) {
#pragma unroll
      for (int j = 0; j < 8; ++j) first[j] = v[j];
    }
  }
  for (int64_t i = n8 * 8 + threadIdx.x; i < h; i += blockDim.x) {
    float v = __bfloat162float(x[i]);
    if constexpr (kResidual) {
      const bf16 r = __float2bfloat16(__bfloat162float(res[i]) + v);
      res[i] = r;
      v = __bfloat162float(r);
    }
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(h) + eps);
  for (int64_t i = threadIdx.x; i < n8; i += blockDim.x) {
    float v[8];
    if (i == threadIdx.x) {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = first[j];
    } else {
      bf16x8_to_float(reinterpret_cast<const uint4*>(src)[i], v);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = v[j] * inv * (weight_at(w, i * 8 + j) + offset);
    reinterpret_cast<uint4*>(out)[i] = float_to_bf16x8(v);
  }
  for (int64_t i = n8 * 8 + threadIdx.x; i < h; i += blockDim.x)
    out[i] = __float2bfloat16(__bfloat162float(src[i]) * inv * (weight_at(w, i) + offset));
}

template <class W>
void launch(const void* x, void* residual, const W* w, float offset, float eps, void* out, int64_t rows,
            int64_t h, cudaStream_t stream) {
  const bool vec = h % 8 == 0 && aligned16(x) && aligned16(out) && (!residual || aligned16(residual));
  const int64_t items = vec ? h / 8 : h;
  int threads = static_cast<int>(((items + 31) / 32) * 32);
  threads = threads < 32 ? 32 : (threads > 1024 ? 1024 : threads);
  const auto* xs = static_cast<const bf16*>(x);
  auto* os = static_cast<bf16*>(out);
  if (residual)
    rms_norm_kernel<W, true><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
        xs, static_cast<bf16*>(residual), w, offset, eps, os, h, vec);
  else
    rms_norm_kernel<W, false><<<static_cast<unsigned>(rows), threads, 0, stream>>>(xs, nullptr, w, offset,
                                                                                    eps, os, h, vec);
}

}  // namespace

void rms_norm_bf16(const void* x, void* residual, const void* w, DType w_type, float offset, float eps,
                   void* out, int64_t rows, int64_t h, cudaStream_t stream) {
  if (rows <= 0 || h <= 0) return;
  if (w_type == DType::F32)
    launch(x, residual, static_cast<const float*>(w), offset, eps, out, rows, h, stream);
  else
    launch(x, residual, static_cast<const bf16*>(w), offset, eps, out, rows, h, stream);
}

}  // namespace loom::cuda
