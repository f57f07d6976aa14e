#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace loom {

std::vector<float> RopeConfig::inv_freq() const {
  LOOM_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0, "rotary dim {} must be even and positive",
             rotary_dim);
  const int half = rotary_dim / 2;
  std::vector<float> out(half);
  for (int i = 0; i < half; ++i) {
    // Computed in double, rounded once, like HF's float32 arange/pow result
    // within 1 ulp.
    double f = 1.0 / std::pow(theta, static_cast<double>(2 * i) / rotary_dim);
    switch (scaling) {
      case RopeScalingType::None:
        break;
      case RopeScalingType::Linear:
        f /= factor;
        break;
      case RopeScalingType::Llama3: {
        const double low_wavelen = original_max_position / low_freq_factor;
        const double high_wavelen = original_max_position / high_freq_factor;
        const double wavelen = 2 * std::numbers::pi / f;
        if (wavelen > low_wavelen) {
          f /= factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth = (original_max_position / wavelen - low_freq_factor) /
                                (high_freq_factor - low_freq_factor);
          f = (1 - smooth) * f / factor + smooth * f;
        }
        break;
      }
      case RopeScalingType::Yarn: {
        // Dimension range corrected between beta_fast and beta_slow rotations.
        auto correction_dim = [&](double rotations) {
          return rotary_dim * std::log(original_max_position / (rotations * 2 * std::numbers::pi)) /
                 (2 * std::log(theta));
        };
        const double low = std::max(0.0, std::floor(correction_dim(beta_fast)));
        const double high = std::min<double>(rotary_dim - 1, std::ceil(correction_dim(beta_slow)));
        const double ramp = std::clamp((i - low) / std::max(high - low, 1e-3), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;
        f = (f / factor) * (1 - extrapolation) + f * extrapolation;
        break;
      }
    }
    out[i] = static_cast<float>(f);
  }
  return out;
}

float RopeConfig::attention_scale() const {
  if (scaling != RopeScalingType::Yarn) return 1.0f;
  if (attention_factor > 0) return static_cast<float>(attention_factor);
  return factor <= 1 ? 1.0f : static_cast<float>(0.1 * std::log(factor) + 1.0);
}

void ModelConfig::validate() const {
  auto positive = [&](int64_t v, const char* what) {
    if (v <= 0 || v > (int64_t{1} << 31)) LOOM_THROW("model config: {} = {} is out of range", what, v);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_layers, "num_layers");
  positive(num_heads, "num_heads");
  positive(num_kv_heads, "num_kv_heads");
  positive(head_dim, "head_dim");
  if (num_heads % num_kv_heads != 0)
    LOOM_THROW("model config: num_heads {} is not a multiple of num_kv_heads {}", num_heads,
               num_kv_heads);
  if (rope.rotary_dim <= 0 || rope.rotary_dim > head_dim || rope.rotary_dim % 2)
    LOOM_THROW("model config: rotary dim {} does not fit head_dim {}", rope.rotary_dim, head_dim);
  if (!(rms_norm_eps > 0 && rms_norm_eps < 1)) LOOM_THROW("model config: bad rms_norm_eps {}", rms_norm_eps);
  if (!(rope.theta > 0)) LOOM_THROW("model config: bad rope theta {}", rope.theta);
  if (!layer_is_sliding.empty() && static_cast<int64_t>(layer_is_sliding.size()) != num_layers)
    LOOM_THROW("model config: sliding-window pattern has {} layers, model has {}",
               layer_is_sliding.size(), num_layers);
}

}  // namespace loom
