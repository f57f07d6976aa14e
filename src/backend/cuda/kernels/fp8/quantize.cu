// FP8 quantisation kernels (fp8_kernels.h): a linear layer's bf16 input rows
// (per row, per 128-column group, or with a static scale) and, at load, a
// plain weight's rows. One CUDA block per row; a row whose amax is needed
// first is held in registers in between (or, past 16384 values, read again).
#include <algorithm>

#include "backend/cuda/kernels/fp8/fp8.cuh"
#include "backend/cuda/kernels/fp8/fp8_kernels.h"
#include "backend/cuda/kernels/launch.cuh"

namespace loom::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kGroupChunks = 16;  // 8-value chunks per 128-column group
constexpr int kCached = 8;        // 8-value chunks per thread kept in registers (Token rows)

template <Fp8ActMode kMode>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const bf16* __restrict__ x, int64_t rows, int64_t k,
                         const float* __restrict__ static_scale, uint8_t* __restrict__ q,
                         float* __restrict__ scale, int64_t scale_ld) {
  // A kernel launched after this one with PDL (fp8_row_split) may start
  // loading its weights now; its pdl_wait() still waits for this kernel's end.
  pdl_trigger();
  __shared__ float scratch[33];
  const int64_t row = blockIdx.x;
  const int64_t chunks = k / 8;
  uint8_t* qr = q + row * k;
  const bf16* xr = x + row * k;
  const bool pad = row >= rows;  // a padding row: zeros
  if constexpr (kMode == Fp8ActMode::Group) {
    // Lanes 16h .. 16h + 15 of a warp hold one group's 16 chunks (256
    // threads step by 16 groups); every lane runs the same iterations so the
    // shuffles see the whole warp.
    const int64_t iters = (chunks + kThreads - 1) / kThreads;
    for (int64_t it = 0; it < iters; ++it) {
      const int64_t i = it * kThreads + threadIdx.x;
      const bool valid = i < chunks;
      float f[8];
      if (valid && !pad) {
        bf16x8_to_float(__ldg(reinterpret_cast<const uint4*>(xr) + i), f);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) f[j] = 0.0f;
      }
      float m = amax8(f);
#pragma unroll
      for (int off = kGroupChunks / 2; off > 0; off >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
      const float s = fp8_scale_for_amax(m);
      if (valid) {
        reinterpret_cast<uint2*>(qr)[i] = fp8x8_from_float(f, 1.0f / s);
        if (i % kGroupChunks == 0) scale[(i / kGroupChunks) * scale_ld + row] = s;
      }
    }
    return;
  }
  // Token: a row of up to kCached * kThreads chunks stays in registers
  // between the amax and the quantising pass (one read of x); longer rows
  // are read twice.
  uint4 cached[kCached];
  const bool in_regs = kMode == Fp8ActMode::Token && !pad && chunks <= int64_t{kCached} * kThreads;
  float s;
  if constexpr (kMode == Fp8ActMode::Static) {
    s = *static_scale;
  } else {
    float m = 0.0f;
    if (in_regs) {
#pragma unroll
      for (int j = 0; j < kCached; ++j) {
        const int64_t i = static_cast<int64_t>(j) * kThreads + threadIdx.x;
        cached[j] =
            i < chunks ? __ldg(reinterpret_cast<const uint4*>(xr) + i) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int j = 0; j < kCached; ++j) {
        float f[8];
        bf16x8_to_float(cached[j], f);
        m = fmaxf(m, amax8(f));
      }
    } else if (!pad) {
#pragma unroll 4
      for (int64_t i = threadIdx.x; i < chunks; i += kThreads) {
        float f[8];
        bf16x8_to_float(__ldg(reinterpret_cast<const uint4*>(xr) + i), f);
        m = fmaxf(m, amax8(f));
      }
    }
    s = fp8_scale_for_amax(block_max(m, scratch));
  }
  const float inv = 1.0f / s;
  if (in_regs) {
#pragma unroll
    for (int j = 0; j < kCached; ++j) {
      const int64_t i = static_cast<int64_t>(j) * kThreads + threadIdx.x;
      if (i >= chunks) break;
      float f[8];
      bf16x8_to_float(cached[j], f);
      reinterpret_cast<uint2*>(qr)[i] = fp8x8_from_float(f, inv);
    }
  } else {
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < chunks; i += kThreads) {
      float f[8];
      if (pad) {
#pragma unroll
        for (int j = 0; j < 8; ++j) f[j] = 0.0f;
      } else {
        bf16x8_to_float(__ldg(reinterpret_cast<const uint4*>(xr) + i), f);
      }
      reinterpret_cast<uint2*>(qr)[i] = fp8x8_from_float(f, inv);
    }
  }
  if (threadIdx.x == 0) scale[row] = s;
}

