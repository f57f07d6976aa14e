// Rotary position embedding in place on [T, heads, head_dim]: interleaved pairs
// (2i, 2i+1) as GPT-J/llama.cpp "normal" mode, or NEOX halves (i, i + rot/2) as
// HF's rotate_half. Angles are computed in f32 as HF does (pos * inv_freq), then
// cos/sin, both scaled by mscale (YaRN attention factor).
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace loom::cpu {

void rope(ThreadPool& pool, Tensor& x, const Tensor& positions, const Tensor& inv_freq,
          int rotary_dim, bool interleaved, float mscale) {
  LOOM_CHECK(x.dtype() == DType::F32 && x.ndim() == 3,
             "rope x must be f32 [T, heads, head_dim], got {}", shape_str(x.shape()));
  const int64_t t = x.dim(0), heads = x.dim(1), hd = x.dim(2);
  LOOM_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= hd,
             "rotary_dim {} must be even and in (0, {}]", rotary_dim, hd);
  LOOM_CHECK(positions.dtype() == DType::I32 && positions.numel() == t,
             "rope positions must be i32 [{}]", t);
  const int half = rotary_dim / 2;
  LOOM_CHECK(inv_freq.dtype() == DType::F32 && inv_freq.numel() == half,
             "rope inv_freq must be f32 [{}]", half);
  const int32_t* pos = positions.data_as<const int32_t>();
  const float* freq = inv_freq.data_as<const float>();
  float* xs = x.data_as<float>();
  parallel_rows(pool, t, heads * hd, [&](int64_t b, int64_t e) {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (int64_t i = b; i < e; ++i) {
      for (int j = 0; j < half; ++j) {
        const float theta = static_cast<float>(pos[i]) * freq[j];
        cs[j] = std::cos(theta) * mscale;
        sn[j] = std::sin(theta) * mscale;
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* v = xs + (i * heads + h) * hd;
        for (int j = 0; j < half; ++j) {
          const int a = interleaved ? 2 * j : j, c = interleaved ? 2 * j + 1 : j + half;
          const float x0 = v[a], x1 = v[c];
          v[a] = x0 * cs[j] - x1 * sn[j];
          v[c] = x0 * sn[j] + x1 * cs[j];
        }
      }
    }
  });
}

}  // namespace loom::cpu
