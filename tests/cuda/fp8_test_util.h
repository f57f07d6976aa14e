// What the CUDA FP8 tests share: their fixture (a CUDA and a CPU backend,
// the CUDA one's stream) and random FP8 test weights, per-channel (dynamic
// per-token activations), per-tensor with a static input scale, or 128x128
// blocks (1x128 activation groups), quantised on the host.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "backend/linear.h"
#include "core/fp8.h"
#include "cuda_test_util.h"

namespace loom::cudatest {

class CudaFp8Test : public CudaAndCpuTest {
 protected:
  void SetUp() override {
    CudaAndCpuTest::SetUp();
    if (IsSkipped()) return;
    stream_ = static_cast<cudaStream_t>(cuda_backend_stream(*gpu_));
  }
  cudaStream_t stream_ = nullptr;
};

enum class Scheme { Channel, TensorStatic, Block };

inline const char* scheme_name(Scheme s) {
  return s == Scheme::Channel        ? "per-channel/token"
         : s == Scheme::TensorStatic ? "per-tensor/static"
                                     : "block/group";
}

// A host FP8 weight [n, k] of random values quantised by `scheme`.
inline LinearWeight make_weight(Scheme scheme, int64_t n, int64_t k, uint32_t seed) {
  const auto w = random_bf16_values(static_cast<size_t>(n * k), seed, -0.5f, 0.5f);
  if (scheme == Scheme::Channel) return quantize_fp8_per_channel(cpu_f32(w, {n, k}));
  LinearWeight out;
  out.weight = Tensor::cpu(DType::F8_E4M3, {n, k});
  auto* q = out.weight.data_as<uint8_t>();
  if (scheme == Scheme::TensorStatic) {
    float amax = 0;
    for (float v : w) amax = std::max(amax, std::fabs(v));
    const float s = fp8_scale_for_amax(amax);
    for (size_t i = 0; i < w.size(); ++i) q[i] = f32_to_fp8_e4m3(w[i] * (1.0f / s));
    out.scale_kind = Fp8WeightScale::Tensor;
    out.scale = cpu_f32({s}, {1});
    out.activation = Fp8Activation::Static;
    out.input_scale =
        cpu_f32({0.9f * 2.0f / 448.0f}, {1});  // inputs in [-2, 2]: a little saturation
    return out;
  }
  const int64_t nb = (n + 127) / 128, kb = (k + 127) / 128;
  std::vector<float> scale(static_cast<size_t>(nb * kb));
  for (int64_t i = 0; i < nb; ++i)
    for (int64_t j = 0; j < kb; ++j) {
      float amax = 0;
      for (int64_t r = i * 128; r < std::min(n, i * 128 + 128); ++r)
        for (int64_t c = j * 128; c < std::min(k, j * 128 + 128); ++c)
          amax = std::max(amax, std::fabs(w[r * k + c]));
      const float s =
          fp8_scale_for_amax(amax * (1.0f + 0.1f * static_cast<float>((i + 2 * j) % 3)));
      scale[static_cast<size_t>(i * kb + j)] = s;
      for (int64_t r = i * 128; r < std::min(n, i * 128 + 128); ++r)
        for (int64_t c = j * 128; c < std::min(k, j * 128 + 128); ++c)
          q[r * k + c] = f32_to_fp8_e4m3(w[r * k + c] * (1.0f / s));
    }
  out.scale_kind = Fp8WeightScale::Block;
  out.scale = cpu_f32(scale, {nb, kb});
  out.activation = Fp8Activation::DynamicGroup;
  return out;
}

}  // namespace loom::cudatest
