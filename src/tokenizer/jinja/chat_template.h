// Chat templates: a sandboxed interpreter for the Jinja2 subset real models'
// chat templates use (Llama 3, Qwen2.5, Qwen3, Gemma 3, Mistral...). The
// template sees only the values given to it; rendering stops with loom::Error
// after an instruction budget, output size limit or nesting limit, so a
// hostile template cannot hang or exhaust memory.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace loom {

struct TemplateLimits {
  int64_t max_steps = 10'000'000;        // evaluated nodes
  int64_t max_output_bytes = 16 << 20;
  int max_depth = 256;                   // recursion / nesting
};

struct RenderOptions {
  // Fixes the time strftime_now() formats (Unix seconds, formatted as UTC);
  // unset means the current local time, as transformers does. For tests.
  std::optional<int64_t> now_unix_seconds;
};

class ChatTemplate {
 public:
  // Parses the template text; throws loom::Error on syntax errors (with line).
  explicit ChatTemplate(const std::string& source, TemplateLimits limits = {});
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;

  // Renders with `context` as the global variables (messages, tools,
  // add_generation_prompt, bos_token, eos_token, ...). raise_exception() in
  // the template throws loom::Error with its message.
  // Safe to call from several threads at once on one ChatTemplate.
  std::string render(const nlohmann::json& context) const;
  std::string render(const nlohmann::json& context, const RenderOptions& options) const;
  // nlohmann::json sorts object keys; ordered_json keeps them in the order
  // given, as Python dicts do, which tojson output depends on.
  std::string render(const nlohmann::ordered_json& context,
                     const RenderOptions& options = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
