// ModelConfig from an HF config.json: the keys shared by all architectures
// (sizes, rope in both spellings, sliding-window layer types, softcaps); the
// architecture's ArchSpec adds the rest. Every value is type- and range-checked.
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "model/arch/arch.h"
#include "model/config.h"
#include "model/config_json.h"

namespace loom {

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 31;
constexpr size_t kMaxConfigBytes = 16 << 20;

Activation parse_activation(const ConfigJson& c) {
  const char* key = c.has("hidden_activation") ? "hidden_activation" : "hidden_act";
  const std::string act = c.string(key, "silu");
  if (act == "silu" || act == "swish") return Activation::Silu;
  if (act == "gelu_pytorch_tanh" || act == "gelu_tanh" || act == "gelu_new") return Activation::GeluTanh;
  c.fail(key, "is not a supported activation (supported: silu, swish, gelu_pytorch_tanh, gelu_new)");
}

// One rope parameter set: `params` is rope_scaling (old spelling) or one
// rope_parameters entry (new); `theta` is used when params carry no rope_theta.
RopeConfig parse_rope(const std::optional<ConfigJson>& params, double theta, int64_t max_position,
                      int64_t head_dim, double partial_rotary_factor) {
  RopeConfig r;
  r.theta = theta;
  if (params) {
    r.theta = params->number("rope_theta", theta, 1.0, 1e12);
    partial_rotary_factor = params->number("partial_rotary_factor", partial_rotary_factor, 0.0, 1.0);
  }
  r.rotary_dim = static_cast<int>(static_cast<double>(head_dim) * partial_rotary_factor);
  if (!params) return r;
  const ConfigJson& p = *params;
  const char* type_key = p.has("rope_type") ? "rope_type" : "type";
  const std::string type = p.string(type_key, "default");
  if (type == "default") {
    r.scaling = RopeScalingType::None;
  } else if (type == "linear") {
    r.scaling = RopeScalingType::Linear;
    r.factor = p.optional_number("factor", 1e-6, 1e6).value_or(0);
    if (r.factor == 0) p.fail("factor", "is required for linear rope scaling");
  } else if (type == "llama3") {
    r.scaling = RopeScalingType::Llama3;
    r.factor = p.optional_number("factor", 1e-6, 1e6).value_or(0);
    if (r.factor == 0) p.fail("factor", "is required for llama3 rope scaling");
    r.low_freq_factor = p.number("low_freq_factor", 1.0, 1e-6, 1e6);
    r.high_freq_factor = p.number("high_freq_factor", 4.0, 1e-6, 1e6);
    r.original_max_position = p.integer("original_max_position_embeddings", 1, kMaxDim);
  } else if (type == "yarn") {
    r.scaling = RopeScalingType::Yarn;
    const auto original = p.optional_integer("original_max_position_embeddings", 1, kMaxDim);
    r.original_max_position = original.value_or(max_position);
    if (r.original_max_position <= 0) p.fail("original_max_position_embeddings", "is required for yarn");
    auto factor = p.optional_number("factor", 1e-6, 1e6);
    if (!factor && original && max_position > 0)
      factor = static_cast<double>(max_position) / static_cast<double>(*original);
    if (!factor) p.fail("factor", "is required for yarn rope scaling");
    r.factor = *factor;
    r.beta_fast = p.number("beta_fast", 32.0, 1e-6, 1e6);
    r.beta_slow = p.number("beta_slow", 1.0, 1e-6, 1e6);
    r.yarn_truncate = p.boolean("truncate", true);
    if (auto af = p.optional_number("attention_factor", 0.0, 1e3)) {
      r.attention_factor = *af;
    } else {
      const double mscale = p.number("mscale", 0.0, 0.0, 1e3);
      const double mscale_all_dim = p.number("mscale_all_dim", 0.0, 0.0, 1e3);
      auto get_mscale = [&](double m) { return r.factor <= 1 ? 1.0 : 0.1 * m * std::log(r.factor) + 1.0; };
      r.attention_factor = (mscale > 0 && mscale_all_dim > 0) ? get_mscale(mscale) / get_mscale(mscale_all_dim)
                                                              : get_mscale(1.0);
    }
  } else {
    p.fail(type_key, "is not a supported rope type (supported: default, linear, llama3, yarn)");
  }
  return r;
}

// Whether a rope_parameters object is keyed by layer type (Gemma 3 style).
bool is_per_layer_type(const ConfigJson& rp) {
  return rp.json().contains("full_attention") || rp.json().contains("sliding_attention");
}

void read_rope(const ConfigJson& c, ModelConfig& m) {
  const double partial = c.number("partial_rotary_factor", 1.0, 0.0, 1.0);
  const double theta = c.number("rope_theta", 10000.0, 1.0, 1e12);
  if (auto rp = c.object("rope_parameters")) {
    if (is_per_layer_type(*rp)) {
      auto full = rp->object("full_attention");
      auto sliding = rp->object("sliding_attention");
      if (!full) rp->fail("full_attention", "is required when rope_parameters is given per layer type");
      m.rope = parse_rope(full, theta, m.max_position, m.head_dim, partial);
      m.rope_local = sliding ? parse_rope(sliding, theta, m.max_position, m.head_dim, partial) : m.rope;
    } else {
      m.rope = parse_rope(rp, theta, m.max_position, m.head_dim, partial);
      m.rope_local = m.rope;
    }
    return;
  }
  m.rope = parse_rope(c.object("rope_scaling"), theta, m.max_position, m.head_dim, partial);
  m.rope_local = m.rope;
}

void read_layer_types(const ConfigJson& c, ModelConfig& m) {
  m.layer_is_sliding.assign(static_cast<size_t>(m.num_layers), false);
  const nlohmann::json* types = c.find("layer_types");
  if (!types) return;
  if (!types->is_array() || static_cast<int64_t>(types->size()) != m.num_layers)
    c.fail("layer_types", fmt::format("must be a list of {} layer types (one per layer)", m.num_layers));
  for (size_t i = 0; i < types->size(); ++i) {
    const nlohmann::json& t = (*types)[i];
    if (t == "full_attention") {
      m.layer_is_sliding[i] = false;
    } else if (t == "sliding_attention") {
      m.layer_is_sliding[i] = true;
    } else {
      c.fail("layer_types", fmt::format("has unsupported entry {} at layer {} (supported: full_attention, "
                                        "sliding_attention)", t.dump(), i));
    }
  }
}

const ArchSpec& detect_arch(const ConfigJson& root, const ConfigJson& text) {
  if (const nlohmann::json* archs = root.find("architectures")) {
    if (!archs->is_array()) root.fail("architectures", "must be a list of strings");
    std::string first;
    for (const auto& a : *archs) {
      if (!a.is_string()) root.fail("architectures", "must be a list of strings");
      if (const ArchSpec* spec = find_arch_by_hf_architecture(a.get<std::string>())) return *spec;
      if (first.empty()) first = a.get<std::string>();
    }
    if (!first.empty())
      LOOM_THROW("{}: unsupported architecture '{}' (supported: {})", root.context(), first,
                 supported_hf_architectures());
  }
  for (const ConfigJson* c : {&root, &text}) {
    const std::string type = c->string("model_type", "");
    if (type.empty()) continue;
    if (const ArchSpec* spec = find_arch_by_hf_model_type(type)) return *spec;
    LOOM_THROW("{}: unsupported model_type '{}' (supported architectures: {})", root.context(), type,
               supported_hf_architectures());
  }
  LOOM_THROW("{}: names no architecture (neither 'architectures' nor 'model_type'); supported: {}",
             root.context(), supported_hf_architectures());
}

}  // namespace

