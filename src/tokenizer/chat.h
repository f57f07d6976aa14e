// ChatFormatter: turns OpenAI-style messages into the prompt text a model was
// trained on, with the model's own chat template (GGUF tokenizer.chat_template,
// or tokenizer_config.json / chat_template.jinja of an HF directory).
// Immutable after construction; render() may be called from any thread.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

#include "tokenizer/jinja/chat_template.h"

namespace loom {

class GgufFile;
class Tokenizer;

class ChatFormatter {
 public:
  ChatFormatter(const std::string& template_source, std::string bos_token, std::string eos_token);

  // From a model; nullopt when the model carries no chat template.
  static std::optional<ChatFormatter> from_gguf(const GgufFile& gguf, const Tokenizer& tokenizer);
  static std::optional<ChatFormatter> from_hf_dir(const std::string& dir, const Tokenizer& tokenizer);

  // messages: [{role, content: string | [{type: "text", text}...], ...}]. Text
  // parts are joined with "\n" into one string (as vLLM does for templates that
  // expect string content). Key order is kept (tojson prints it as Python
  // would). `extra` adds template variables (tools,
  // enable_thinking...). Throws loom::Error on malformed messages or when the
  // template raises.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
  // The template's source text (the server reads the model's tool-call format from it).
  const std::string& source() const { return *source_; }

 private:
  std::shared_ptr<const ChatTemplate> template_;
  std::shared_ptr<const std::string> source_;
  std::string bos_token_, eos_token_;
};

// Checks and normalises OpenAI-style messages (roles, content types); throws
// loom::Error naming the offending field, e.g. "messages[2].content".
nlohmann::ordered_json normalize_messages(const nlohmann::ordered_json& messages);

}  // namespace loom

namespace loom {

// A model's tokenizer and chat formatter, loaded from a .gguf file or an HF
// directory. `gguf` may pass an already opened file to avoid mapping it twice.
struct TokenizerBundle {
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ChatFormatter> chat;  // nullopt: the model has no chat template
};
TokenizerBundle load_tokenizer_bundle(const std::string& model_path,
                                      std::shared_ptr<const GgufFile> gguf = nullptr);

}  // namespace loom
