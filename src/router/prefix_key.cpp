// Routing keys from OpenAI request bodies; see prefix_key.h.
#include "router/prefix_key.h"

namespace loom::router {

namespace {

using json = nlohmann::ordered_json;

// Appends up to `n` bytes in total to out; false once out is full.
bool append(std::string& out, std::string_view s, size_t n) {
  out.append(s.substr(0, n - std::min(n, out.size())));
  return out.size() < n;
}

std::optional<std::string> ids_prefix(const json& ids, size_t n) {
  std::string out = "ids:";
  size_t taken = 0;
  for (const auto& id : ids) {
    if (taken++ == n) break;
    if (!id.is_number_integer()) return std::nullopt;
    out += std::to_string(id.get<int64_t>());
    out += ',';
  }
  return out;
}

std::optional<std::string> prompt_prefix(const json& prompt, size_t n) {
  if (prompt.is_string()) return prompt.get_ref<const std::string&>().substr(0, n);
  if (!prompt.is_array() || prompt.empty()) return std::nullopt;
  const json& first = prompt.front();
  if (first.is_number_integer()) return ids_prefix(prompt, n);
  if (first.is_string()) return first.get_ref<const std::string&>().substr(0, n);
  if (first.is_array() && !first.empty()) return ids_prefix(first, n);
  return std::nullopt;
}

std::optional<std::string> messages_prefix(const json& messages, size_t n) {
  if (!messages.is_array() || messages.empty()) return std::nullopt;
  std::string out;
  for (const auto& m : messages) {
    if (!m.is_object()) return std::nullopt;
    auto role = m.find("role");
    if (role != m.end() && role->is_string() &&
        !append(out, role->get_ref<const std::string&>(), n))
      break;
    if (!append(out, "\n", n)) break;
    auto content = m.find("content");
    bool room = true;
    if (content != m.end() && content->is_string()) {
      room = append(out, content->get_ref<const std::string&>(), n);
    } else if (content != m.end() && content->is_array()) {
      for (const auto& part : *content) {
        if (!part.is_object()) continue;
        auto text = part.find("text");
        if (text != part.end() && text->is_string() &&
            !(room = append(out, text->get_ref<const std::string&>(), n)))
          break;
      }
    }
    if (!room || !append(out, "\n", n)) break;
  }
  return out;
}

}  // namespace

std::optional<std::string> routing_prefix(std::string_view path, const json& body, size_t n) {
  if (!body.is_object() || n == 0) return std::nullopt;
  if (path == "/v1/completions") {
    auto it = body.find("prompt");
    return it == body.end() ? std::nullopt : prompt_prefix(*it, n);
  }
  if (path == "/v1/chat/completions") {
    auto it = body.find("messages");
    return it == body.end() ? std::nullopt : messages_prefix(*it, n);
  }
  return std::nullopt;
}

}  // namespace loom::router
