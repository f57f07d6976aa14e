// Elementwise f32 ops: add, gated activations (SiLU; GELU with the tanh
// approximation, HF's gelu_pytorch_tanh) and logit soft-capping.
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"

namespace loom::cpu {

void add(ThreadPool& pool, Tensor& a, const Tensor& b) {
  LOOM_CHECK(a.dtype() == DType::F32 && b.dtype() == DType::F32 && a.numel() == b.numel() &&
                 a.cols() == b.cols(),
             "add needs two f32 tensors of one shape, got {} and {}", shape_str(a.shape()),
             shape_str(b.shape()));
  float* x = a.data_as<float>();
  const float* y = b.data_as<const float>();
  parallel_rows(pool, a.numel(), 1, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) x[i] += y[i];
  });
}

void gated_activation(ThreadPool& pool, const Tensor& gate, const Tensor& up, GatedActivation act,
                      Tensor& out) {
  for (const Tensor* t : {&gate, &up, static_cast<const Tensor*>(&out)})
    LOOM_CHECK(t->dtype() == DType::F32 && t->rows() == gate.rows() && t->cols() == gate.cols(),
               "gated_activation tensors must be f32 of one shape, got {}", shape_str(t->shape()));
  const float* g = gate.data_as<const float>();
  const float* u = up.data_as<const float>();
  float* o = out.data_as<float>();
  const CpuKernels& kern = kernels_for(active_isa());
  const auto fn = act == GatedActivation::Silu ? kern.silu_mul : kern.gelu_mul;
  parallel_rows(pool, gate.numel(), 8,
                [&](int64_t s, int64_t e) { fn(g + s, u + s, o + s, e - s); });
}

void softcap(ThreadPool& pool, Tensor& x, float cap) {
  LOOM_CHECK(x.dtype() == DType::F32, "softcap x must be f32");
  LOOM_CHECK(cap > 0, "softcap cap must be > 0, got {}", cap);
  float* v = x.data_as<float>();
  const float inv = 1.0f / cap;
  parallel_rows(pool, x.numel(), 1, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) v[i] = cap * std::tanh(v[i] * inv);
  });
}

}  // namespace loom::cpu
