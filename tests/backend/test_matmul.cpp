// matmul against the fp64 reference for every weight type, every instruction
// set this CPU has, and odd shapes.
// Tolerances, per output element y = sum_k x_k w_k (w as dequantised):
//  * float weights (f32/f16/bf16): |err| <= 1e-5 * sum_k |x_k w_k|  (f32 accumulation).
//  * quantised weights: activations are rounded to 8 bits per block of 32 values with step
//    d_b = max|x in block| / 127 (the bound below uses blocks of 256 for K-quants, as llama.cpp
//    rounds them: looser than 32, so it holds either way),
//    so |x_k - x^_k| <= d_b / 2 and |err| <= sum_k |w_k| d_b / 2, plus the f32 term
//    above. The test computes this bound per output and allows 1% slack on it.
#include <cmath>

#include "backend/cpu/gemm.h"
#include "core/error.h"
#include "reference.h"

namespace loom {
namespace {

int64_t act_block(DType t) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
      return 32;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return 256;
    default:
      return 0;
  }
}

void check_matmul(Backend& be, DType type, int64_t m, int64_t n, int64_t k, bool with_bias,
                  uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << dtype_name(type) << " M=" << m << " N=" << n << " K=" << k
                                    << (with_bias ? " +bias" : ""));
  const auto xv = ref::random_floats(static_cast<size_t>(m * k), seed, -2.0f, 2.0f);
  const auto wv = ref::random_floats(static_cast<size_t>(n * k), seed + 1);
  const auto bv = ref::random_floats(static_cast<size_t>(n), seed + 2);
  const ref::Weight w = ref::make_weight(type, wv, n, k);
  Tensor x = ref::f32_tensor(xv, {m, k});
  Tensor bias = ref::f32_tensor(bv, {n});
  std::vector<double> want, abs_sum;
  ref::matmul(xv, w.dequantized, with_bias ? bv.data() : nullptr, m, n, k, want, abs_sum);

  // Activation-rounding bound per output (0 for float weights).
  std::vector<double> bound(static_cast<size_t>(m * n), 0.0);
  if (const int64_t blk = act_block(type)) {
    for (int64_t i = 0; i < m; ++i) {
      std::vector<double> half_step(static_cast<size_t>(k));
      for (int64_t b = 0; b < k; b += blk) {
        double amax = 0;
        for (int64_t l = b; l < b + blk; ++l)
          amax = std::max(amax, std::fabs(double(xv[i * k + l])));
        for (int64_t l = b; l < b + blk; ++l) half_step[l] = amax / 127.0 / 2.0;
      }
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l)
          s += std::fabs(double(w.dequantized[j * k + l])) * half_step[l];
        bound[i * n + j] = 1.01 * s;
      }
    }
  }

  ref::for_each_isa([&](cpu::Isa) {
    Tensor out = Tensor::cpu(DType::F32, {m, n});
    be.matmul(x, w.tensor, with_bias ? &bias : nullptr, out);
    const auto got = ref::to_vector(out);
    int bad = 0;
    for (int64_t i = 0; i < m * n && bad < 5; ++i) {
      const double tol = 1e-5 * abs_sum[i] + bound[i] + 1e-30;
      if (!(std::fabs(got[i] - want[i]) <= tol)) {
        ADD_FAILURE() << "out[" << i / n << "," << i % n << "] = " << got[i] << ", want " << want[i]
                      << " (tol " << tol << ")";
        ++bad;
      }
    }
  });
}

class MatmulTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend(2);
};

TEST_F(MatmulTest, FloatWeights) {
  uint32_t seed = 1;
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t m : {1, 3, 17})
      for (int64_t n : {1, 5, 33})
        for (int64_t k : {7, 64, 100, 333}) check_matmul(*be_, t, m, n, k, (n & 1) != 0, seed++);
  check_matmul(*be_, DType::F32, 40, 70, 896, true, 99);
  check_matmul(*be_, DType::BF16, 2, 130, 1000, false, 98);
  check_matmul(*be_, DType::F16, 2, 130, 1000, false, 97);
}

TEST_F(MatmulTest, BlockQuantisedWeights) {
  uint32_t seed = 100;
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1})
    for (int64_t m : {1, 3, 17})
      for (int64_t n : {1, 5, 33})
        for (int64_t k : {32, 96, 896}) check_matmul(*be_, t, m, n, k, (n & 1) != 0, seed++);
  check_matmul(*be_, DType::Q5_0, 40, 70, 896, true, 199);
}

TEST_F(MatmulTest, KQuantisedWeights) {
  uint32_t seed = 200;
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K})
    for (int64_t m : {1, 3, 17})
      for (int64_t n : {1, 5, 33})
        for (int64_t k : {256, 512, 1280}) check_matmul(*be_, t, m, n, k, (n & 1) != 0, seed++);
  check_matmul(*be_, DType::Q4_K, 40, 70, 2048, true, 299);
}

