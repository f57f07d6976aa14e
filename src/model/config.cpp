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
        double low = correction_dim(beta_fast);
        double high = correction_dim(beta_slow);
        if (yarn_truncate) {
          low = std::floor(low);
          high = std::ceil(high);
        }
        low = std::max(0.0, low);
        high = std::min<double>(rotary_dim - 1, high);
        const double ramp = std::clamp((i - low) / std::max(high - low, 1e-3), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;
        f = (f / factor) * (1 - extrapolation) + f * extrapolation;
        break;
      }
    }
    if (!freq_factors.empty()) {
      LOOM_CHECK(static_cast<int>(freq_factors.size()) == half, "rope has {} frequency factors, expected {}",
                 freq_factors.size(), half);
      f /= freq_factors[i];
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

namespace {

void validate_rope(const RopeConfig& r, int64_t head_dim, const char* which) {
  if (r.rotary_dim <= 0 || r.rotary_dim > head_dim || r.rotary_dim % 2)
    LOOM_THROW("model config: {} rotary dim {} does not fit head_dim {} (must be even, 2..head_dim)",
               which, r.rotary_dim, head_dim);
  if (!(std::isfinite(r.theta) && r.theta > 1))
    LOOM_THROW("model config: {} rope theta {} must be a finite number > 1", which, r.theta);
  if (r.scaling != RopeScalingType::None && !(std::isfinite(r.factor) && r.factor > 0 && r.factor <= 1e6))
    LOOM_THROW("model config: {} rope scaling factor {} must be in (0, 1e6]", which, r.factor);
  if (r.scaling == RopeScalingType::Llama3 || r.scaling == RopeScalingType::Yarn) {
    if (r.original_max_position <= 0 || r.original_max_position > (int64_t{1} << 31))
      LOOM_THROW("model config: {} rope original_max_position_embeddings {} is out of range", which,
                 r.original_max_position);
  }
  if (r.scaling == RopeScalingType::Llama3 &&
      !(std::isfinite(r.low_freq_factor) && std::isfinite(r.high_freq_factor) && r.low_freq_factor > 0 &&
        r.high_freq_factor > r.low_freq_factor))
    LOOM_THROW("model config: {} llama3 rope needs 0 < low_freq_factor ({}) < high_freq_factor ({})", which,
               r.low_freq_factor, r.high_freq_factor);
  if (r.scaling == RopeScalingType::Yarn &&
      !(std::isfinite(r.beta_fast) && std::isfinite(r.beta_slow) && r.beta_fast > 0 && r.beta_slow > 0 &&
        std::isfinite(r.attention_factor) && r.attention_factor >= 0))
    LOOM_THROW("model config: {} yarn rope has bad beta_fast {} / beta_slow {} / attention_factor {}", which,
               r.beta_fast, r.beta_slow, r.attention_factor);
  if (!r.freq_factors.empty()) {
    if (static_cast<int64_t>(r.freq_factors.size()) * 2 != r.rotary_dim)
      LOOM_THROW("model config: {} rope has {} frequency factors, expected rotary_dim / 2 = {}", which,
                 r.freq_factors.size(), r.rotary_dim / 2);
    for (float f : r.freq_factors)
      if (!(std::isfinite(f) && f > 0)) LOOM_THROW("model config: {} rope frequency factor {} is not positive", which, f);
  }
}

}  // namespace

void ModelConfig::validate() const {
  // Upper bounds keep every size derived from the config (weights, caches,
  // activations) far from overflow; real models are orders of magnitude below.
  auto in_range = [&](int64_t v, int64_t hi, const char* what) {
    if (v <= 0 || v > hi) LOOM_THROW("model config: {} = {} is out of range (1..{})", what, v, hi);
  };
  in_range(vocab_size, (int64_t{1} << 31) - 1, "vocab_size");
  in_range(hidden_size, int64_t{1} << 20, "hidden_size");
  in_range(intermediate_size, int64_t{1} << 22, "intermediate_size");
  in_range(num_layers, int64_t{1} << 12, "num_layers");
  in_range(num_heads, int64_t{1} << 12, "num_heads");
  in_range(num_kv_heads, int64_t{1} << 12, "num_kv_heads");
  in_range(head_dim, int64_t{1} << 12, "head_dim");
  if (num_heads % num_kv_heads != 0)
    LOOM_THROW("model config: num_heads {} is not a multiple of num_kv_heads {}", num_heads,
               num_kv_heads);
  if (max_position < 0 || max_position > (int64_t{1} << 31))
    LOOM_THROW("model config: max_position = {} is out of range", max_position);
  if (!(rms_norm_eps > 0 && rms_norm_eps < 1)) LOOM_THROW("model config: bad rms_norm_eps {}", rms_norm_eps);
  validate_rope(rope, head_dim, "global");
  validate_rope(rope_local, head_dim, "local");
  if (!(std::isfinite(embedding_scale) && embedding_scale > 0))
    LOOM_THROW("model config: bad embedding scale {}", embedding_scale);
  if (!(std::isfinite(attention_scale) && attention_scale >= 0))
    LOOM_THROW("model config: bad attention scale {}", attention_scale);
  if (!(std::isfinite(attn_logit_softcap) && attn_logit_softcap >= 0))
    LOOM_THROW("model config: bad attention logit softcap {}", attn_logit_softcap);
  if (!(std::isfinite(final_logit_softcap) && final_logit_softcap >= 0))
    LOOM_THROW("model config: bad final logit softcap {}", final_logit_softcap);
  if (sliding_window < 0 || sliding_window > (int64_t{1} << 31) - 1)
    LOOM_THROW("model config: sliding_window = {} is out of range", sliding_window);
  if (!layer_is_sliding.empty() && static_cast<int64_t>(layer_is_sliding.size()) != num_layers)
    LOOM_THROW("model config: sliding-window pattern has {} layers, model has {}",
               layer_is_sliding.size(), num_layers);
  if (any_sliding() && sliding_window <= 0)
    LOOM_THROW("model config: layers use sliding-window attention but sliding_window is not set");
}

bool ModelConfig::any_sliding() const {
  return std::find(layer_is_sliding.begin(), layer_is_sliding.end(), true) != layer_is_sliding.end();
}

const RopeConfig& ModelConfig::rope_for_layer(int64_t layer) const {
  const bool sliding = layer >= 0 && layer < static_cast<int64_t>(layer_is_sliding.size()) &&
                       layer_is_sliding[static_cast<size_t>(layer)];
  return sliding ? rope_local : rope;
}

}  // namespace loom
