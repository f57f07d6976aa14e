// cuBLASLt plans and launches (see gemm.h). Row-major out = x . w^T is the
// column-major D[n, m] = op(A) B with A = w as a column-major [k, n] matrix
// transposed and B = x as a column-major [k, m] matrix: TRANSA = T, TRANSB = N.
#include "backend/cuda/gemm.h"

#include <cstdlib>
#include <string_view>
#include <tuple>

#include "backend/cuda/kernels/kernels.h"
#include "core/logging.h"

namespace loom::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

int alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && (v % static_cast<uintptr_t>(a)) != 0) a /= 2;
  return a;
}

}  // namespace

int64_t gemm_plan_rows(int64_t m) {
  if (m <= kGemmExactRows) return m;
  int64_t octave = kGemmExactRows;  // the power of two below m
  while (octave * 2 < m) octave *= 2;
  const int64_t step = octave / 8;
  return (m + step - 1) / step * step;
}

Gemm::Gemm(cudaStream_t stream) : stream_(stream) {
  LOOM_CUBLAS_CHECK(cublasLtCreate(&lt_));
  LOOM_CUBLAS_CHECK(cublasCreate(&blas_));
  LOOM_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  workspace_bytes_ = kWorkspaceBytes;
  LOOM_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
  LOOM_CUBLAS_CHECK(cublasSetWorkspace(blas_, workspace_, workspace_bytes_));
  const char* env = std::getenv("LOOM_GEMV");
  gemv_ = !(env && std::string_view(env) == "0");
}

Gemm::~Gemm() {
  for (auto& [key, plan] : plans_) destroy(plan);
  if (blas_) cublasDestroy(blas_);
  if (lt_) cublasLtDestroy(lt_);
  if (workspace_) cudaFree(workspace_);
}

void Gemm::destroy(Plan& p) {
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.d) cublasLtMatrixLayoutDestroy(p.d);
  p = Plan{};
}

void Gemm::set_rows(Plan& p, int64_t m) {
  if (p.rows == m || !p.lt) return;
  const auto cols = static_cast<uint64_t>(m);
  LOOM_CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(p.b, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  LOOM_CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(p.d, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  p.rows = m;
}

Gemm::Plan Gemm::make_plan(const Key& key, int64_t m, bool with_bias) {
  [[maybe_unused]] const auto [rows, n, k, bias, align_x, align_w, align_out] = key;
  Plan p;
  p.rows = m;
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  LOOM_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  LOOM_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  if (with_bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    const cudaDataType_t bias_type = CUDA_R_16BF;
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                     sizeof(bias_type)));
  }
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, static_cast<uint64_t>(k),
                                               static_cast<uint64_t>(n), k));
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, static_cast<uint64_t>(k),
                                               static_cast<uint64_t>(m), k));
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_16BF, static_cast<uint64_t>(n),
                                               static_cast<uint64_t>(m), n));

  cublasLtMatmulPreference_t pref = nullptr;
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  const uint32_t al_a = static_cast<uint32_t>(align_w), al_b = static_cast<uint32_t>(align_x),
                 al_d = static_cast<uint32_t>(align_out);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    p.algo = result.algo;
    p.lt = true;
    p.fused_bias = with_bias;
  }
  return p;
}

// key's plan, made (for m rows: the bucket's top, or exactly m) if new.
Gemm::Plan& Gemm::plan_for(const Key& key, int64_t m) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan p = make_plan(key, m, std::get<3>(key));
  if (!p.lt && std::get<3>(key)) {  // no algorithm with the bias epilogue: plain GEMM + bias kernel
    destroy(p);
    p = make_plan(key, m, false);
  }
  return plans_.emplace(key, p).first->second;
}

cublasStatus_t Gemm::launch(Plan& p, const void* x, const void* w, const void* bias, void* out,
                            int64_t m) {
  set_rows(p, m);
  if (p.fused_bias)
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &bias, sizeof(bias)));
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(lt_, p.desc, &alpha, w, p.a, x, p.b, &beta, out, p.d, out, p.d, &p.algo,
                        workspace_, workspace_bytes_, stream_);
}

void Gemm::run(const void* x, const void* w, const void* bias, void* out, int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0) return;
  if (gemv_ && gemv_supported(m, k, x, w)) {
    gemv_bf16(x, w, bias, out, m, n, k, stream_);
    return;
  }
  Key key{gemm_plan_rows(m), n, k, bias != nullptr, alignment_of(x), alignment_of(w),
          alignment_of(out)};
  // A plan made for exactly m rows, where the bucket's algorithm refused m.
  Key exact = key;
  std::get<0>(exact) = -m;
  const bool bucketed = std::get<0>(key) != m;
  auto found = bucketed && exact_plans_ ? plans_.find(exact) : plans_.end();
  Plan* p = found != plans_.end() ? &found->second : &plan_for(key, std::get<0>(key));
  const float alpha = 1.0f, beta = 0.0f;
  if (p->lt) {
    cublasStatus_t st = launch(*p, x, w, bias, out, m);
    if (st != CUBLAS_STATUS_SUCCESS && bucketed && found == plans_.end()) {
      // The algorithm chosen for the bucket's top does not take m rows.
      LOOM_LOG_WARN(
          "cuBLASLt: the algorithm for {} rows (n {} k {}) refused {} rows ({}); a plan for {}",
          std::get<0>(key), n, k, m, cublasGetStatusString(st), m);
      p = &plan_for(exact, m);
      exact_plans_ = true;
      if (p->lt) st = launch(*p, x, w, bias, out, m);
    }
    if (p->lt) LOOM_CUBLAS_CHECK(st);
  }
  if (!p->lt) {
    LOOM_CUBLAS_CHECK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                                   static_cast<int>(k), &alpha, w, CUDA_R_16BF, static_cast<int>(k), x,
                                   CUDA_R_16BF, static_cast<int>(k), &beta, out, CUDA_R_16BF,
                                   static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  if (bias && !p->fused_bias) add_bias_rows(out, bias, m, n, stream_);
}

}  // namespace loom::cuda
