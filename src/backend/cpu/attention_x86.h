// x86 inner loops of the blocked (flash-style) attention, written once over a
// vector policy V (simd_vec_x86.h) and instantiated by kernels_avx2.cpp and
// kernels_avx512.cpp: scores of a tile of query rows against a block of keys,
// exp of a score row with its sum, and the P.V accumulation. Shapes as in
// kernels.h (attn_scores, attn_exp_sum, attn_pv).
#pragma once

#include <cmath>
#include <cstdint>

namespace loom::cpu::attn {
namespace {

// s[r * ldk + j] = sum_d q[r * hd + d] * kt[d * ldk + j], r < rows, j < ncols
// (ldk and ncols multiples of V::kLanes; kt zero past the block's keys).
template <class V>
void scores(const float* q, int64_t rows, int64_t hd, const float* kt, int64_t ldk, int64_t ncols,
            float* s) {
  using F = typename V::F;
  constexpr int L = V::kLanes;
  constexpr int kMr = V::kLanes >= 16 ? 8 : 4;  // query rows per pass (16 or 8 accumulators)
  for (int64_t j0 = 0; j0 < ncols; j0 += 2 * L) {
    const bool two = j0 + 2 * L <= ncols;
    int64_t r = 0;
    for (; r < rows; r += kMr) {
      const int nrow = static_cast<int>(rows - r < kMr ? rows - r : kMr);
      F acc[kMr][2];
      for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = V::zerof();
      for (int64_t d = 0; d < hd; ++d) {
        const F k0 = V::loadf(kt + d * ldk + j0);
        const F k1 = two ? V::loadf(kt + d * ldk + j0 + L) : V::zerof();
        for (int i = 0; i < kMr; ++i) {
          if (i >= nrow) break;
          const F qb = V::set1f(q[(r + i) * hd + d]);
          acc[i][0] = V::fmadd(k0, qb, acc[i][0]);
          acc[i][1] = V::fmadd(k1, qb, acc[i][1]);
        }
      }
      for (int i = 0; i < nrow; ++i) {
        V::storef(s + (r + i) * ldk + j0, acc[i][0]);
        if (two) V::storef(s + (r + i) * ldk + j0 + L, acc[i][1]);
      }
    }
  }
}

// x[j] = exp(x[j] - m) for j < n; returns their sum.
template <class V>
float exp_sum(float* x, int64_t n, float m) {
  using F = typename V::F;
  constexpr int L = V::kLanes;
  const F mv = V::set1f(m);
  F sum = V::zerof();
  int64_t j = 0;
  for (; j + L <= n; j += L) {
    const F e = V::exp(V::sub(V::loadf(x + j), mv));
    V::storef(x + j, e);
    sum = V::add(sum, e);
  }
  float tail[L] = {};
  if (j < n) {
    for (int64_t i = j; i < n; ++i) tail[i - j] = x[i];
    for (int64_t i = n - j; i < L; ++i) tail[i] = m - 1000.0f;  // exp gives 0
    const F e = V::exp(V::sub(V::loadf(tail), mv));
    V::storef(tail, e);
    sum = V::add(sum, e);
    for (int64_t i = j; i < n; ++i) x[i] = tail[i - j];
  }
  return V::reduce_add(sum);
}

// The largest of x[0..n), n >= 1.
template <class V>
float row_max(const float* x, int64_t n) {
  constexpr int L = V::kLanes;
  int64_t j = 0;
  float m = x[0];
  if (n >= L) {
    auto mv = V::loadf(x);
    for (j = L; j + L <= n; j += L) mv = V::max(mv, V::loadf(x + j));
    m = V::reduce_max(mv);
  }
  for (; j < n; ++j) m = m < x[j] ? x[j] : m;
  return m;
}

// o[r * hd + d] += sum_{j < nk} p[r * ldp + j] * v[j * ldv + d]; hd a
// multiple of V::kLanes.
template <class V>
void pv(const float* p, int64_t rows, int64_t ldp, int64_t nk, const float* v, int64_t ldv,
        int64_t hd, float* o) {
  using F = typename V::F;
  constexpr int L = V::kLanes;
  constexpr int kMr = V::kLanes >= 16 ? 8 : 4;  // query rows per pass (16 or 8 accumulators)
  for (int64_t d0 = 0; d0 < hd; d0 += 2 * L) {
    const bool two = d0 + 2 * L <= hd;
    for (int64_t r = 0; r < rows; r += kMr) {
      const int nrow = static_cast<int>(rows - r < kMr ? rows - r : kMr);
      F acc[kMr][2];
      for (int i = 0; i < kMr; ++i) {
        acc[i][0] = acc[i][1] = V::zerof();
        if (i < nrow) {
          acc[i][0] = V::loadf(o + (r + i) * hd + d0);
          if (two) acc[i][1] = V::loadf(o + (r + i) * hd + d0 + L);
        }
      }
      for (int64_t j = 0; j < nk; ++j) {
        const F v0 = V::loadf(v + j * ldv + d0);
        const F v1 = two ? V::loadf(v + j * ldv + d0 + L) : V::zerof();
        for (int i = 0; i < kMr; ++i) {
          if (i >= nrow) break;
          const F pb = V::set1f(p[(r + i) * ldp + j]);
          acc[i][0] = V::fmadd(v0, pb, acc[i][0]);
          acc[i][1] = V::fmadd(v1, pb, acc[i][1]);
        }
      }
      for (int i = 0; i < nrow; ++i) {
        V::storef(o + (r + i) * hd + d0, acc[i][0]);
        if (two) V::storef(o + (r + i) * hd + d0 + L, acc[i][1]);
      }
    }
  }
}

// out[i] = act(g[i]) * u[i]: SiLU x / (1 + e^-x), or GELU (tanh form) with
// tanh(y) = 1 - 2 / (e^2y + 1).
template <class V, bool kGelu>
void gated(const float* g, const float* u, float* out, int64_t n) {
  using F = typename V::F;
  constexpr int L = V::kLanes;
  const F one = V::set1f(1.0f);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const F x = V::loadf(g + i);
    F a;
    if constexpr (kGelu) {
      const F y = V::mul(V::set1f(0.7978845608028654f),
                         V::fmadd(V::mul(V::set1f(0.044715f), x), V::mul(x, x), x));
      const F t = V::sub(one, V::div(V::set1f(2.0f), V::add(V::exp(V::add(y, y)), one)));
      a = V::mul(V::mul(V::set1f(0.5f), x), V::add(one, t));
    } else {
      a = V::div(x, V::add(one, V::exp(V::sub(V::zerof(), x))));
    }
    V::storef(out + i, V::mul(a, V::loadf(u + i)));
  }
  for (; i < n; ++i) {
    const float x = g[i];
    float a;
    if constexpr (kGelu) {
      a = 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    } else {
      a = x / (1.0f + std::exp(-x));
    }
    out[i] = a * u[i];
  }
}

}  // namespace
}  // namespace loom::cpu::attn
