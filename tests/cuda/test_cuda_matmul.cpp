// CUDA matmul (cuBLASLt, bf16 in/out, fp32 accumulation) against the CPU fp32
// backend on the same bf16-rounded inputs. Tolerance per output:
// 8e-3 * (|want| + |bias|) + 1e-4 * sum_k |x w|: one or two bf16 roundings
// (output, and the bias rounded to bf16 for the epilogue) plus accumulation.
#include "backend/cuda/gemm.h"
#include "cuda_test_util.h"

namespace loom {
namespace {

using namespace cudatest;

class CudaMatmulTest : public CudaAndCpuTest {};

void check(Backend& gpu, Backend& cpu, int64_t m, int64_t n, int64_t k, int bias_mode) {
  SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k << " bias " << bias_mode);
  const auto x = random_bf16_values(m * k, 1 + static_cast<uint32_t>(m * 7 + n));
  const auto w = random_bf16_values(n * k, 2 + static_cast<uint32_t>(k));
  const auto b = random_bf16_values(n, 3, -2, 2);
  Tensor cb = cpu_f32(b, {n});
  Tensor cout = Tensor::cpu(DType::F32, {m, n});
  cpu.matmul(cpu_f32(x, {m, k}), cpu_f32(w, {n, k}), bias_mode ? &cb : nullptr, cout);
  Tensor gw = gpu.prepare_weight(cpu_f32(w, {n, k}));
  // bias_mode 1: prepared (f32 on the GPU); 2: a host tensor; 3: bf16 on the GPU.
  Tensor gb = bias_mode == 1 ? gpu.prepare_weight(cb) : bias_mode == 3 ? gpu_bf16(gpu, b, {n}) : cb;
  Tensor gout = gpu.alloc(DType::BF16, {m, n});
  gpu.matmul(gpu_bf16(gpu, x, {m, k}), gw, bias_mode ? &gb : nullptr, gout);
  const auto got = from_gpu_bf16(gpu, gout);
  const auto want = values(cout);
  int bad = 0;
  for (int64_t i = 0; i < m && bad < 5; ++i)
    for (int64_t j = 0; j < n && bad < 5; ++j) {
      double abs_sum = 0;
      for (int64_t l = 0; l < k; ++l) abs_sum += std::fabs(double(x[i * k + l]) * w[j * k + l]);
      const double bias_abs = bias_mode ? std::fabs(b[j]) : 0.0;
      const double tol = 8e-3 * (std::fabs(want[i * n + j]) + bias_abs) + 1e-4 * abs_sum;
      if (!(std::fabs(got[i * n + j] - want[i * n + j]) <= tol)) {
        ADD_FAILURE() << "[" << i << ", " << j << "] got " << got[i * n + j] << " want " << want[i * n + j];
        ++bad;
      }
    }
}

TEST_F(CudaMatmulTest, Shapes) {
  for (int64_t m : {1, 3, 8, 17, 64, 256})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{64, 64}, {96, 200}, {40, 129}, {1000, 512}})
      check(*gpu_, *cpu_, m, n, k, 0);
}

// Past kGemmExactRows a plan serves a bucket of row counts: its algorithm,
// chosen for the bucket's top, must give right products at every count in
// it, whichever count came first, with and without bias, at odd k (2-byte
// aligned rows).
TEST_F(CudaMatmulTest, RowBuckets) {
  EXPECT_EQ(cuda::gemm_plan_rows(1), 1);
  EXPECT_EQ(cuda::gemm_plan_rows(256), 256);
  EXPECT_EQ(cuda::gemm_plan_rows(257), 288);
  EXPECT_EQ(cuda::gemm_plan_rows(512), 512);
  EXPECT_EQ(cuda::gemm_plan_rows(513), 576);
  EXPECT_EQ(cuda::gemm_plan_rows(4097), 4608);
  EXPECT_EQ(cuda::gemm_plan_rows(16384), 16384);
  for (int64_t m : {512, 481, 300, 257, 289, 1000, 961, 1025, 4100})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{96, 129}, {256, 64}})
      check(*gpu_, *cpu_, m, n, k, m % 2 ? 3 : 0);
}

TEST_F(CudaMatmulTest, Bias) {
  for (int bias_mode : {1, 2, 3})
    for (int64_t m : {1, 5, 64}) check(*gpu_, *cpu_, m, 96, 128, bias_mode);
}

TEST_F(CudaMatmulTest, LlamaShapes) {
  check(*gpu_, *cpu_, 8, 6144, 4096, 0);
  check(*gpu_, *cpu_, 3, 4096, 14336, 0);
}

// Up to 2 rows take the GEMV kernel (3 and 4: cuBLASLt): k below, at and
// past its unrolled stretch (2048 elements) and not a multiple of 8
// (cuBLASLt), with and without bias. A row's result does not depend on the
// other row.
TEST_F(CudaMatmulTest, GemvRows) {
  for (int64_t m : {1, 2, 3, 4})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{7, 8}, {33, 2048}, {130, 2056}, {64, 4100}, {300, 5000}})
      for (int bias_mode : {0, 3}) check(*gpu_, *cpu_, m, n, k, bias_mode);
  const int64_t n = 257, k = 4096;
  const auto x = random_bf16_values(2 * k, 11);
  Tensor w = gpu_->prepare_weight(cpu_f32(random_bf16_values(n * k, 12), {n, k}));
  Tensor all = gpu_->alloc(DType::BF16, {2, n});
  gpu_->matmul(gpu_bf16(*gpu_, x, {2, k}), w, nullptr, all);
  const auto rows = from_gpu_bf16(*gpu_, all);
  for (int64_t i = 0; i < 2; ++i) {
    Tensor one = gpu_->alloc(DType::BF16, {1, n});
    gpu_->matmul(gpu_bf16(*gpu_, std::vector<float>(x.begin() + i * k, x.begin() + (i + 1) * k), {1, k}), w,
                 nullptr, one);
    EXPECT_EQ(from_gpu_bf16(*gpu_, one), std::vector<float>(rows.begin() + i * n, rows.begin() + (i + 1) * n))
        << "row " << i;
  }
}

TEST_F(CudaMatmulTest, RowSliceInputs) {
  // x is a view starting mid-allocation (alignment 2 * k bytes).
  const int64_t m = 9, k = 72, n = 48;
  const auto x = random_bf16_values((m + 1) * k, 5);
  const auto w = random_bf16_values(n * k, 6);
  Tensor gx = gpu_bf16(*gpu_, x, {m + 1, k});
  Tensor gout = gpu_->alloc(DType::BF16, {m, n});
  gpu_->matmul(gx.slice_rows(1, m), gpu_->prepare_weight(cpu_f32(w, {n, k})), nullptr, gout);
  Tensor cout = Tensor::cpu(DType::F32, {m, n});
  std::vector<float> xs(x.begin() + k, x.end());
  cpu_->matmul(cpu_f32(xs, {m, k}), cpu_f32(w, {n, k}), nullptr, cout);
  expect_close(from_gpu_bf16(*gpu_, gout), values(cout), 1e-2, 2e-2);
}

TEST_F(CudaMatmulTest, ShapeErrors) {
  Tensor x = gpu_->alloc(DType::BF16, {2, 64}), w = gpu_->alloc(DType::BF16, {32, 63});
  Tensor out = gpu_->alloc(DType::BF16, {2, 32});
  EXPECT_THROW(gpu_->matmul(x, w, nullptr, out), Error);
}

}  // namespace
}  // namespace loom
