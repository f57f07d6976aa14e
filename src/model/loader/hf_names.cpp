#include "model/loader/hf_names.h"

#include <charconv>

namespace loom {
namespace {

bool consume(std::string_view& s, std::string_view prefix) {
  if (s.substr(0, prefix.size()) != prefix) return false;
  s.remove_prefix(prefix.size());
  return true;
}

// Module path inside a decoder layer -> canonical tensor stem.
std::optional<std::string_view> layer_module(std::string_view module, bool sandwich) {
  struct Entry {
    std::string_view hf, canonical;
  };
  static constexpr Entry kCommon[] = {
      {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"},
      {"input_layernorm", "attn_norm"},
      {"mlp.gate_proj", "ffn_gate"},
      {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},
      {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"},
  };
  for (const auto& e : kCommon)
    if (module == e.hf) return e.canonical;
  if (module == "post_attention_layernorm")
    return sandwich ? std::string_view("post_attention_norm") : std::string_view("ffn_norm");
  return std::nullopt;
}

// The KV cache scale a layer tensor (after "model.layers.N.") holds: k_scale,
// v_scale or kv_scale (one for both).
std::optional<std::string_view> kv_cache_scale(std::string_view rest) {
  struct Entry {
    std::string_view hf, canonical;
  };
  static constexpr Entry kNames[] = {
      {"self_attn.k_scale", "k_scale"},
      {"self_attn.v_scale", "v_scale"},
      {"self_attn.kv_scale", "kv_scale"},
      {"self_attn.k_proj.output_scale", "k_scale"},
      {"self_attn.v_proj.output_scale", "v_scale"},
      {"self_attn.attn.k_scale", "k_scale"},
      {"self_attn.attn.v_scale", "v_scale"},
  };
  for (const auto& e : kNames)
    if (rest == e.hf) return e.canonical;
  return std::nullopt;
}

}  // namespace

bool hf_has_sandwich_norms(const std::vector<std::string>& hf_names) {
  for (const auto& n : hf_names)
    if (n.find(".pre_feedforward_layernorm.") != std::string::npos) return true;
  return false;
}

std::optional<std::string> hf_to_canonical_name(std::string_view name, bool sandwich_norms) {
  // Unwrap multimodal / wrapped checkpoints to the plain causal-LM layout.
  std::string_view rest = name;
  std::string_view root;  // "model." or "lm_head."
  if (consume(rest, "model.language_model.") || consume(rest, "language_model.model.") ||
      consume(rest, "model.")) {
    root = "model.";
  } else if (consume(rest, "language_model.lm_head.") || consume(rest, "lm_head.")) {
    root = "lm_head.";
  } else {
    return std::nullopt;
  }

  if (root == "lm_head.") {
    if (rest == "weight") return std::string("output.weight");
    return std::nullopt;
  }
  if (rest == "embed_tokens.weight") return std::string("token_embd.weight");
  if (rest == "norm.weight") return std::string("output_norm.weight");
  if (!consume(rest, "layers.")) return std::nullopt;

  // N.<module>.<weight|bias>
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 6) return std::nullopt;
  int layer = -1;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + dot, layer);
  if (ec != std::errc() || end != rest.data() + dot || layer < 0) return std::nullopt;
  rest.remove_prefix(dot + 1);

  // Linear layers: .weight, .bias and FP8 scales (weight_scale_inv is the
  // HF "fp8" spelling of the same dequantising multiplier); attention: the KV
  // cache's FP8 scales, under the names compressed-tensors and older FP8
  // exporters give them.
  struct Suffix {
    std::string_view hf, canonical;
  };
  static constexpr Suffix kSuffixes[] = {
      {".weight", "weight"},
      {".bias", "bias"},
      {".weight_scale", "weight_scale"},
      {".weight_scale_inv", "weight_scale"},
      {".input_scale", "input_scale"},
  };
  std::string_view suffix, module;
  for (const auto& s : kSuffixes)
    if (rest.size() > s.hf.size() && rest.substr(rest.size() - s.hf.size()) == s.hf) {
      suffix = s.canonical;
      module = rest.substr(0, rest.size() - s.hf.size());
    }
  std::string out = "blk." + std::to_string(layer) + ".";
  if (const auto kv = kv_cache_scale(rest)) return out + "kv_cache." + std::string(*kv);
  if (suffix.empty()) return std::nullopt;
  const auto canonical = layer_module(module, sandwich_norms);
  if (!canonical) return std::nullopt;
  const bool linear = canonical->starts_with("attn_") || canonical->starts_with("ffn_");
  if (suffix != "weight" && suffix != "bias" && (!linear || canonical->ends_with("norm")))
    return std::nullopt;
  out += *canonical;
  out += '.';
  out += suffix;
  return out;
}

}  // namespace loom
