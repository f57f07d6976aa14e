// How a model's linear layers are quantised: FP8 E4M3 weights with scales
// and FP8 activations (W8A8), read from an HF config.json's
// `quantization_config` (quant_method "fp8", or "compressed-tensors" with
// FP8 float schemes), or chosen at load time (--quantization fp8: loom
// quantises bf16/fp16 weights per output channel). Which tensors are FP8 is
// decided per tensor by its dtype (layers a checkpoint leaves unquantised,
// such as lm_head, stay as they are); this says how the FP8 ones are scaled.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "backend/linear.h"  // Fp8WeightScale, Fp8Activation

namespace loom {

struct QuantizationConfig {
  bool fp8 = false;    // false: no quantisation (everything below unused)
  std::string source;  // "fp8", "compressed-tensors" or "online" (--quantization fp8)
  Fp8WeightScale weight_scale = Fp8WeightScale::Channel;
  int64_t block_n = 0;  // Block: the tile (128 x 128, the only size supported)
  int64_t block_k = 0;
  Fp8Activation activation = Fp8Activation::DynamicToken;
  bool quantize_at_load = false;  // online: weights arrive in bf16/fp16/f32
  bool kv_cache_scales = false;   // the checkpoint ships KV cache scales (k_scale/v_scale)

  // One line for logs and `loom env`, e.g. "fp8 (compressed-tensors): per-channel
  // weight scales, dynamic per-token activations".
  std::string describe() const;
};

// The quantisation named by config.json's `quantization_config` (`cfg` is
// the whole config object; the key may be absent or null: no quantisation).
// A scheme loom cannot run throws loom::Error naming it (quant_method,
// bits/type/strategy, block size...), so an unsupported checkpoint fails at
// start-up with one clear line.
QuantizationConfig quantization_from_hf(const nlohmann::json& cfg);

// --quantization fp8: per-channel weight scales computed at load, dynamic
// per-token activations.
QuantizationConfig online_fp8_quantization();

}  // namespace loom
