// GEMMs of the CUDA backend: out[M, N] = x[M, K] . w[N, K]^T (+ bias[N]), bf16
// in and out, fp32 accumulation. Up to kGemvMaxRows rows (decode steps of a
// few sequences) go to our bandwidth-bound GEMV kernel (LOOM_GEMV=0 turns it
// off); the rest go through cuBLASLt. One plan (descriptors and
// the heuristic's best algorithm) is cached per shape, bias and pointer
// alignment, up to kGemmExactRows rows per row count, past that per row bucket
// (gemm_plan_rows): steps that mix prefill chunks and decodes have a new
// row count nearly every step, and the heuristic query costs ~250 us of host
// time. Where cuBLASLt offers no algorithm (or none with the bias
// epilogue) it falls back to cublasGemmEx and a separate bias kernel. Internal
// to backend/cuda; used from one thread. LOOM_CUBLAS_CHECK lives here, so
// that only the GEMM code parses the cuBLAS headers.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <map>
#include <tuple>

#include "backend/cuda/cuda_util.h"

#define LOOM_CUBLAS_CHECK(expr)                                                             \
  do {                                                                                      \
    const cublasStatus_t loom_cublas_st_ = (expr);                                          \
    if (loom_cublas_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                              \
      ::loom::cuda::throw_cuda_error(__FILE__, __LINE__, #expr,                             \
                                     cublasGetStatusString(loom_cublas_st_));               \
  } while (0)

namespace loom::cuda {

// The row count whose heuristic query serves m rows: m itself up to
// kGemmExactRows, past that the top of m's bucket (eight buckets per power of
// two: 257-288, 289-320, ..., 481-512, 513-576, ...), so that a bucket's
// algorithm was chosen for at most 1/8 more rows than it runs.
constexpr int64_t kGemmExactRows = 256;
int64_t gemm_plan_rows(int64_t m);

class Gemm {
 public:
  explicit Gemm(cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Row-major bf16 x [m, k], w [n, k], out [m, n]; bias bf16 [n] or null. All
  // device pointers; asynchronous on the stream.
  void run(const void* x, const void* w, const void* bias, void* out, int64_t m, int64_t n, int64_t k);

 private:
  // (rows, n, k, bias, alignment of x, w, out in bytes); rows is
  // gemm_plan_rows(m), or -m for a plan made for exactly m rows past
  // kGemmExactRows (where a bucket's algorithm refused m).
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, int, int, int>;
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    int64_t rows = 0;         // the row count b and d describe now
    bool lt = false;          // a cuBLASLt algorithm was found
    bool fused_bias = false;  // that algorithm adds the bias in its epilogue
  };
  // Plans made for m rows: b and d are m columns (column-major) wide.
  static void set_rows(Plan& p, int64_t m);
  Plan& plan_for(const Key& key, int64_t m);
  // One cuBLASLt launch of p for m rows; its status (not thrown).
  cublasStatus_t launch(Plan& p, const void* x, const void* w, const void* bias, void* out,
                        int64_t m);
  Plan make_plan(const Key& key, int64_t m, bool with_bias);
  static void destroy(Plan& p);

  cudaStream_t stream_;
  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool gemv_ = true;
  std::map<Key, Plan> plans_;
  bool exact_plans_ = false;  // a bucket's algorithm refused some m: plans_ holds exact ones
};

}  // namespace loom::cuda
