// Helpers for the CUDA op tests: random bf16-representable inputs, host <->
// GPU transfers of bf16 tensors, and tolerance checks. The CPU backend (fp32)
// is the reference; inputs are rounded to bf16 first so both backends see the
// same values and only the GPU's arithmetic and output rounding differ.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/half.h"

#define LOOM_REQUIRE_GPU()                                    \
  do {                                                        \
    if (!::loom::cuda_device_available()) GTEST_SKIP() << "no CUDA device visible"; \
  } while (0)

namespace loom::cudatest {

// Uniform values in [lo, hi), rounded to bf16.
inline std::vector<float> random_bf16_values(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(dist(rng)));
  return v;
}

inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
  return b;
}

inline Tensor gpu_bf16(Backend& gpu, const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor t = gpu.alloc(DType::BF16, std::move(shape));
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  const auto bits = to_bf16_bits(v);
  gpu.copy_from_host(t, bits.data(), bits.size() * 2);
  return t;
}

inline Tensor gpu_i32(Backend& gpu, const std::vector<int32_t>& v) {
  Tensor t = gpu.alloc(DType::I32, {static_cast<int64_t>(v.size())});
  gpu.copy_from_host(t, v.data(), v.size() * 4);
  return t;
}

inline Tensor gpu_f32(Backend& gpu, const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor t = gpu.alloc(DType::F32, std::move(shape));
  gpu.copy_from_host(t, v.data(), v.size() * 4);
  return t;
}

inline std::vector<float> from_gpu_bf16(Backend& gpu, const Tensor& t) {
  std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
  gpu.copy_to_host(bits.data(), t, bits.size() * 2);
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_f32(bits[i]);
  return v;
}

inline Tensor cpu_f32(const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor t = Tensor::cpu(DType::F32, std::move(shape));
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  std::memcpy(t.data(), v.data(), v.size() * 4);
  return t;
}

inline Tensor cpu_i32(const std::vector<int32_t>& v) {
  Tensor t = Tensor::cpu(DType::I32, {static_cast<int64_t>(v.size())});
  std::memcpy(t.data(), v.data(), v.size() * 4);
  return t;
}

inline std::vector<float> values(const Tensor& cpu_f32_tensor) {
  std::vector<float> v(static_cast<size_t>(cpu_f32_tensor.numel()));
  std::memcpy(v.data(), cpu_f32_tensor.data(), v.size() * 4);
  return v;
}

// |got - want| <= rel * |want| + abs for every element; reports the first few
// failures and the worst error.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs,
                         const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    const double tol = rel * std::fabs(double(want[i])) + abs;
    if (err - tol > worst || std::isnan(got[i])) {
      worst = std::isnan(got[i]) ? INFINITY : err - tol;
      worst_i = i;
    }
    if (!(err <= tol) && bad < 5) {
      ADD_FAILURE() << what << " [" << i << "] got " << got[i] << " want " << want[i] << " (tol " << tol << ")";
      ++bad;
    }
  }
  if (worst > 0) ADD_FAILURE() << what << " worst excess over tolerance " << worst << " at " << worst_i;
}

// A CUDA backend and the CPU one (the reference) for each test; skipped
// where no GPU is visible (a derived SetUp checks IsSkipped()).
class CudaAndCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LOOM_REQUIRE_GPU();
    gpu_ = make_cuda_backend(0);
    cpu_ = make_cpu_backend(0);
  }
  std::unique_ptr<Backend> gpu_, cpu_;
};

// t rows of a fused q | k | v projection (random bf16 values from `seed`)
// and the three parts, row by row.
struct QkvRows {
  std::vector<float> qkv, q, k, v;
};
inline QkvRows random_qkv_rows(int64_t t, int64_t q_dim, int64_t kv_dim, uint32_t seed) {
  QkvRows r;
  r.qkv = random_bf16_values(static_cast<size_t>(t * (q_dim + 2 * kv_dim)), seed);
  for (int64_t i = 0; i < t; ++i) {
    const auto row = r.qkv.begin() + i * (q_dim + 2 * kv_dim);
    r.q.insert(r.q.end(), row, row + q_dim);
    r.k.insert(r.k.end(), row + q_dim, row + q_dim + kv_dim);
    r.v.insert(r.v.end(), row + q_dim + kv_dim, row + q_dim + 2 * kv_dim);
  }
  return r;
}

// RoPE's inverse frequencies 10000^(-2j / rot), j < rot / 2.
inline std::vector<float> rope_inv_freq(int rot) {
  std::vector<float> freq(static_cast<size_t>(rot / 2));
  for (int j = 0; j < rot / 2; ++j)
    freq[static_cast<size_t>(j)] =
        std::pow(10000.0f, -2.0f * static_cast<float>(j) / static_cast<float>(rot));
  return freq;
}

}  // namespace loom::cudatest
