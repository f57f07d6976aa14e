// Mistral: the Llama layer with sliding-window attention on every layer when
// `sliding_window` is set (Mistral 7B v0.1; later versions set it to null).
#include "model/arch/arch.h"
#include "model/config_json.h"

namespace loom {

namespace {

void mistral_from_hf(const ConfigJson&, ModelConfig& m) {
  // HF Mistral masks every layer with the window, whatever layer_types says.
  set_all_layers_sliding(m, m.sliding_window > 0);
}

void mistral_from_gguf(const GgufFile&, ModelConfig& m) {
  m.rope.interleaved = m.rope_local.interleaved = true;  // converted like llama
  set_all_layers_sliding(m, m.sliding_window > 0);
}

}  // namespace

const ArchSpec& mistral_arch() {
  static const ArchSpec spec{
      .name = "mistral",
      .hf_architectures = {"MistralForCausalLM"},
      .hf_model_types = {"mistral"},
      .gguf_architectures = {"mistral"},
      .hf_defaults = R"({"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 131072,
                         "hidden_act": "silu", "tie_word_embeddings": false, "sliding_window": 4096})",
      .from_hf = mistral_from_hf,
      .from_gguf = mistral_from_gguf,
  };
  return spec;
}

}  // namespace loom
