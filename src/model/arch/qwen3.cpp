// Qwen3 (dense): the Llama layer with RMSNorm over each head of q and k
// before rope, head_dim independent of hidden / heads, optional attention bias.
#include "model/arch/arch.h"
#include "model/config_json.h"

namespace loom {

void qwen_sliding_layers_from_hf(const ConfigJson& c, ModelConfig& m);  // qwen2.cpp

namespace {

void qwen3_from_hf(const ConfigJson& c, ModelConfig& m) {
  m.qk_norm = true;
  qwen_sliding_layers_from_hf(c, m);
}

void qwen3_from_gguf(const GgufFile&, ModelConfig& m) {
  m.qk_norm = true;
  set_all_layers_sliding(m, false);
  m.sliding_window = 0;
}

}  // namespace

const ArchSpec& qwen3_arch() {
  static const ArchSpec spec{
      .name = "qwen3",
      .hf_architectures = {"Qwen3ForCausalLM"},
      .hf_model_types = {"qwen3"},
      .gguf_architectures = {"qwen3"},
      .hf_defaults = R"({"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 32768,
                         "head_dim": 128, "hidden_act": "silu", "tie_word_embeddings": false,
                         "use_sliding_window": false, "sliding_window": 4096, "max_window_layers": 28})",
      .from_hf = qwen3_from_hf,
      .from_gguf = qwen3_from_gguf,
  };
  return spec;
}

}  // namespace loom
