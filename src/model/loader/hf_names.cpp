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
      {"self_attn.q_proj", "attn_q"},        {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},        {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"},   {"self_attn.k_norm", "attn_k_norm"},
      {"input_layernorm", "attn_norm"},      {"mlp.gate_proj", "ffn_gate"},
      {"mlp.up_proj", "ffn_up"},             {"mlp.down_proj", "ffn_down"},
      {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"},
  };
  for (const auto& e : kCommon)
    if (module == e.hf) return e.canonical;
  if (module == "post_attention_layernorm")
    return sandwich ? std::string_view("post_attention_norm") : std::string_view("ffn_norm");
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

  std::string_view suffix;
  if (rest.size() > 7 && rest.substr(rest.size() - 7) == ".weight") {
    suffix = "weight";
  } else if (rest.size() > 5 && rest.substr(rest.size() - 5) == ".bias") {
    suffix = "bias";
  } else {
    return std::nullopt;
  }
  const std::string_view module = rest.substr(0, rest.size() - suffix.size() - 1);
  const auto canonical = layer_module(module, sandwich_norms);
  if (!canonical) return std::nullopt;
  std::string out = "blk." + std::to_string(layer) + ".";
  out += *canonical;
  out += '.';
  out += suffix;
  return out;
}

}  // namespace loom
