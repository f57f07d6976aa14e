// Mapping of Hugging Face tensor names to loom's canonical (GGUF) names, so
// architecture code asks for one set of names whatever the file format.
// Pure functions, callable from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

// True when the checkpoint uses Gemma 2/3 "sandwich" norms (it has
// pre_feedforward_layernorm tensors); that changes what
// post_attention_layernorm means (see hf_to_canonical_name).
bool hf_has_sandwich_norms(const std::vector<std::string>& hf_names);

// The canonical name of an HF tensor, or nullopt for tensors loom does not use
// (vision towers, rotary inv_freq buffers, ...). Wrapped checkpoints'
// prefixes (model.language_model., language_model.model.,
// language_model.lm_head.) are accepted.
//   model.embed_tokens.weight                  -> token_embd.weight
//   model.norm.weight                          -> output_norm.weight
//   lm_head.weight                             -> output.weight
//   model.layers.N.self_attn.q_proj.weight     -> blk.N.attn_q.weight   (k, v; o -> attn_output; .bias too)
//   model.layers.N.self_attn.q_norm.weight     -> blk.N.attn_q_norm.weight (k_norm too)
//   model.layers.N.input_layernorm.weight      -> blk.N.attn_norm.weight
//   model.layers.N.mlp.gate_proj.weight        -> blk.N.ffn_gate.weight (up_proj, down_proj)
//   model.layers.N.post_attention_layernorm    -> blk.N.ffn_norm, or with sandwich norms:
//                                                 blk.N.post_attention_norm
//   model.layers.N.pre_feedforward_layernorm   -> blk.N.ffn_norm
//   model.layers.N.post_feedforward_layernorm  -> blk.N.post_ffw_norm
// FP8 checkpoints' scales of the linear layers (q/k/v/o, gate/up/down):
//   ...q_proj.weight_scale, ...q_proj.weight_scale_inv -> blk.N.attn_q.weight_scale
//   ...q_proj.input_scale                               -> blk.N.attn_q.input_scale
// and of the KV cache:
//   ...self_attn.k_scale, ...self_attn.k_proj.output_scale -> blk.N.kv_cache.k_scale (v too)
//   ...self_attn.kv_scale (one scale for both)             -> blk.N.kv_cache.kv_scale
std::optional<std::string> hf_to_canonical_name(std::string_view hf_name, bool sandwich_norms);

}  // namespace loom
