// The one table of architectures. Adding one: a new file in this folder that
// defines `const ArchSpec& <name>_arch()`, and its name in LOOM_ARCHITECTURES.
#include "model/arch/arch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace loom {

#define LOOM_ARCHITECTURES(X) X(llama) X(mistral) X(qwen2) X(qwen3) X(gemma3)

#define LOOM_DECLARE_ARCH(name) const ArchSpec& name##_arch();
LOOM_ARCHITECTURES(LOOM_DECLARE_ARCH)
#undef LOOM_DECLARE_ARCH

const std::vector<const ArchSpec*>& arch_registry() {
#define LOOM_ARCH_ENTRY(name) &name##_arch(),
  static const std::vector<const ArchSpec*> table = {LOOM_ARCHITECTURES(LOOM_ARCH_ENTRY)};
#undef LOOM_ARCH_ENTRY
  return table;
}

namespace {

const ArchSpec* find_by(std::string_view name, std::vector<std::string_view> ArchSpec::*names) {
  for (const ArchSpec* spec : arch_registry())
    for (std::string_view n : spec->*names)
      if (n == name) return spec;
  return nullptr;
}

std::string list(std::vector<std::string_view> ArchSpec::*names) {
  std::vector<std::string_view> all;
  for (const ArchSpec* spec : arch_registry()) all.insert(all.end(), (spec->*names).begin(), (spec->*names).end());
  return fmt::format("{}", fmt::join(all, ", "));
}

}  // namespace

const ArchSpec* find_arch_by_hf_architecture(std::string_view name) {
  return find_by(name, &ArchSpec::hf_architectures);
}
const ArchSpec* find_arch_by_hf_model_type(std::string_view name) {
  return find_by(name, &ArchSpec::hf_model_types);
}
const ArchSpec* find_arch_by_gguf_name(std::string_view name) {
  return find_by(name, &ArchSpec::gguf_architectures);
}
std::string supported_hf_architectures() { return list(&ArchSpec::hf_architectures); }
std::string supported_gguf_architectures() { return list(&ArchSpec::gguf_architectures); }

void set_all_layers_sliding(ModelConfig& config, bool sliding) {
  config.layer_is_sliding.assign(static_cast<size_t>(config.num_layers), sliding);
}

}  // namespace loom
