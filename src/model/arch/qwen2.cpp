// Qwen2 / Qwen2.5: the Llama layer with bias on the q, k, v projections.
// Sliding windows only when use_sliding_window (layers >= max_window_layers).
#include "model/arch/arch.h"
#include "model/config_json.h"

namespace loom {

// Shared with qwen3.cpp: HF Qwen2/3 use the window only with use_sliding_window,
// on the layers listed in layer_types or else on layers >= max_window_layers.
void qwen_sliding_layers_from_hf(const ConfigJson& c, ModelConfig& m) {
  if (!c.boolean("use_sliding_window", false) || m.sliding_window <= 0) {
    set_all_layers_sliding(m, false);
    m.sliding_window = 0;
    return;
  }
  if (c.has("layer_types")) return;  // already read
  const int64_t first = c.integer("max_window_layers", 28, 0, int64_t{1} << 12);
  for (int64_t i = 0; i < m.num_layers; ++i) m.layer_is_sliding[static_cast<size_t>(i)] = i >= first;
}

namespace {

void qwen2_from_hf(const ConfigJson& c, ModelConfig& m) {
  m.attention_bias = true;  // HF Qwen2 always has q/k/v bias (no o bias)
  qwen_sliding_layers_from_hf(c, m);
}

void qwen2_from_gguf(const GgufFile&, ModelConfig& m) {
  m.attention_bias = true;
  set_all_layers_sliding(m, false);
  m.sliding_window = 0;
}

}  // namespace

const ArchSpec& qwen2_arch() {
  static const ArchSpec spec{
      .name = "qwen2",
      .hf_architectures = {"Qwen2ForCausalLM"},
      .hf_model_types = {"qwen2"},
      .gguf_architectures = {"qwen2"},
      .hf_defaults = R"({"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 32768,
                         "hidden_act": "silu", "tie_word_embeddings": false, "use_sliding_window": false,
                         "sliding_window": 4096, "max_window_layers": 28})",
      .from_hf = qwen2_from_hf,
      .from_gguf = qwen2_from_gguf,
  };
  return spec;
}

}  // namespace loom
