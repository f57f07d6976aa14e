// Llama 2 / 3 / 3.1 / 3.2: pre-norm decoder, SwiGLU MLP, GQA, rope (optionally
// linear- or llama3-scaled). Optional attention bias (attention_bias).
#include "model/arch/arch.h"
#include "model/config_json.h"

namespace loom {

namespace {

void llama_from_hf(const ConfigJson&, ModelConfig& m) {
  set_all_layers_sliding(m, false);  // HF Llama has no sliding window
  m.sliding_window = 0;
}

void llama_from_gguf(const GgufFile&, ModelConfig& m) {
  // llama.cpp's converter permutes Q/K of llama-arch files to pair layout.
  m.rope.interleaved = m.rope_local.interleaved = true;
  set_all_layers_sliding(m, false);
  m.sliding_window = 0;
}

}  // namespace

const ArchSpec& llama_arch() {
  static const ArchSpec spec{
      .name = "llama",
      .hf_architectures = {"LlamaForCausalLM"},
      .hf_model_types = {"llama"},
      .gguf_architectures = {"llama"},
      .hf_defaults = R"({"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 2048,
                         "hidden_act": "silu", "tie_word_embeddings": false})",
      .from_hf = llama_from_hf,
      .from_gguf = llama_from_gguf,
  };
  return spec;
}

}  // namespace loom
