// matmul: out[M, N] = x[M, K] . w[N, K]^T (+ bias): the checks, then gemm.h,
// which takes every weight type through the cache-blocked GEMM (prefill,
// batched decode) or, below kGemmMinRowsQuant rows (float weights:
// kGemmMinRowsFloat), the row path (decode). Both give a row the same bits,
// so a row's result never depends on the rows batched with it.
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"

namespace loom::cpu {

namespace {

// The shapes and types of one product; false when it is empty.
bool check_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) {
  LOOM_CHECK(w.ndim() == 2, "matmul weight must be 2-D [N, K], got {}", shape_str(w.shape()));
  const int64_t n = w.dim(0), k = w.dim(1), m = x.rows();
  LOOM_CHECK(x.dtype() == DType::F32 && out.dtype() == DType::F32,
             "matmul activations must be f32");
  LOOM_CHECK(x.cols() == k, "matmul x {} does not match weight {}", shape_str(x.shape()),
             shape_str(w.shape()));
  LOOM_CHECK(out.rows() == m && out.cols() == n, "matmul out {} must be [{}, {}]",
             shape_str(out.shape()), m, n);
  if (bias)
    LOOM_CHECK(bias->dtype() == DType::F32 && bias->numel() == n, "matmul bias must be f32 [{}]",
               n);
  LOOM_CHECK(x.data() != out.data(), "matmul cannot run in place");
  LOOM_CHECK(gemm_supports(w.dtype()), "matmul does not support {} weights", dtype_name(w.dtype()));
  return m > 0 && n > 0;
}

}  // namespace

void matmul(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  if (check_matmul(x, w, bias, out))
    gemm_matmul(pool, x, w, bias ? bias->data_as<const float>() : nullptr, out);
}

void matmul_many(ThreadPool& pool, const Tensor& x, const std::vector<Backend::LinearJob>& jobs) {
  std::vector<GemmJob> work;
  for (const Backend::LinearJob& j : jobs)
    if (check_matmul(x, j.w->weight, j.bias, *j.out))
      work.push_back({&j.w->weight, j.bias ? j.bias->data_as<const float>() : nullptr, j.out});
  if (!work.empty()) gemm_matmul_many(pool, x, work);
}

}  // namespace loom::cpu
