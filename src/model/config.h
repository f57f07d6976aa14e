// ModelConfig: everything the forward pass needs to know about a model's
// shape and numerics, independent of the file format it came from. Filled by
// the architecture's ArchSpec from an HF config.json or from GGUF metadata.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/quantization.h"

namespace loom {

enum class RopeScalingType { None, Linear, Llama3, Yarn };

struct RopeConfig {
  double theta = 10000.0;
  int rotary_dim = 0;              // dims rotated per head (== head_dim unless partial)
  bool interleaved = false;        // true: pairs (2i, 2i+1) (GGUF llama); false: halves (HF, NEOX)
  RopeScalingType scaling = RopeScalingType::None;
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 0.0;  // 0: derive from factor
  bool yarn_truncate = true;       // round the correction range to whole dims (HF default)
  // Per-pair divisors of the frequencies (GGUF `rope_freqs.weight`, how
  // llama.cpp stores llama3 scaling); empty: none. Applied after `scaling`.
  std::vector<float> freq_factors;

  // Inverse frequency per rotated pair, [rotary_dim / 2], scaling applied.
  std::vector<float> inv_freq() const;
  // Multiplier applied to cos/sin (yarn's mscale); 1 otherwise.
  float attention_scale() const;
};

enum class Activation { Silu, GeluTanh };

struct ModelConfig {
  std::string arch;               // registry name: "llama", "qwen2", "qwen3", "gemma3", "mistral"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position = 0;       // context length the model was trained for
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  RopeConfig rope_local;          // gemma3 sliding-window layers (theta differs)
  Activation activation = Activation::Silu;
  bool tie_word_embeddings = false;
  bool attention_bias = false;    // bias on q, k, v projections (qwen2)
  bool qk_norm = false;           // RMSNorm over each head of q and k (qwen3, gemma3)
  bool sandwich_norm = false;     // extra norms after attention and MLP (gemma3)
  bool norm_weight_plus_one = false;  // stored norm weight w means (1 + w) (gemma, HF layout)
  float embedding_scale = 1.0f;   // multiplies embeddings (gemma: sqrt(hidden))
  float attention_scale = 0.0f;   // softmax scale; 0 means 1/sqrt(head_dim)
  float attn_logit_softcap = 0.0f;   // 0: none
  float final_logit_softcap = 0.0f;  // 0: none
  int64_t sliding_window = 0;     // 0: none
  // Per layer: true when the layer uses sliding-window attention (and rope_local).
  std::vector<bool> layer_is_sliding;
  // FP8 linear layers (HF quantization_config, or --quantization fp8).
  QuantizationConfig quantization;

  void validate() const;  // throws loom::Error on inconsistent or out-of-range values

  bool any_sliding() const;
  const RopeConfig& rope_for_layer(int64_t layer) const;
};

class GgufFile;

// ModelConfig from an HF config.json (parsed JSON object). The architecture
// comes from `architectures` (or `model_type`); multimodal checkpoints' text
// model is read from `text_config`. Missing keys take the HF config class's
// defaults for that architecture. Throws loom::Error naming the bad key.
ModelConfig model_config_from_hf(const nlohmann::json& config);
ModelConfig model_config_from_hf_text(std::string_view json_text);
ModelConfig model_config_from_hf_file(const std::string& path);
// ModelConfig from GGUF metadata (`general.architecture`, `{arch}.*`) and, where
// llama.cpp stores config as tensors (rope_freqs.weight), the file's tensors.
ModelConfig model_config_from_gguf(const GgufFile& file);

}  // namespace loom
