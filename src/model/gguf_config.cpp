// ModelConfig from GGUF metadata, as llama.cpp's converter writes it:
// `general.architecture` picks the ArchSpec, `{arch}.*` keys give the shared
// sizes, and the spec fills what llama.cpp hard-codes per architecture.
#include <cmath>

#include "core/error.h"
#include "model/arch/arch.h"
#include "model/config.h"
#include "model/loader/gguf.h"

namespace loom {

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 31;

int64_t int_key(const GgufFile& f, const std::string& key, std::optional<int64_t> fallback) {
  const GgufValue* v = f.find(key);
  if (!v) {
    if (!fallback) LOOM_THROW("GGUF metadata: missing required key '{}'", key);
    return *fallback;
  }
  int64_t out;
  try {
    out = v->as_int();
  } catch (const Error&) {
    LOOM_THROW("GGUF metadata: '{}' must be an integer", key);
  }
  if (out < 0 || out > kMaxDim) LOOM_THROW("GGUF metadata: '{}' = {} is out of range", key, out);
  return out;
}

double float_key(const GgufFile& f, const std::string& key, double fallback) {
  const GgufValue* v = f.find(key);
  if (!v) return fallback;
  double out;
  try {
    out = v->as_float();
  } catch (const Error&) {
    LOOM_THROW("GGUF metadata: '{}' must be a number", key);
  }
  if (!std::isfinite(out)) LOOM_THROW("GGUF metadata: '{}' is not finite", key);
  return out;
}

void read_rope(const GgufFile& f, const std::string& arch, ModelConfig& m) {
  RopeConfig& r = m.rope;
  r.theta = float_key(f, arch + ".rope.freq_base", 10000.0);
  r.rotary_dim = static_cast<int>(int_key(f, arch + ".rope.dimension_count", m.head_dim));
  std::string type = f.get_string(arch + ".rope.scaling.type", "");
  const double linear_scale = float_key(f, arch + ".rope.scale_linear", 0.0);  // legacy key
  if (type.empty() && linear_scale > 0 && linear_scale != 1.0) {
    type = "linear";
  }
  if (type.empty() || type == "none") {
    r.scaling = RopeScalingType::None;
  } else if (type == "linear") {
    r.scaling = RopeScalingType::Linear;
    r.factor = float_key(f, arch + ".rope.scaling.factor", linear_scale > 0 ? linear_scale : 1.0);
  } else if (type == "yarn") {
    r.scaling = RopeScalingType::Yarn;
    r.factor = float_key(f, arch + ".rope.scaling.factor", 1.0);
    r.original_max_position = int_key(f, arch + ".rope.scaling.original_context_length", m.max_position);
    r.beta_fast = float_key(f, arch + ".rope.scaling.yarn_beta_fast", 32.0);
    r.beta_slow = float_key(f, arch + ".rope.scaling.yarn_beta_slow", 1.0);
    r.attention_factor = float_key(f, arch + ".rope.scaling.attn_factor", 0.0);
  } else {
    LOOM_THROW("GGUF metadata: unsupported rope scaling type '{}' (supported: none, linear, yarn)", type);
  }
  // llama.cpp stores llama3-style scaling as per-pair frequency divisors.
  if (const GgufTensorInfo* info = f.find_tensor("rope_freqs.weight")) {
    if (info->dtype != DType::F32 || info->shape.size() != 1 || info->shape[0] * 2 != r.rotary_dim)
      LOOM_THROW("GGUF: rope_freqs.weight must be f32 [{}], is {} {}", r.rotary_dim / 2, dtype_name(info->dtype),
                 shape_str(info->shape));
    Tensor t = f.tensor(*info);
    const float* p = t.data_as<const float>();
    r.freq_factors.assign(p, p + info->shape[0]);
  }
  m.rope_local = r;
}

}  // namespace

ModelConfig model_config_from_gguf(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture", "");
  if (arch.empty()) LOOM_THROW("GGUF metadata: missing 'general.architecture'");
  const ArchSpec* spec = find_arch_by_gguf_name(arch);
  if (!spec)
    LOOM_THROW("GGUF: unsupported architecture '{}' (supported: {})", arch, supported_gguf_architectures());
  const std::string p = arch + ".";

  ModelConfig m;
  m.arch = std::string(spec->name);
  if (f.find(p + "vocab_size")) {
    m.vocab_size = int_key(f, p + "vocab_size", std::nullopt);
  } else if (const GgufValue* tokens = f.find("tokenizer.ggml.tokens")) {
    if (tokens->type != GgufType::ARRAY) LOOM_THROW("GGUF metadata: 'tokenizer.ggml.tokens' must be an array");
    m.vocab_size = static_cast<int64_t>(tokens->as_array().values.size());
  } else {
    LOOM_THROW("GGUF metadata: no '{}vocab_size' and no 'tokenizer.ggml.tokens' to size the vocabulary", p);
  }
  m.hidden_size = int_key(f, p + "embedding_length", std::nullopt);
  m.intermediate_size = int_key(f, p + "feed_forward_length", std::nullopt);
  m.num_layers = int_key(f, p + "block_count", std::nullopt);
  m.num_heads = int_key(f, p + "attention.head_count", std::nullopt);
  if (m.num_heads <= 0) LOOM_THROW("GGUF metadata: '{}attention.head_count' must be positive", p);
  m.num_kv_heads = int_key(f, p + "attention.head_count_kv", m.num_heads);
  m.head_dim = int_key(f, p + "attention.key_length", m.hidden_size / m.num_heads);
  if (const int64_t v = int_key(f, p + "attention.value_length", m.head_dim); v != m.head_dim)
    LOOM_THROW("GGUF metadata: value_length {} differs from key_length {} (not supported)", v, m.head_dim);
  m.max_position = int_key(f, p + "context_length", 0);
  m.rms_norm_eps = float_key(f, p + "attention.layer_norm_rms_epsilon", 1e-5);
  read_rope(f, arch, m);
  m.sliding_window = int_key(f, p + "attention.sliding_window", 0);
  if (m.num_layers <= 0 || m.num_layers > (int64_t{1} << 12))
    LOOM_THROW("GGUF metadata: '{}block_count' = {} is out of range (1..4096)", p, m.num_layers);
  m.layer_is_sliding.assign(static_cast<size_t>(m.num_layers), false);
  m.attn_logit_softcap = static_cast<float>(float_key(f, p + "attn_logit_softcapping", 0.0));
  m.final_logit_softcap = static_cast<float>(float_key(f, p + "final_logit_softcapping", 0.0));
  m.attention_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  // llama.cpp uses token_embd for the output when the file has no output.weight.
  m.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;

  spec->from_gguf(f, m);
  m.validate();
  return m;
}

}  // namespace loom
