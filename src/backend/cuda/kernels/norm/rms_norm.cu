// RMSNorm over rows of bf16 activations, optionally fused with the residual
// add (residual += x, then normalise the new residual, as HF does in bf16),
// and optionally writing its output rows quantised to FP8 as well (for an FP8
// linear layer next: quantize_fp8_rows' Token or Static arithmetic on the
// bf16 values written). One block per row; each thread keeps to the same
// elements in every pass, so out may alias x or residual. Sum of squares in f32.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/fp8/fp8.cuh"
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

// kFp8: fp8.q/fp8.scale get the output rows quantised (vec only).
template <class W, bool kResidual, bool kFp8>
__global__ void __launch_bounds__(1024)
    rms_norm_kernel(const bf16* x_all, bf16* residual_all, const W* w, float offset, float eps,
                    bf16* out_all, int64_t h, bool vec, Fp8RowsOut fp8) {
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
  // Chunk i of `from` as floats, a thread's first from `first`.
  auto chunk = [&](int64_t i, const bf16* from, float(&v)[8]) {
    if (i == threadIdx.x) {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = first[j];
    } else {
      bf16x8_to_float(reinterpret_cast<const uint4*>(from)[i], v);
    }
  };
  float amax = 0.0f;  // kFp8: of this thread's rounded outputs
  for (int64_t i = threadIdx.x; i < n8; i += blockDim.x) {
    float v[8];
    chunk(i, src, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = v[j] * inv * (weight_at(w, i * 8 + j) + offset);
    const uint4 packed = float_to_bf16x8(v);
    reinterpret_cast<uint4*>(out)[i] = packed;
    if constexpr (kFp8) {
      bf16x8_to_float(packed, v);  // quantised from the values stored
      amax = fmaxf(amax, amax8(v));
      if (i == threadIdx.x) {
#pragma unroll
        for (int j = 0; j < 8; ++j) first[j] = v[j];
      }
    }
  }
  for (int64_t i = n8 * 8 + threadIdx.x; i < h; i += blockDim.x)
    out[i] = __float2bfloat16(__bfloat162float(src[i]) * inv * (weight_at(w, i) + offset));
  if constexpr (kFp8) {
    const float s = fp8_block_row_scale(amax, fp8.static_scale, scratch);
    const float q_inv = 1.0f / s;
    auto* q = reinterpret_cast<uint2*>(fp8.q + row * h);
    for (int64_t i = threadIdx.x; i < n8; i += blockDim.x) {
      float v[8];
      chunk(i, out, v);  // `first` holds the rounded outputs now; the rest this thread's stores
      q[i] = fp8x8_from_float(v, q_inv);
    }
    if (threadIdx.x == 0) fp8.scale[row] = s;
  }
}

template <class W, bool kResidual>
void launch(const void* x, void* residual, const W* w, float offset, float eps, void* out,
            int64_t rows, int64_t h, bool vec, const Fp8RowsOut* fp8, cudaStream_t stream) {
  const int64_t items = vec ? h / 8 : h;
  int threads = static_cast<int>(((items + 31) / 32) * 32);
  threads = threads < 32 ? 32 : (threads > 1024 ? 1024 : threads);
  const auto* xs = static_cast<const bf16*>(x);
  auto* rs = static_cast<bf16*>(residual);
  auto* os = static_cast<bf16*>(out);
  const auto grid = static_cast<unsigned>(rows);
  if (fp8)
    rms_norm_kernel<W, kResidual, true>
        <<<grid, threads, 0, stream>>>(xs, rs, w, offset, eps, os, h, vec, *fp8);
  else
    rms_norm_kernel<W, kResidual, false>
        <<<grid, threads, 0, stream>>>(xs, rs, w, offset, eps, os, h, vec, {});
}

template <class W>
bool launch(const void* x, void* residual, const W* w, float offset, float eps, void* out,
            int64_t rows, int64_t h, const Fp8RowsOut* fp8, cudaStream_t stream) {
  const bool vec =
      h % 8 == 0 && aligned16(x) && aligned16(out) && (!residual || aligned16(residual));
  if (fp8 && !(vec && aligned16(fp8->q) && h % 16 == 0)) return false;
  if (residual)
    launch<W, true>(x, residual, w, offset, eps, out, rows, h, vec, fp8, stream);
  else
    launch<W, false>(x, residual, w, offset, eps, out, rows, h, vec, fp8, stream);
  return true;
}

}  // namespace

bool rms_norm_bf16(const void* x, void* residual, const void* w, DType w_type, float offset,
                   float eps, void* out, int64_t rows, int64_t h, cudaStream_t stream,
                   const Fp8RowsOut* fp8) {
  if (rows <= 0 || h <= 0) return true;
  if (w_type == DType::F32)
    return launch(x, residual, static_cast<const float*>(w), offset, eps, out, rows, h, fp8,
                  stream);
  return launch(x, residual, static_cast<const bf16*>(w), offset, eps, out, rows, h, fp8, stream);
}

}  // namespace loom::cuda
