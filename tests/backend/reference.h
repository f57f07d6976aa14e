// Plain scalar fp32/fp64 reference implementations of the backend ops, and the
// test helpers shared by tests/backend. Written for clarity, not speed: each
// loop says what the op means. Accumulations are in double so the reference is
// the "exact" side of every comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/isa.h"
#include "backend/quant/quant.h"
#include "core/error.h"
#include "core/half.h"

namespace loom::ref {

// ---- helpers ----

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline Tensor f32_tensor(const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor t = Tensor::cpu(DType::F32, std::move(shape));
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * 4);
  return t;
}

inline Tensor i32_tensor(const std::vector<int32_t>& v) {
  Tensor t = Tensor::cpu(DType::I32, {static_cast<int64_t>(v.size())});
  if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * 4);
  return t;
}

inline std::vector<float> to_vector(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  if (!v.empty()) std::memcpy(v.data(), t.data(), v.size() * 4);
  return v;
}

// A [rows, cols] weight of `type` holding `values` (quantised row by row), and
// the values it actually represents (dequantised) for the reference.
struct Weight {
  Tensor tensor;
  std::vector<float> dequantized;
};

inline Weight make_weight(DType type, const std::vector<float>& values, int64_t rows, int64_t cols) {
  Weight w{Tensor::cpu(type, {rows, cols}), std::vector<float>(values.size())};
  const int64_t stride = w.tensor.row_stride_bytes();
  for (int64_t r = 0; r < rows; ++r) {
    auto* dst = static_cast<uint8_t*>(w.tensor.data()) + r * stride;
    quant::quantize_row(type, values.data() + r * cols, dst, cols);
    quant::dequantize_row(type, dst, w.dequantized.data() + r * cols, cols);
  }
  return w;
}

// Runs fn once per instruction set this CPU supports, with that set selected.
template <class Fn>
void for_each_isa(Fn&& fn) {
  const cpu::Isa saved = cpu::active_isa();
  for (cpu::Isa isa : {cpu::Isa::Portable, cpu::Isa::Avx2, cpu::Isa::Avx512}) {
    if (static_cast<int>(isa) > static_cast<int>(cpu::detected_isa())) continue;
    cpu::set_cpu_isa(isa);
    SCOPED_TRACE(std::string("isa ") + std::string(cpu::isa_name(isa)));
    fn(isa);
  }
  cpu::set_cpu_isa(saved);
}

// ---- reference ops ----

// out[m, n] = sum_k x[m, k] w[n, k] (+ bias[n]); also |x|.|w| per output for
// relative tolerances.
inline void matmul(const std::vector<float>& x, const std::vector<float>& w, const float* bias, int64_t m,
                   int64_t n, int64_t k, std::vector<double>& out, std::vector<double>& abs_sum) {
  out.assign(static_cast<size_t>(m * n), 0.0);
  abs_sum.assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = bias ? bias[j] : 0.0, a = bias ? std::fabs(bias[j]) : 0.0;
      for (int64_t l = 0; l < k; ++l) {
        const double p = static_cast<double>(x[i * k + l]) * w[j * k + l];
        s += p;
        a += std::fabs(p);
      }
      out[i * n + j] = s;
      abs_sum[i * n + j] = a;
    }
}

inline std::vector<float> rms_norm(const std::vector<float>& x, const std::vector<float>& w, int64_t h,
                                   float eps, float offset) {
  std::vector<float> out(x.size());
  for (size_t r = 0; r < x.size() / h; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < h; ++j) ss += static_cast<double>(x[r * h + j]) * x[r * h + j];
    const double inv = 1.0 / std::sqrt(ss / h + eps);
    for (int64_t j = 0; j < h; ++j) out[r * h + j] = static_cast<float>(x[r * h + j] * inv * (w[j] + double(offset)));
  }
  return out;
}

inline void rope(std::vector<float>& x, int64_t t, int64_t heads, int64_t hd, const std::vector<int32_t>& pos,
                 const std::vector<float>& inv_freq, int rot, bool interleaved, float mscale) {
  for (int64_t i = 0; i < t; ++i)
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x.data() + (i * heads + h) * hd;
      for (int j = 0; j < rot / 2; ++j) {
        const float theta = static_cast<float>(pos[i]) * inv_freq[j];  // f32, as HF
        const double c = std::cos(static_cast<double>(theta)) * mscale;
        const double s = std::sin(static_cast<double>(theta)) * mscale;
        const int a = interleaved ? 2 * j : j, b = interleaved ? 2 * j + 1 : j + rot / 2;
        const double x0 = v[a], x1 = v[b];
        v[a] = static_cast<float>(x0 * c - x1 * s);
        v[b] = static_cast<float>(x0 * s + x1 * c);
      }
    }
}

inline float silu(float g) { return static_cast<float>(g / (1.0 + std::exp(-static_cast<double>(g)))); }
inline float gelu_tanh(float g) {
  const double x = g;
  return static_cast<float>(0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))));
}

// Attention over a sequence's logical K/V ([ctx, kv_heads, hd] each, already
// rounded to the cache dtype). Writes out for the sequence's n_new tokens.
inline void attention(const float* q, const std::vector<float>& k, const std::vector<float>& v, int64_t ctx,
                      int64_t n_new, int64_t heads, int64_t kv_heads, int64_t hd, const AttentionParams& p,
                      float* out) {
  const int64_t group = heads / kv_heads;
  std::vector<double> logits(static_cast<size_t>(ctx));
  for (int64_t j = 0; j < n_new; ++j) {
    const int64_t pos = ctx - n_new + j;
    const int64_t lo = p.sliding_window > 0 ? std::max<int64_t>(0, pos - p.sliding_window + 1) : 0;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kh = h / group;
      const float* qv = q + (j * heads + h) * hd;
      double mx = -INFINITY;
      for (int64_t key = lo; key <= pos; ++key) {
        double s = 0;
        for (int64_t d = 0; d < hd; ++d) s += static_cast<double>(qv[d]) * k[(key * kv_heads + kh) * hd + d];
        s *= p.scale;
        if (p.logit_softcap > 0) s = p.logit_softcap * std::tanh(s / p.logit_softcap);
        logits[key] = s;
        mx = std::max(mx, s);
      }
      double sum = 0;
      for (int64_t key = lo; key <= pos; ++key) sum += (logits[key] = std::exp(logits[key] - mx));
      for (int64_t d = 0; d < hd; ++d) {
        double acc = 0;
        for (int64_t key = lo; key <= pos; ++key) acc += logits[key] * v[(key * kv_heads + kh) * hd + d];
        out[(j * heads + h) * hd + d] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace loom::ref
