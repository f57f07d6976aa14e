// rms_norm and add_rms_norm over the last dimension, f32 activations, with the
// weight (f32, f16 or bf16) offset by weight_offset (Gemma stores w - 1).
// The mean of squares is accumulated in double so long rows stay exact.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/quant/quant.h"
#include "core/error.h"

namespace loom::cpu {
namespace {

// (w + offset) as f32, once per call.
std::vector<float> norm_weight(const Tensor& w, int64_t h, float offset) {
  LOOM_CHECK(w.numel() == h, "norm weight {} must have {} values", shape_str(w.shape()), h);
  LOOM_CHECK(w.dtype() == DType::F32 || w.dtype() == DType::F16 || w.dtype() == DType::BF16,
             "norm weight must be f32, f16 or bf16, got {}", dtype_name(w.dtype()));
  std::vector<float> g(static_cast<size_t>(h));
  quant::dequantize_row(w.dtype(), w.data(), g.data(), h);
  for (float& v : g) v += offset;
  return g;
}

inline void norm_row(const float* x, const float* g, float eps, float* y, int64_t h) {
  double ss = 0;
  for (int64_t j = 0; j < h; ++j) ss += static_cast<double>(x[j]) * x[j];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h) + eps));
  for (int64_t j = 0; j < h; ++j) y[j] = x[j] * inv * g[j];
}

void check_act(const Tensor& t, const Tensor& like, const char* what) {
  LOOM_CHECK(t.dtype() == DType::F32 && t.rows() == like.rows() && t.cols() == like.cols(),
             "{} {} must be f32 with the shape of x {}", what, shape_str(t.shape()),
             shape_str(like.shape()));
}

}  // namespace

void rms_norm(ThreadPool& pool, const Tensor& x, const Tensor& w, float eps, float weight_offset,
              Tensor& out) {
  LOOM_CHECK(x.dtype() == DType::F32, "rms_norm x must be f32");
  check_act(out, x, "rms_norm out");
  const int64_t h = x.cols();
  const auto g = norm_weight(w, h, weight_offset);
  const float* xs = x.data_as<const float>();
  float* o = out.data_as<float>();
  parallel_rows(pool, x.rows(), h, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) norm_row(xs + r * h, g.data(), eps, o + r * h, h);
  });
}

void add_rms_norm(ThreadPool& pool, const Tensor& x, Tensor& residual, const Tensor& w, float eps,
                  float weight_offset, Tensor& out) {
  LOOM_CHECK(x.dtype() == DType::F32, "add_rms_norm x must be f32");
  check_act(residual, x, "add_rms_norm residual");
  check_act(out, x, "add_rms_norm out");
  const int64_t h = x.cols();
  const auto g = norm_weight(w, h, weight_offset);
  const float* xs = x.data_as<const float>();
  float* res = residual.data_as<float>();
  float* o = out.data_as<float>();
  parallel_rows(pool, x.rows(), h, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* rr = res + r * h;
      for (int64_t j = 0; j < h; ++j) rr[j] += xs[r * h + j];
      norm_row(rr, g.data(), eps, o + r * h, h);
    }
  });
}

}  // namespace loom::cpu
