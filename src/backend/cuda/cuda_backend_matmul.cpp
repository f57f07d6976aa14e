// CudaBackend::matmul: bf16 GEMMs through cuda::Gemm (cuBLASLt, or the GEMV
// kernel of kernels/gemv/ for a few rows), with the bias converted to bf16 for
// the GEMM epilogue.
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels/kernels.h"
#include "backend/quant/quant.h"

namespace loom::cuda {
namespace {

uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace

void CudaBackend::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  check_cuda_tensor(w, DType::BF16, "matmul weight");
  LOOM_CHECK(w.ndim() == 2, "matmul weight must be 2-D [N, K], got {}", shape_str(w.shape()));
  const int64_t n = w.dim(0), k = w.dim(1), m = x.rows();
  check_cuda_tensor(x, DType::BF16, "matmul x");
  check_cuda_tensor(out, DType::BF16, "matmul out");
  LOOM_CHECK(x.cols() == k, "matmul x {} does not match weight {}", shape_str(x.shape()),
             shape_str(w.shape()));
  LOOM_CHECK(out.rows() == m && out.cols() == n, "matmul out {} must be [{}, {}]",
             shape_str(out.shape()), m, n);
  const void* bias_dev = nullptr;
  if (bias) {
    LOOM_CHECK(bias->numel() == n, "matmul bias must have {} values, got {}", n, bias->numel());
    bias_dev = bias_as_bf16(*bias);
  }
  gemm_->run(x.data(), w.data(), bias_dev, out.data(), m, n, k);
  check_launch();
}

// The bias as a bf16 device vector (the type the GEMM epilogue reads).

const void* CudaBackend::bias_as_bf16(const Tensor& bias) {
  const DType t = bias.dtype();
  LOOM_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16,
             "matmul bias must be f32, f16 or bf16");
  const int64_t n = bias.numel();
  if (bias.device() == Device::Cuda && t == DType::BF16) return bias.data();
  void* d = bias_buf_.ensure(static_cast<size_t>(n) * 2, stream_);
  if (bias.device() == Device::Cuda) {
    cuda::convert(t, bias.data(), DType::BF16, d, n, stream_);
  } else {
    check_not_capturing("a host bias");
    host_floats_.resize(static_cast<size_t>(n));
    quant::dequantize_row(t, bias.data(), host_floats_.data(), n);
    std::vector<uint16_t> b(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) b[i] = f32_to_bf16_bits(host_floats_[i]);
    uploader_.upload(d, b.data(), b.size() * 2, stream_);
  }
  return d;
}

}  // namespace loom::cuda
