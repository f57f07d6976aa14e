#include "tokenizer/chat.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "model/loader/gguf.h"
#include "tokenizer/tokenizer.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

std::string token_or_empty(const Tokenizer& tok, const std::optional<int32_t>& id) {
  if (!id || *id < 0 || *id >= tok.vocab_size()) return "";
  return std::string(tok.token_text(*id));
}

std::optional<std::string> read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// tokenizer_config.json names tokens as strings or as {"content": ...} objects.
std::string token_field(const nlohmann::json& cfg, const char* key, std::string fallback) {
  if (!cfg.contains(key)) return fallback;
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return fallback;
}

}  // namespace

ChatFormatter::ChatFormatter(const std::string& template_source, std::string bos_token,
                             std::string eos_token)
    : template_(std::make_shared<ChatTemplate>(template_source)),
      source_(std::make_shared<const std::string>(template_source)),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)) {}

std::optional<ChatFormatter> ChatFormatter::from_gguf(const GgufFile& gguf,
                                                      const Tokenizer& tokenizer) {
  const std::string source = gguf.get_string("tokenizer.chat_template", "");
  if (source.empty()) return std::nullopt;
  return ChatFormatter(source, token_or_empty(tokenizer, tokenizer.special().bos),
                       token_or_empty(tokenizer, tokenizer.special().eos));
}

std::optional<ChatFormatter> ChatFormatter::from_hf_dir(const std::string& dir,
                                                        const Tokenizer& tokenizer) {
  nlohmann::json cfg = nlohmann::json::object();
  if (auto text = read_text(fs::path(dir) / "tokenizer_config.json")) {
    cfg = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (cfg.is_discarded()) LOOM_THROW("{}/tokenizer_config.json is not valid JSON", dir);
  }
  std::string source;
  if (auto jinja = read_text(fs::path(dir) / "chat_template.jinja")) {
    source = *jinja;
  } else if (cfg.contains("chat_template")) {
    const auto& t = cfg["chat_template"];
    if (t.is_string()) {
      source = t.get<std::string>();
    } else if (t.is_array()) {  // [{name, template}]: take "default"
      for (const auto& e : t)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
            e["template"].is_string())
          source = e["template"].get<std::string>();
    }
  }
  if (source.empty()) return std::nullopt;
  return ChatFormatter(source,
                       token_field(cfg, "bos_token", token_or_empty(tokenizer, tokenizer.special().bos)),
                       token_field(cfg, "eos_token", token_or_empty(tokenizer, tokenizer.special().eos)));
}

nlohmann::ordered_json normalize_messages(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) LOOM_THROW("messages: expected an array");
  if (messages.empty()) LOOM_THROW("messages: must not be empty");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) LOOM_THROW("{}: expected an object", where);
    if (!m.contains("role") || !m["role"].is_string()) LOOM_THROW("{}.role: expected a string", where);
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" &&
        role != "developer")
      LOOM_THROW("{}.role: unknown role '{}'", where, role);
    nlohmann::ordered_json msg = m;
    if (m.contains("content")) {
      const auto& c = m["content"];
      if (c.is_array()) {
        std::string text;
        for (size_t j = 0; j < c.size(); ++j) {
          const auto& part = c[j];
          const std::string pw = where + ".content[" + std::to_string(j) + "]";
          if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
              !part["text"].is_string())
            LOOM_THROW("{}: only {{\"type\": \"text\", \"text\": ...}} parts are supported", pw);
          if (j) text += "\n";
          text += part["text"].get<std::string>();
        }
        msg["content"] = text;
      } else if (!c.is_string() && !c.is_null()) {
        LOOM_THROW("{}.content: expected a string or a list of text parts", where);
      }
    } else if (role != "assistant") {
      LOOM_THROW("{}.content: missing", where);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

std::string ChatFormatter::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                  const nlohmann::ordered_json& extra) const {
  nlohmann::ordered_json ctx = extra.is_object() ? extra : nlohmann::ordered_json::object();
  ctx["messages"] = normalize_messages(messages);
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = bos_token_;
  ctx["eos_token"] = eos_token_;
  return template_->render(ctx);
}

}  // namespace loom

namespace loom {

TokenizerBundle load_tokenizer_bundle(const std::string& model_path,
                                      std::shared_ptr<const GgufFile> gguf) {
  std::error_code ec;
  const auto status = fs::status(model_path, ec);
  if (ec || !fs::exists(status)) LOOM_THROW("{}: no such file or directory", model_path);
  TokenizerBundle bundle;
  if (fs::is_directory(status)) {
    bundle.tokenizer = load_tokenizer_hf(model_path);
    bundle.chat = ChatFormatter::from_hf_dir(model_path, *bundle.tokenizer);
  } else {
    if (!gguf) gguf = std::make_shared<const GgufFile>(model_path);
    bundle.tokenizer = load_tokenizer_gguf(*gguf);
    bundle.chat = ChatFormatter::from_gguf(*gguf, *bundle.tokenizer);
  }
  return bundle;
}

}  // namespace loom
