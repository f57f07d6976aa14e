// Quantised formats: dequantize_row must reproduce ggml's values bit for bit
// (fixtures written by make_quant_fixtures.py with the `gguf` package, from
// random blocks, so every bit pattern of scales and quants is exercised); the
// matmul kernels of every ISA must agree with those values on the same random
// blocks; and quantize_row must round-trip with a small error.
#include <cmath>
#include <cstdio>
#include <fstream>

#include "reference.h"

namespace loom {
namespace {

struct Fixture {
  std::vector<uint8_t> blocks;
  std::vector<float> values;
};

Fixture load_fixture(const std::string& name) {
  const std::string path = std::string(LOOM_SOURCE_DIR) + "/tests/backend/fixtures/quant_" + name + ".bin";
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  uint32_t n = 0, bytes = 0;
  f.read(reinterpret_cast<char*>(&n), 4);
  f.read(reinterpret_cast<char*>(&bytes), 4);
  Fixture fx{std::vector<uint8_t>(bytes), std::vector<float>(n)};
  f.read(reinterpret_cast<char*>(fx.blocks.data()), bytes);
  f.read(reinterpret_cast<char*>(fx.values.data()), static_cast<std::streamsize>(n) * 4);
  EXPECT_TRUE(f.good()) << path;
  return fx;
}

const std::vector<DType> kQuantTypes = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                                        DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

TEST(Quant, DequantizeMatchesGgmlBitExactly) {
  for (DType t : kQuantTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const Fixture fx = load_fixture(std::string(dtype_name(t)));
    const int64_t n = static_cast<int64_t>(fx.values.size());
    ASSERT_EQ(static_cast<int64_t>(fx.blocks.size()), row_bytes(t, n));
    std::vector<float> got(fx.values.size());
    quant::dequantize_row(t, fx.blocks.data(), got.data(), n);
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; ++i)
      if (std::memcmp(&got[i], &fx.values[i], 4) != 0) {
        ADD_FAILURE() << "value " << i << ": " << got[i] << " != ggml " << fx.values[i];
        ++bad;
      }
  }
}

// The integer dot products of every ISA on random-bit blocks, against the
// dequantised values. Tolerance as in test_matmul: activation rounding bound
// (|w| * step/2 per element, step = max|x|/127 per activation block) + 1e-5 rel.
TEST(Quant, MatmulKernelsOnRandomBlocks) {
  auto be = make_cpu_backend(2);
  for (DType t : kQuantTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const Fixture fx = load_fixture(std::string(dtype_name(t)));
    const int64_t k = 1024, n = static_cast<int64_t>(fx.values.size()) / k, m = 3;
    const int64_t blk = dtype_info(t).block_elems == 32 ? 32 : 256;
    Tensor w(const_cast<uint8_t*>(fx.blocks.data()), t, {n, k});
    const auto xv = ref::random_floats(static_cast<size_t>(m * k), 7, -3.0f, 3.0f);
    Tensor x = ref::f32_tensor(xv, {m, k});
    std::vector<double> want, abs_sum;
    ref::matmul(xv, fx.values, nullptr, m, n, k, want, abs_sum);
    ref::for_each_isa([&](cpu::Isa) {
      Tensor out = Tensor::cpu(DType::F32, {m, n});
      be->matmul(x, w, nullptr, out);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double bound = 0;
          for (int64_t b = 0; b < k; b += blk) {
            double amax = 0, wsum = 0;
            for (int64_t l = b; l < b + blk; ++l) {
              amax = std::max(amax, std::fabs(double(xv[i * k + l])));
              wsum += std::fabs(double(fx.values[j * k + l]));
            }
            bound += wsum * amax / 127.0 / 2.0;
          }
          const double tol = 1.01 * bound + 1e-5 * abs_sum[i * n + j];
          EXPECT_NEAR(out.data_as<float>()[i * n + j], want[i * n + j], tol) << "row " << i << " col " << j;
        }
    });
  }
}

TEST(Quant, QuantizeRoundTrip) {
  // RMS error relative to the RMS of the data, for N(0,1)-ish rows.
  const struct {
    DType type;
    double max_rel_rms;
  } cases[] = {{DType::F16, 1e-3},  {DType::BF16, 5e-3}, {DType::Q8_0, 0.01}, {DType::Q4_0, 0.12},
               {DType::Q4_1, 0.12}, {DType::Q5_0, 0.06}, {DType::Q5_1, 0.06}, {DType::Q4_K, 0.12},
               {DType::Q5_K, 0.06}, {DType::Q6_K, 0.03}};
  const int64_t n = 4096;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n), y(n);
  for (float& v : x) v = dist(rng);
  for (const auto& c : cases) {
    std::vector<uint8_t> q(static_cast<size_t>(row_bytes(c.type, n)));
    quant::quantize_row(c.type, x.data(), q.data(), n);
    quant::dequantize_row(c.type, q.data(), y.data(), n);
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; ++i) err += (x[i] - y[i]) * double(x[i] - y[i]), ref += x[i] * double(x[i]);
    EXPECT_LT(std::sqrt(err / ref), c.max_rel_rms) << dtype_name(c.type);
  }
}

TEST(Quant, RejectsPartialBlocks) {
  std::vector<float> x(100);
  std::vector<uint8_t> q(1000);
  EXPECT_THROW(quant::dequantize_row(DType::Q4_K, q.data(), x.data(), 100), Error);
  EXPECT_THROW(quant::quantize_row(DType::Q8_0, x.data(), q.data(), 40), Error);
  EXPECT_THROW(quant::dequantize_row(DType::Q5_0, q.data(), x.data(), 48), Error);
  EXPECT_THROW(quant::dequantize_row(DType::I32, q.data(), x.data(), 4), Error);
}

}  // namespace
}  // namespace loom
