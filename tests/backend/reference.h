// Plain scalar fp32/fp64 reference implementations of the backend ops, and the
// test helpers shared by tests/backend and tests/cuda (one reference for every
// backend, sampling included). Written for clarity, not speed: each
// loop says what the op means. Accumulations are in double so the reference is
// the "exact" side of every comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
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

// ---- token choice: argmax and the sampler ----

// Backend::argmax_rows' rule (the Sampler's greedy pick): the first index of
// the maximum, NaNs skipped, 0 when the row holds only NaNs.
inline std::vector<int32_t> argmax_rows(const std::vector<float>& v, int64_t rows, int64_t vocab) {
  std::vector<int32_t> out(static_cast<size_t>(rows), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t best = -1;
    for (int64_t i = 0; i < vocab; ++i) {
      const float x = v[r * vocab + i];
      if (!std::isnan(x) && (best < 0 || x > v[r * vocab + best])) best = i;
    }
    out[r] = static_cast<int32_t>(std::max<int64_t>(best, 0));
  }
  return out;
}

// Backend::sample_rows' contract (backend.h), written the obvious way: edit,
// scale, sort candidates by (value desc, id asc), cut top-k / top-p / min-p,
// walk the kept ids in order. Masses are the fixed-point ones the CUDA kernel
// uses (round(exp(x - max) * 2^32), an exp of correctly rounded f32
// operations; sample_rows.cu), with the same 64-bit draw and top-p thresholds,
// so a device sampler must give exactly these tokens.
constexpr float kInfinity = std::numeric_limits<float>::infinity();

// round(exp(x - mx) * 2^32), as the kernel computes it (sample_rows.cu).
inline uint64_t sample_mass(float x, float mx) {
  const float d = x - mx;
  if (!(d >= -24.0f)) return 0;
  const float kf = std::rint(d * 0x1.715476p+0f);
  float r = std::fma(kf, -0x1.62e4p-1f, d);
  r = std::fma(kf, -0x1.7f7d1cp-20f, r);
  float p = 0x1.6c16c2p-10f;
  p = std::fma(p, r, 0x1.111112p-7f);
  p = std::fma(p, r, 0x1.555556p-5f);
  p = std::fma(p, r, 0x1.555556p-3f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const uint64_t q = static_cast<uint64_t>(p * 16777216.0f);
  const int s = -(8 + static_cast<int>(kf));
  if (s <= 0) return q << -s;
  return (q + (uint64_t{1} << (s - 1))) >> s;
}

inline uint64_t fixed64(double f) {
  if (!(f > 0)) return 0;
  if (f >= 1) return UINT64_MAX;
  return static_cast<uint64_t>(std::ldexp(f, 64));
}

inline uint64_t mul_hi(uint64_t a, uint64_t b) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
}

// x after the spec's edits and temperature (+inf as the largest float, -0 as +0).
inline std::vector<float> processed_row(const float* row, int64_t vocab, const SampleSpec& sp,
                                        const std::vector<LogitEdit>& edits) {
  const float inv_t = 1.0f / sp.temperature;
  std::vector<float> x(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) x[i] = row[i] * inv_t;
  for (int32_t e = sp.edits_begin; e < sp.edits_end; ++e) {
    const LogitEdit& ed = edits[e];
    float v = row[ed.token];
    if (ed.rep != 1.0f) v = v > 0.0f ? v / ed.rep : v * ed.rep;
    v = v - ed.sub;
    v = v + ed.add;
    if (ed.ban) v = -kInfinity;
    x[ed.token] = v * inv_t;
  }
  for (float& v : x) {
    if (v == kInfinity) v = std::numeric_limits<float>::max();
    if (v == 0.0f) v = 0.0f;
  }
  return x;
}

struct SampleResult {
  int32_t token = 0;
  std::vector<int32_t> kept;  // ids, increasing
  std::vector<uint64_t> mass;
};

inline SampleResult sample_row(const float* row, int64_t vocab, const SampleSpec& sp,
                               const std::vector<LogitEdit>& edits) {
  const std::vector<float> x = processed_row(row, vocab, sp, edits);
  std::vector<int32_t> order;
  for (int32_t i = 0; i < vocab; ++i)
    if (x[i] > -kInfinity) order.push_back(i);
  SampleResult res;
  if (order.empty()) return res;
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return x[a] != x[b] ? x[a] > x[b] : a < b; });
  const float mx = x[order[0]];
  size_t keep = order.size();
  if (sp.top_k > 0 && static_cast<size_t>(sp.top_k) < keep) keep = static_cast<size_t>(sp.top_k);
  if (sp.top_p < 1.0f) {
    uint64_t z = 0;
    for (size_t i = 0; i < keep; ++i) z += sample_mass(x[order[i]], mx);
    const unsigned __int128 prod = static_cast<unsigned __int128>(fixed64(sp.top_p)) * z;
    const uint64_t t =
        static_cast<uint64_t>(prod >> 64) + (static_cast<uint64_t>(prod) != 0 ? 1 : 0);
    if (t == 0) {
      keep = 1;
    } else {
      uint64_t cum = 0;
      for (size_t i = 0; i < keep; ++i) {
        cum += sample_mass(x[order[i]], mx);
        if (cum >= t) {
          keep = i + 1;
          break;
        }
      }
    }
  }
  if (sp.min_p > 0.0f) {
    const float cut = mx + std::log(sp.min_p);
    size_t pass = 0;
    while (pass < keep && x[order[pass]] >= cut) ++pass;
    keep = std::max<size_t>(1, pass);
  }
  res.kept.assign(order.begin(), order.begin() + static_cast<long>(keep));
  std::sort(res.kept.begin(), res.kept.end());
  uint64_t total = 0;
  for (int32_t id : res.kept) {
    res.mass.push_back(sample_mass(x[id], mx));
    total += res.mass.back();
  }
  const uint64_t target = mul_hi(fixed64(sp.uniform), total);
  uint64_t cum = 0;
  res.token = res.kept.back();
  for (size_t i = 0; i < res.kept.size(); ++i) {
    cum += res.mass[i];
    if (target < cum) {
      res.token = res.kept[i];
      break;
    }
  }
  return res;
}

