// Gemma 3 (text): sandwich norms (post-attention and post-MLP RMSNorm), q/k
// norm, GELU-tanh MLP, embeddings scaled by sqrt(hidden), softmax scale
// query_pre_attn_scalar^-0.5, sliding-window layers with their own rope theta
// (every Nth layer global). HF stores norm weights w meaning (1 + w); llama.cpp's
// converter stores (1 + w) already.
#include <cmath>

#include "core/error.h"
#include "model/arch/arch.h"
#include "model/config_json.h"
#include "model/loader/gguf.h"

namespace loom {

namespace {

void set_pattern(ModelConfig& m, int64_t pattern) {
  for (int64_t i = 0; i < m.num_layers; ++i)
    m.layer_is_sliding[static_cast<size_t>(i)] = (i + 1) % pattern != 0;
}

void common(ModelConfig& m) {
  // Gemma 3 keeps attn_logit_softcapping in its config but neither HF nor
  // llama.cpp applies it (Gemma 2 did).
  m.attn_logit_softcap = 0.0f;
  m.sandwich_norm = true;
  m.qk_norm = true;
  // HF multiplies by a tensor holding sqrt(hidden) rounded to the weights' dtype.
  m.embedding_scale = static_cast<float>(std::sqrt(static_cast<double>(m.hidden_size)));
}

void gemma3_from_hf(const ConfigJson& c, ModelConfig& m) {
  common(m);
  m.norm_weight_plus_one = true;
  m.attention_scale =
      static_cast<float>(1.0 / std::sqrt(c.number("query_pre_attn_scalar", 256.0, 1e-6, 1e9)));
  if (c.boolean("use_bidirectional_attention", false))
    c.fail("use_bidirectional_attention", "= true is not supported");
  // Local (sliding) layers: rope_local_base_freq, unscaled, unless
  // rope_parameters gives a complete "sliding_attention" entry. Old spelling:
  // rope_scaling applies to global layers only.
  const double local_theta = c.number("rope_local_base_freq", 10000.0, 1.0, 1e12);
  std::optional<ConfigJson> sliding;
  if (auto rp = c.object("rope_parameters")) sliding = rp->object("sliding_attention");
  if (!sliding) {
    RopeConfig local;
    local.theta = local_theta;
    local.rotary_dim = m.rope.rotary_dim;
    m.rope_local = local;
  } else if (!sliding->has("rope_theta")) {
    m.rope_local.theta = local_theta;
  }
  if (!c.has("layer_types")) set_pattern(m, c.integer("sliding_window_pattern", 6, 1, int64_t{1} << 12));
}

void gemma3_from_gguf(const GgufFile& f, ModelConfig& m) {
  common(m);
  m.activation = Activation::GeluTanh;
  // As llama.cpp: query_pre_attn_scalar is hidden / heads for the 27B model
  // (62 layers), head_dim otherwise; GGUF files do not store it.
  const double scalar = m.num_layers == 62 ? static_cast<double>(m.hidden_size / m.num_heads)
                                           : static_cast<double>(m.head_dim);
  m.attention_scale = static_cast<float>(1.0 / std::sqrt(scalar));
  RopeConfig local;
  local.theta = 10000.0;  // hard-coded by llama.cpp for gemma3's sliding layers
  local.rotary_dim = m.rope.rotary_dim;
  m.rope_local = local;
  int64_t pattern = 6;
  if (const GgufValue* v = f.find("gemma3.attention.sliding_window_pattern")) {
    if (v->type == GgufType::ARRAY) {
      const auto& values = v->as_array().values;
      if (static_cast<int64_t>(values.size()) != m.num_layers)
        LOOM_THROW("GGUF metadata: gemma3.attention.sliding_window_pattern has {} entries, model has {} layers",
                   values.size(), m.num_layers);
      for (size_t i = 0; i < values.size(); ++i) m.layer_is_sliding[i] = values[i].as_bool();
      return;
    }
    pattern = v->as_int();
    if (pattern <= 0 || pattern > (int64_t{1} << 12))
      LOOM_THROW("GGUF metadata: gemma3.attention.sliding_window_pattern = {} is out of range", pattern);
  }
  set_pattern(m, pattern);
}

}  // namespace

const ArchSpec& gemma3_arch() {
  static const ArchSpec spec{
      .name = "gemma3",
      .hf_architectures = {"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"},
      .hf_model_types = {"gemma3", "gemma3_text"},
      .gguf_architectures = {"gemma3"},
      // Gemma3TextConfig's defaults: multimodal checkpoints' text_config omits most keys.
      .hf_defaults = R"({"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
                         "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                         "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
                         "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
                         "tie_word_embeddings": true, "rope_theta": 1000000.0,
                         "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256,
                         "sliding_window": 4096, "sliding_window_pattern": 6})",
      .from_hf = gemma3_from_hf,
      .from_gguf = gemma3_from_gguf,
  };
  return spec;
}

}  // namespace loom
