// Batch invariance of the CPU matmul: a row's output is the same bits whatever
// rows it is computed with. Decode runs one row at a time (or a few), prefill
// and batched decode many, prefix-cache hits and prefill chunking change which
// rows go together; greedy and seeded sampling must not see any of that. For
// every weight type and every instruction set this CPU has, each row of an
// M-row matmul (M = 2 .. a few GEMM tiles, ragged, rows split over threads)
// must equal, bit for bit, the same row multiplied alone.
#include <cstring>

#include "reference.h"

namespace loom {
namespace {

constexpr int64_t kMaxRows = 40;

// Row counts around the row-path / GEMM switches (4 rows for float weights,
// 17 for quantised ones), the micro-kernels' row groups
// (4 and 6), and past the point where rows are split over threads.
constexpr int64_t kRowCounts[] = {2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 16, 17, 24, 25, 33, 40};

void check_invariant(Backend& be, DType type, int64_t n, int64_t k, bool with_bias, uint32_t seed) {
  SCOPED_TRACE(::testing::Message()
               << dtype_name(type) << " N=" << n << " K=" << k << (with_bias ? " +bias" : ""));
  const auto xv = ref::random_floats(static_cast<size_t>(kMaxRows * k), seed, -2.0f, 2.0f);
  const ref::Weight w =
      ref::make_weight(type, ref::random_floats(static_cast<size_t>(n * k), seed + 1), n, k);
  Tensor bias = ref::f32_tensor(ref::random_floats(static_cast<size_t>(n), seed + 2), {n});
  const Tensor* b = with_bias ? &bias : nullptr;
  auto rows_of = [&](int64_t first, int64_t count) {
    return ref::f32_tensor(
        std::vector<float>(xv.begin() + first * k, xv.begin() + (first + count) * k), {count, k});
  };
  ref::for_each_isa([&](cpu::Isa) {
    std::vector<float> alone(static_cast<size_t>(kMaxRows * n));
    for (int64_t r = 0; r < kMaxRows; ++r) {
      Tensor out = Tensor::cpu(DType::F32, {1, n});
      be.matmul(rows_of(r, 1), w.tensor, b, out);
      std::memcpy(alone.data() + r * n, out.data(), static_cast<size_t>(n) * 4);
    }
    for (int64_t m : kRowCounts) {
      Tensor out = Tensor::cpu(DType::F32, {m, n});
      be.matmul(rows_of(0, m), w.tensor, b, out);
      const float* got = out.data_as<const float>();
      int bad = 0;
      for (int64_t i = 0; i < m * n && bad < 3; ++i)
        if (std::memcmp(got + i, alone.data() + i, 4) != 0) {
          ADD_FAILURE() << "M=" << m << " out[" << i / n << "," << i % n << "] = " << got[i]
                        << ", alone " << alone[i];
          ++bad;
        }
    }
  });
}

class BatchInvarianceTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend(2);
};

// K past the GEMM's K chunk (1,024 quantised values, 256 float ones), N past a
// few panels with a ragged last one.
TEST_F(BatchInvarianceTest, QuantisedWeights) {
  uint32_t seed = 1;
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K,
                  DType::Q5_K, DType::Q6_K}) {
    check_invariant(*be_, t, 37, 1280, true, seed);
    check_invariant(*be_, t, 70, 256, false, seed + 10);
    seed += 100;
  }
}

TEST_F(BatchInvarianceTest, FloatWeights) {
  uint32_t seed = 1000;
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    check_invariant(*be_, t, 37, 1000, true, seed);
    check_invariant(*be_, t, 70, 64, false, seed + 10);
    check_invariant(*be_, t, 9, 7, true, seed + 20);
    seed += 100;
  }
}

}  // namespace
}  // namespace loom