// Logits rows of a given flavour, rounded to bf16 (so every dtype sees them exactly).
inline std::vector<float> random_logits(int64_t rows, int64_t vocab, std::mt19937_64& rng) {
  std::vector<float> v(static_cast<size_t>(rows * vocab));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int64_t r = 0; r < rows; ++r) {
    const int kind = static_cast<int>(rng() % 5);
    const float scale = kind == 0 ? 0.5f : kind == 1 ? 3.0f : 8.0f;
    for (int64_t i = 0; i < vocab; ++i) {
      float x = normal(rng) * scale;
      if (kind == 3) x = std::round(x * 0.5f);  // many ties
      if (kind == 4) x = std::round(x / 4.0f);  // massive ties (few distinct values)
      const double u = unit(rng);
      if (u < 0.02)
        x = -kInfinity;
      else if (u < 0.03)
        x = std::numeric_limits<float>::quiet_NaN();
      else if (u < 0.0301 && kind == 2)
        x = kInfinity;
      v[static_cast<size_t>(r * vocab + i)] = bf16_to_f32(f32_to_bf16(x));
    }
    if (rng() % 23 == 0)  // a row with no candidate
      for (int64_t i = 0; i < vocab; ++i)
        v[static_cast<size_t>(r * vocab + i)] =
            i % 2 ? -kInfinity : std::numeric_limits<float>::quiet_NaN();
  }
  return v;
}

// Random specs over rows [0, rows), with their edits appended to `edits`.
inline std::vector<SampleSpec> random_specs(size_t n, int64_t rows, int64_t vocab,
                                            std::mt19937_64& rng, std::vector<LogitEdit>& edits) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const float temps[] = {0.25f, 0.7f, 1.0f, 1.3f, 3.0f};
  const int32_t ks[] = {
      0, 0, 1, 2, 5, 40, 1000, static_cast<int32_t>(vocab), static_cast<int32_t>(vocab + 3)};
  const float ps[] = {1.0f, 1.0f, 0.95f, 0.9f, 0.5f, 0.3f, 1e-7f, 0.0f, 0.999f};
  const float mps[] = {0.0f, 0.0f, 0.0f, 0.05f, 0.3f, 1.0f, 2.0f};
  std::vector<SampleSpec> specs(n);
  std::vector<int32_t> perm(static_cast<size_t>(vocab));
  std::iota(perm.begin(), perm.end(), 0);
  for (SampleSpec& sp : specs) {
    sp.row = static_cast<int32_t>(rng() % static_cast<uint64_t>(rows));
    sp.temperature = temps[rng() % std::size(temps)];
    sp.top_k = ks[rng() % std::size(ks)];
    sp.top_p = ps[rng() % std::size(ps)];
    if (rng() % 4 == 0) sp.top_p = static_cast<float>(unit(rng));
    sp.min_p = mps[rng() % std::size(mps)];
    const uint64_t w = rng() % 16;
    sp.uniform = w == 0 ? 0.0 : w == 1 ? 1.0 - 0x1p-53 : unit(rng);
    sp.edits_begin = static_cast<int32_t>(edits.size());
    if (rng() % 2) {
      const size_t ne = std::min<size_t>(static_cast<size_t>(vocab), rng() % 300);
      for (size_t i = 0; i < ne; ++i) std::swap(perm[i], perm[i + rng() % (perm.size() - i)]);
      for (size_t i = 0; i < ne; ++i) {
        LogitEdit e;
        e.token = perm[i];
        const int kind = static_cast<int>(rng() % 6);
        if (kind == 0) e.rep = 1.3f;
        if (kind == 1) e.sub = 0.4f + 0.5f * static_cast<float>(rng() % 4);
        if (kind == 2) e.add = static_cast<float>(static_cast<int>(rng() % 21) - 10);
        if (kind == 3) e.ban = true;
        if (kind == 4) e.rep = 1.1f, e.sub = 0.7f, e.add = 2.0f;
        if (kind == 5) e.add = 100.0f;  // logit_bias forcing a token
        edits.push_back(e);
      }
    }
    sp.edits_end = static_cast<int32_t>(edits.size());
  }
  return specs;
}

}  // namespace loom::ref
