// Elementwise bf16 kernels: add, gated activations (SiLU, GELU-tanh), logit
// soft-capping, bias rows, and dtype conversion for weight uploads. Math in
// f32, one rounding to bf16 per output. 16-byte vectors when every pointer is
// 16-byte aligned, with a scalar tail.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {
namespace {

constexpr int kThreads = 256;

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct SiluMulOp {
  __device__ float operator()(float g, float u) const { return g / (1.0f + __expf(-g)) * u; }
};
struct GeluTanhMulOp {
  __device__ float operator()(float g, float u) const {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * u;
  }
};

// out[i] = op(a[i], b[i]); out may alias a.
template <class Op>
__global__ void binary_kernel(const bf16* a, const bf16* b, bf16* out, int64_t n, bool vec, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t n8 = n / 8;
    for (int64_t i = tid; i < n8; i += stride) {
      float x[8], y[8];
      bf16x8_to_float(reinterpret_cast<const uint4*>(a)[i], x);
      bf16x8_to_float(reinterpret_cast<const uint4*>(b)[i], y);
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] = op(x[j], y[j]);
      reinterpret_cast<uint4*>(out)[i] = float_to_bf16x8(x);
    }
    done = n8 * 8;
  }
  for (int64_t i = done + tid; i < n; i += stride)
    out[i] = __float2bfloat16(op(__bfloat162float(a[i]), __bfloat162float(b[i])));
}

__global__ void softcap_kernel(bf16* x, int64_t n, float cap, float inv_cap) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = __float2bfloat16(cap * tanhf(__bfloat162float(x[i]) * inv_cap));
}

__global__ void add_bias_rows_kernel(bf16* out, const bf16* bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = __float2bfloat16(__bfloat162float(out[i]) + __bfloat162float(bias[i % cols]));
}

template <class Src>
__device__ __forceinline__ float load_as_float(const Src* p, int64_t i);
template <>
__device__ __forceinline__ float load_as_float<float>(const float* p, int64_t i) { return p[i]; }
template <>
__device__ __forceinline__ float load_as_float<__half>(const __half* p, int64_t i) { return __half2float(p[i]); }
template <>
__device__ __forceinline__ float load_as_float<bf16>(const bf16* p, int64_t i) { return __bfloat162float(p[i]); }

template <class Src, class Dst>
__global__ void convert_kernel(const Src* src, Dst* dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = load_as_float(src, i);
    if constexpr (sizeof(Dst) == 4)
      dst[i] = v;
    else
      dst[i] = __float2bfloat16(v);
  }
}

template <class Dst>
void convert_to(DType src_type, const void* src, Dst* dst, int64_t n, cudaStream_t stream) {
  const unsigned blocks = grid_for(n, kThreads);
  switch (src_type) {
    case DType::F32:
      convert_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(src), dst, n);
      break;
    case DType::F16:
      convert_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const __half*>(src), dst, n);
      break;
    default:
      convert_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const bf16*>(src), dst, n);
  }
}

template <class Op>
void launch_binary(const void* a, const void* b, void* out, int64_t n, Op op, cudaStream_t stream) {
  if (n <= 0) return;
  const bool vec = aligned16(a) && aligned16(b) && aligned16(out);
  const unsigned blocks = grid_for(vec ? n / 8 + 1 : n, kThreads);
  binary_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const bf16*>(a), static_cast<const bf16*>(b),
                                                 static_cast<bf16*>(out), n, vec, op);
}

}  // namespace

void convert(DType src_type, const void* src, DType dst_type, void* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (dst_type == DType::F32)
    convert_to(src_type, src, static_cast<float*>(dst), n, stream);
  else
    convert_to(src_type, src, static_cast<bf16*>(dst), n, stream);
}

void add_bias_rows(void* out, const void* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols <= 0) return;
  add_bias_rows_kernel<<<grid_for(rows * cols, kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(out), static_cast<const bf16*>(bias), rows, cols);
}

void add_bf16(void* a, const void* b, int64_t n, cudaStream_t stream) {
  launch_binary(a, b, a, n, AddOp{}, stream);
}

void gated_activation_bf16(const void* gate, const void* up, void* out, int64_t n, bool gelu,
                           cudaStream_t stream) {
  if (gelu)
    launch_binary(gate, up, out, n, GeluTanhMulOp{}, stream);
  else
    launch_binary(gate, up, out, n, SiluMulOp{}, stream);
}

void softcap_bf16(void* x, int64_t n, float cap, cudaStream_t stream) {
  if (n <= 0) return;
  softcap_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<bf16*>(x), n, cap, 1.0f / cap);
}

}  // namespace loom::cuda