// scale_fp8_product: product rows grid-strided over blockIdx.y, 8 columns
// per thread when cols allows it; out = bf16(fp8_scale_bias(...)).
__global__ void __launch_bounds__(kThreads)
    scale_product_kernel(const float* __restrict__ in, bf16* __restrict__ out, int64_t rows,
                         int64_t cols, const float* __restrict__ row_scale,
                         const float* __restrict__ col_scale, const bf16* __restrict__ bias) {
  const bool vec = cols % 8 == 0;
  const int64_t units = vec ? cols / 8 : cols;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float rs = row_scale[r];
    const float* i_row = in + r * cols;
    bf16* o_row = out + r * cols;
    for (int64_t u = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; u < units;
         u += static_cast<int64_t>(gridDim.x) * kThreads) {
      if (vec) {
        const float4 lo = reinterpret_cast<const float4*>(i_row)[2 * u];
        const float4 hi = reinterpret_cast<const float4*>(i_row)[2 * u + 1];
        const float f[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        uint4 packed;
        bf16* h = reinterpret_cast<bf16*>(&packed);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int64_t c = u * 8 + j;
          h[j] = __float2bfloat16(
              fp8_scale_bias(f[j], rs, col_scale[c], bias ? bias[c] : __ushort_as_bfloat16(0)));
        }
        reinterpret_cast<uint4*>(o_row)[u] = packed;
      } else {
        o_row[u] = __float2bfloat16(
            fp8_scale_bias(i_row[u], rs, col_scale[u], bias ? bias[u] : __ushort_as_bfloat16(0)));
      }
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    quantize_weight_rows_kernel(const T* __restrict__ w, int64_t k, uint8_t* __restrict__ q,
                                float* __restrict__ scale) {
  __shared__ float scratch[33];
  const int64_t row = blockIdx.x;
  const T* wr = w + row * k;
  float m = 0.0f;
  for (int64_t i = threadIdx.x; i < k; i += kThreads) m = fmaxf(m, fabsf(to_float(wr[i])));
  const float s = fp8_scale_for_amax(block_max(m, scratch));
  const float inv = 1.0f / s;
  for (int64_t i = threadIdx.x; i < k; i += kThreads)
    q[row * k + i] = static_cast<uint8_t>(fp8x2_from_float(to_float(wr[i]) * inv, 0.0f) & 0xffu);
  if (threadIdx.x == 0) scale[row] = s;
}

}  // namespace

void quantize_fp8_rows(const void* x, int64_t rows, int64_t padded_rows, int64_t k, Fp8ActMode mode,
                       const float* static_scale, uint8_t* q, float* scale, int64_t scale_ld,
                       cudaStream_t stream) {
  if (padded_rows <= 0 || k <= 0) return;
  const auto grid = static_cast<unsigned>(padded_rows);
  const auto* xb = static_cast<const bf16*>(x);
  switch (mode) {
    case Fp8ActMode::Token:
      quantize_rows_kernel<Fp8ActMode::Token>
          <<<grid, kThreads, 0, stream>>>(xb, rows, k, static_scale, q, scale, scale_ld);
      break;
    case Fp8ActMode::Group:
      quantize_rows_kernel<Fp8ActMode::Group>
          <<<grid, kThreads, 0, stream>>>(xb, rows, k, static_scale, q, scale, scale_ld);
      break;
    case Fp8ActMode::Static:
      quantize_rows_kernel<Fp8ActMode::Static>
          <<<grid, kThreads, 0, stream>>>(xb, rows, k, static_scale, q, scale, scale_ld);
      break;
  }
}

void scale_fp8_product(const float* in, void* out, int64_t rows, int64_t cols,
                       const float* row_scale, const float* col_scale, const void* bias,
                       cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t units = cols % 8 == 0 ? cols / 8 : cols;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((units + kThreads - 1) / kThreads, 64)),
                  static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  scale_product_kernel<<<grid, kThreads, 0, stream>>>(in, static_cast<bf16*>(out), rows, cols,
                                                      row_scale, col_scale,
                                                      static_cast<const bf16*>(bias));
}

void quantize_fp8_weight_rows(DType type, const void* w, int64_t n, int64_t k, uint8_t* q,
                              float* scale, cudaStream_t stream) {
  if (n <= 0 || k <= 0) return;
  const auto grid = static_cast<unsigned>(n);
  switch (type) {
    case DType::F32:
      quantize_weight_rows_kernel<float>
          <<<grid, kThreads, 0, stream>>>(static_cast<const float*>(w), k, q, scale);
      break;
    case DType::F16:
      quantize_weight_rows_kernel<__half>
          <<<grid, kThreads, 0, stream>>>(static_cast<const __half*>(w), k, q, scale);
      break;
    default:
      quantize_weight_rows_kernel<bf16>
          <<<grid, kThreads, 0, stream>>>(static_cast<const bf16*>(w), k, q, scale);
      break;
  }
}

}  // namespace loom::cuda