ModelConfig model_config_from_hf(const nlohmann::json& config) {
  const ConfigJson root(config, "config.json");
  const ConfigJson* text = &root;
  std::optional<ConfigJson> nested = root.object("text_config");
  if (nested) text = &*nested;
  const ArchSpec& spec = detect_arch(root, *text);

  // The text config over the architecture's HF defaults.
  nlohmann::json merged = nlohmann::json::parse(spec.hf_defaults);
  if (nested) {
    // Multimodal wrappers may keep these at the top level.
    for (const char* key : {"tie_word_embeddings"})
      if (const nlohmann::json* v = root.find(key)) merged[key] = *v;
  }
  for (const auto& [key, value] : text->json().items()) merged[key] = value;
  const ConfigJson c(merged, nested ? "config.json 'text_config'" : "config.json");

  ModelConfig m;
  m.arch = std::string(spec.name);
  m.vocab_size = c.integer("vocab_size", 1, kMaxDim - 1);
  m.hidden_size = c.integer("hidden_size", 1, kMaxDim);
  m.intermediate_size = c.integer("intermediate_size", 1, kMaxDim);
  m.num_layers = c.integer("num_hidden_layers", 1, int64_t{1} << 12);  // sizes per-layer lists
  m.num_heads = c.integer("num_attention_heads", 1, kMaxDim);
  m.num_kv_heads = c.integer("num_key_value_heads", m.num_heads, 1, kMaxDim);
  if (auto hd = c.optional_integer("head_dim", 1, kMaxDim)) {
    m.head_dim = *hd;
  } else {
    if (m.hidden_size % m.num_heads != 0)
      c.fail("head_dim", fmt::format("is required: hidden_size {} is not a multiple of num_attention_heads {}",
                                     m.hidden_size, m.num_heads));
    m.head_dim = m.hidden_size / m.num_heads;
  }
  m.max_position = c.integer("max_position_embeddings", 0, 0, kMaxDim);
  m.rms_norm_eps = c.number("rms_norm_eps", 1e-6, 1e-12, 0.5);
  m.activation = parse_activation(c);
  m.tie_word_embeddings = c.boolean("tie_word_embeddings", false);
  m.attention_bias = c.boolean("attention_bias", false);
  if (c.boolean("mlp_bias", false)) c.fail("mlp_bias", "= true is not supported");
  read_rope(c, m);
  m.sliding_window = c.integer("sliding_window", 0, 0, kMaxDim - 1);
  read_layer_types(c, m);
  m.attn_logit_softcap = static_cast<float>(c.number("attn_logit_softcapping", 0.0, 0.0, 1e6));
  m.final_logit_softcap = static_cast<float>(c.number("final_logit_softcapping", 0.0, 0.0, 1e6));

  spec.from_hf(c, m);
  m.quantization = quantization_from_hf(config);
  m.validate();
  return m;
}

ModelConfig model_config_from_hf_text(std::string_view json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) LOOM_THROW("config.json: not valid JSON");
  return model_config_from_hf(j);
}

ModelConfig model_config_from_hf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) LOOM_THROW("cannot open {}", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.size() > kMaxConfigBytes) LOOM_THROW("{}: larger than {} bytes", path, kMaxConfigBytes);
  try {
    return model_config_from_hf_text(text);
  } catch (const Error& e) {
    LOOM_THROW("{}: {}", path, e.what());
  }
}

}  // namespace loom
