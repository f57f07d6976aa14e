// ArchSpec: what one architecture family adds to the shared config reading:
// the names it answers to (HF `architectures`/`model_type`, GGUF
// `general.architecture`), the HF config class defaults of keys that real
// config.json files omit, and hooks that fill the arch-specific parts of
// ModelConfig. The forward pass is shared (model/transformer.cpp) and driven
// only by ModelConfig. All specs are listed in one table (registry.cpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"

namespace loom {

class ConfigJson;
class GgufFile;

struct ArchSpec {
  std::string_view name;  // registry name, stored in ModelConfig::arch
  std::vector<std::string_view> hf_architectures;  // "LlamaForCausalLM"
  std::vector<std::string_view> hf_model_types;    // "llama"
  std::vector<std::string_view> gguf_architectures;
  // JSON object: the HF config class's defaults for keys a config.json may omit.
  std::string_view hf_defaults;
  // Called after the shared keys were read into `config` (hf_config.cpp,
  // gguf_config.cpp); `cfg` is the text config merged over hf_defaults.
  void (*from_hf)(const ConfigJson& cfg, ModelConfig& config);
  void (*from_gguf)(const GgufFile& file, ModelConfig& config);
};

// Every registered architecture, in registry order.
const std::vector<const ArchSpec*>& arch_registry();
// nullptr when no spec answers to that name.
const ArchSpec* find_arch_by_hf_architecture(std::string_view name);
const ArchSpec* find_arch_by_hf_model_type(std::string_view name);
const ArchSpec* find_arch_by_gguf_name(std::string_view name);
// "LlamaForCausalLM, MistralForCausalLM, ..." / "llama, mistral, ..." for error messages.
std::string supported_hf_architectures();
std::string supported_gguf_architectures();

// Shared helpers for the specs.
// Every layer sliding (true) or none (false), sized num_layers.
void set_all_layers_sliding(ModelConfig& config, bool sliding);

}  // namespace loom