// M >= 4 rows take the GEMM (gemm.h): ragged M around the micro-kernel's row
// groups, N around the panel widths (8 / 16 / 32 columns), K across the panel
// chunk (1024 values for quantised weights, 256 for float ones) and narrow
// outputs whose rows are split over threads.
TEST_F(MatmulTest, GemmRaggedShapesAndPanelEdges) {
  uint32_t seed = 300;
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1})
    for (int64_t m : {4, 5, 7, 13})
      for (int64_t n : {1, 15, 33, 65})
        for (int64_t k : {32, 1056}) check_matmul(*be_, t, m, n, k, (n & 1) != 0, seed++);
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K})
    for (int64_t m : {4, 6, 9})
      for (int64_t n : {1, 17, 40})
        for (int64_t k : {256, 1280}) check_matmul(*be_, t, m, n, k, (n & 1) != 0, seed++);
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t m : {4, 7, 11})
      for (int64_t n : {3, 31, 34})
        for (int64_t k : {7, 300}) check_matmul(*be_, t, m, n, k, (n & 1) != 0, seed++);
  // Row blocks over threads: few panels, many rows.
  check_matmul(*be_, DType::Q5_0, 70, 40, 896, true, 390);
  check_matmul(*be_, DType::Q6_K, 37, 9, 512, false, 391);
  check_matmul(*be_, DType::F16, 41, 20, 64, true, 392);
}

TEST_F(MatmulTest, GemmZeroAndExtremeActivations) {
  // A zero row (scale 0), a row of one large value among tiny ones, and two rows
  // that 8-bit blocks of 32 hold exactly (full-scale signs; halves of integers
  // with 127 in every block): the blocks' edge cases.
  const int64_t m = 4, n = 35, k = 512;
  std::vector<float> xv(static_cast<size_t>(m * k), 0.0f);
  for (int64_t i = 0; i < k; ++i) {
    xv[k + i] = i == 37 ? 1e4f : 1e-3f * static_cast<float>(i % 7);
    xv[2 * k + i] = (i & 1) ? -3.0f : 3.0f;
    // 0.5 * q with |q| <= 127 and q = 127 first in every block of 32.
    xv[3 * k + i] = i % 32 == 0 ? 63.5f : 0.5f * static_cast<float>((i * 37) % 255 - 127);
  }
  const auto wv = ref::random_floats(static_cast<size_t>(n * k), 7);
  for (DType t : {DType::Q8_0, DType::Q5_0, DType::Q4_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    const ref::Weight w = ref::make_weight(t, wv, n, k);
    std::vector<double> want, abs_sum;
    ref::matmul(xv, w.dequantized, nullptr, m, n, k, want, abs_sum);
    ref::for_each_isa([&](cpu::Isa) {
      Tensor out = Tensor::cpu(DType::F32, {m, n});
      be_->matmul(ref::f32_tensor(xv, {m, k}), w.tensor, nullptr, out);
      const auto got = ref::to_vector(out);
      for (int64_t j = 0; j < n; ++j) EXPECT_EQ(got[j], 0.0f) << "zero row, column " << j;
      // Row 2 and 3 are exactly representable in 8 bits per block of 32: only
      // f32 rounding remains.
      for (int64_t i = 2 * n; i < m * n; ++i)
        EXPECT_NEAR(got[i], want[i], 1e-5 * abs_sum[i] + 1e-6)
            << "out[" << i / n << "," << i % n << "]";
      for (int64_t i = n; i < 2 * n; ++i) EXPECT_TRUE(std::isfinite(got[i]));
    });
  }
}

TEST_F(MatmulTest, RejectsBadShapes) {
  Tensor x = Tensor::cpu(DType::F32, {2, 64});
  Tensor w = Tensor::cpu(DType::F32, {8, 32});
  Tensor out = Tensor::cpu(DType::F32, {2, 8});
  EXPECT_THROW(be_->matmul(x, w, nullptr, out), Error);
  Tensor w2 = Tensor::cpu(DType::F32, {8, 64});
  Tensor out2 = Tensor::cpu(DType::F32, {2, 7});
  EXPECT_THROW(be_->matmul(x, w2, nullptr, out2), Error);
  Tensor bias = Tensor::cpu(DType::F32, {7});
  EXPECT_THROW(be_->matmul(x, w2, &bias, out), Error);
  Tensor wi = Tensor::cpu(DType::I32, {8, 64});
  EXPECT_THROW(be_->matmul(x, wi, nullptr, out), Error);
}

// LOOM_CPU_ROW_PREFETCH: BYTES, BYTES,l1 or BYTES,l2 over the vendor's
// default; anything else is refused with the variable's name. (Prefetching
// changes no result: every test above runs under this machine's setting.)
TEST(RowPrefetch, ParsesTheOverrideAndRefusesTheRest) {
  const cpu::RowPrefetch base{24576, true};
  const cpu::RowPrefetch same = cpu::parse_row_prefetch(nullptr, base);
  EXPECT_EQ(same.bytes, 24576);
  EXPECT_TRUE(same.l2);
  EXPECT_EQ(cpu::parse_row_prefetch("", base).bytes, 24576);
  const cpu::RowPrefetch bytes_only = cpu::parse_row_prefetch("6144", base);
  EXPECT_EQ(bytes_only.bytes, 6144);
  EXPECT_TRUE(bytes_only.l2);
  const cpu::RowPrefetch l1 = cpu::parse_row_prefetch("8192,l1", base);
  EXPECT_EQ(l1.bytes, 8192);
  EXPECT_FALSE(l1.l2);
  EXPECT_TRUE(cpu::parse_row_prefetch("0,l2", cpu::RowPrefetch{}).l2);
  EXPECT_EQ(cpu::parse_row_prefetch("1048576", base).bytes, 1048576);
  for (const char* bad :
       {"-1", "1048577", "abc", "12k", "6144,", "6144,l3", ",l2", "6144 ", "99999999999999999999"})
    EXPECT_THROW(cpu::parse_row_prefetch(bad, base), Error) << bad;
  const cpu::RowPrefetch& active = cpu::row_prefetch();
  EXPECT_GE(active.bytes, 0);
  EXPECT_LE(active.bytes, 1 << 20);
}

}  // namespace
}  // namespace loom
