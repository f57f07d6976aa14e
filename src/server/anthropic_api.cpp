// Anthropic Messages <-> chat completions. Stop sequences: the chat request
// keeps the matched stop string in its output (include_stop_str_in_output),
// so the adapter can tell which one ended the turn; while streaming it holds
// back any tail that could still become a stop sequence, and drops the match
// itself, so clients see exactly Anthropic's text. Tool use maps onto the
// chat path's tools: tool_use / tool_result blocks become tool_calls and role
// "tool" messages, and replies' tool calls become tool_use blocks (streamed as
// input_json_delta fragments of the arguments) after the text block.
#include "server/anthropic_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <vector>

#include "server/api_error.h"

namespace loom::server {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

const char* anthropic_error_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

namespace {

const ojson* present(const ojson& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

// Text of a string or of a list of {"type": "text", "text"} blocks; `where`
// names the field in errors.
std::string text_of(const ojson& content, const std::string& where, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw_bad_field(param, where + " must be a string or a list of content blocks");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& block = content[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    if (!block.is_object() || !block.contains("type") || !block["type"].is_string())
      throw_bad_field(param, at + " must be an object with a 'type'");
    const std::string type = block["type"].get<std::string>();
    if (type != "text")
      throw_bad_field(
          param, fmt::format("{}: content blocks of type '{}' are not supported (text only)", at,
                             type.substr(0, 32)));
    if (!block.contains("text") || !block["text"].is_string())
      throw_bad_field(param, at + ".text must be a string");
    if (!text.empty()) text += "\n";
    text += block["text"].get<std::string>();
  }
  return text;
}

// "msg_" + the chat completion id's unique part.
std::string message_id(const std::string& chat_id) {
  const size_t dash = chat_id.find('-');
  return "msg_" + (dash == std::string::npos ? chat_id : chat_id.substr(dash + 1));
}

class AnthropicAdapter final : public ChatAdapter {
 public:
  using ChatAdapter::ChatAdapter;

  ojson translate(const ojson& body, const ModelContext& model,
                  const RequestLimits& limits) override {
    ojson chat = ojson::object();
    if (const ojson* m = present(body, "model")) chat["model"] = *m;
    const ojson* max_tokens = present(body, "max_tokens");
    if (!max_tokens) throw_bad_field("max_tokens", "max_tokens: field required");
    chat["max_tokens"] = *max_tokens;

    ojson messages = ojson::array();
    if (const ojson* system = present(body, "system"))
      messages.push_back({{"role", "system"}, {"content", text_of(*system, "system", "system")}});
    const ojson* turns = present(body, "messages");
    if (!turns || !turns->is_array() || turns->empty())
      throw_bad_field("messages", "messages: a non-empty list of turns is required");
    for (size_t i = 0; i < turns->size(); ++i) {
      const ojson& t = (*turns)[i];
      const std::string where = fmt::format("messages[{}]", i);
      if (!t.is_object()) throw_bad_field("messages", where + " must be an object");
      const std::string role = string_field(t, "role", "", "messages", where);
      if (role != "user" && role != "assistant")
        throw_bad_field("messages", where + ".role must be 'user' or 'assistant'");
      if (!t.contains("content")) throw_bad_field("messages", where + ".content: field required");
      add_turn(role, t["content"], where + ".content", messages);
    }
    // Anthropic's prefill (the reply continues a last assistant turn) needs
    // the template to leave that turn open, which loom's chat path does not do.
    if (messages.back()["role"] == "assistant")
      throw_bad_field("messages", "a final assistant turn (prefill) is not supported");
    chat["messages"] = std::move(messages);

    for (const char* name : {"temperature", "top_p", "top_k"})
      if (const ojson* v = present(body, name)) chat[name] = *v;
    if (const ojson* stops = present(body, "stop_sequences")) {
      if (!stops->is_array())
        throw_bad_field("stop_sequences", "stop_sequences must be a list of strings");
      for (const auto& s : *stops) {
        if (!s.is_string())
          throw_bad_field("stop_sequences", "stop_sequences must be a list of strings");
        stop_sequences_.push_back(s.get<std::string>());
      }
      if (!stop_sequences_.empty()) {
        chat["stop"] = *stops;
        chat["include_stop_str_in_output"] = true;
      }
    }
    translate_tools(body, chat);
    if (const ojson* thinking = present(body, "thinking");
        thinking && !(thinking->is_object() &&
                      string_field(*thinking, "type", "", "thinking", "thinking") == "disabled"))
      throw_bad_field("thinking", "extended thinking is not supported");
    if (const ojson* meta = present(body, "metadata")) {
      if (!meta->is_object()) throw_bad_field("metadata", "metadata must be an object");
      const std::string user_id = string_field(*meta, "user_id", "", "metadata", "metadata");
      if (!user_id.empty()) chat["user"] = user_id;
    }
    if (const ojson* stream = present(body, "stream")) {
      if (!stream->is_boolean()) throw_bad_field("stream", "stream must be a boolean");
      stream_ = stream->get<bool>();
    }
    if (stream_) {
      chat["stream"] = true;
      chat["stream_options"] = {{"include_usage", true}};
    }
    // The chat parser checks the rest (ranges, the context length) and, for
    // message_start, counts the prompt tokens.
    try {
      const GenerationRequest g =
          parse_generation_request(Endpoint::ChatCompletions, chat, model, limits);
      model_ = g.model;
      input_tokens_ = g.prompt_tokens();
    } catch (const ApiError& e) {
      throw rename_error_param(flatten_tool_param(e, "input_schema"),
                               {{"stop", "stop_sequences"},
                                {"user", "metadata.user_id"},
                                {"parallel_tool_calls", "tool_choice.disable_parallel_tool_use"}});
    }
    return chat;
  }

 protected:
  json on_chat_body(const json& c) override {
    const json& choice = c["choices"][0];
    std::string text = choice["message"].value("content", json("")).is_string()
                           ? choice["message"]["content"].get<std::string>()
                           : "";
    const auto [reason, stop] = stop_reason(choice.value("finish_reason", json("stop")), text);
    json content = json::array();
    const json& calls = choice["message"].value("tool_calls", json::array());
    if (!text.empty() || !calls.is_array() || calls.empty())
      content.push_back({{"type", "text"}, {"text", text}});
    if (calls.is_array())
      for (const json& call : calls)
        content.push_back({{"type", "tool_use"},
                           {"id", call.value("id", "")},
                           {"name", call["function"].value("name", "")},
                           {"input", input_of(call["function"].value("arguments", "{}"))}});
    return {{"id", message_id(c.value("id", ""))},
            {"type", "message"},
            {"role", "assistant"},
            {"model", c.value("model", model_)},
            {"content", content},
            {"stop_reason", reason},
            {"stop_sequence", stop},
            {"usage",
             {{"input_tokens", c["usage"].value("prompt_tokens", 0)},
              {"output_tokens", c["usage"].value("completion_tokens", 0)}}}};
  }

  void on_stream_start() override {}

  void on_chat_chunk(const json& chunk) override {
    if (!started_) start(chunk);
    if (chunk.contains("usage") && chunk["usage"].is_object())
      output_tokens_ = chunk["usage"].value("completion_tokens", output_tokens_);
    if (!chunk.contains("choices") || chunk["choices"].empty()) return;
    const json& choice = chunk["choices"][0];
    const json& delta = choice.value("delta", json::object());
    if (delta.contains("content") && delta["content"].is_string())
      held_ += delta["content"].get<std::string>();
    const bool finished = choice.contains("finish_reason") && choice["finish_reason"].is_string();
    if (finished) finish_ = choice["finish_reason"].get<std::string>();
    if (delta.contains("tool_calls") && delta["tool_calls"].is_array())
      for (const json& call : delta["tool_calls"]) stream_tool_call(call);
    if (!finished && !in_tool_block_) release(safe_length(held_));
  }

  void on_stream_end() override {
    if (!started_) start(json::object());
    const auto [reason, stop] = stop_reason(finish_.empty() ? "stop" : finish_, held_);
    if (!in_tool_block_) release(held_.size());
    emit("content_block_stop", {{"type", "content_block_stop"}, {"index", block_}});
    emit("message_delta", {{"type", "message_delta"},
                           {"delta", {{"stop_reason", reason}, {"stop_sequence", stop}}},
                           {"usage", {{"output_tokens", output_tokens_}}}});
    emit("message_stop", {{"type", "message_stop"}});
  }

  json route_error(int status, const json& err) override {
    return {{"type", "error"},
            {"error", {{"type", anthropic_error_type(status)}, {"message", message_of(err)}}}};
  }

  void emit_stream_error(int, const json& err) override {
    const std::string type = err.value("type", "");
    const int status = type == "service_unavailable"     ? 503
                       : type == "invalid_request_error" ? 400
                                                         : 500;
    emit("error",
         {{"type", "error"},
          {"error", {{"type", anthropic_error_type(status)}, {"message", message_of(err)}}}});
  }

 private:
  static std::string message_of(const json& err) {
    std::string message = err.value("message", "error");
    // Name the field as Anthropic's API calls it.
    const json& param = err.value("param", json());
    if (param.is_string() && message.rfind(param.get<std::string>(), 0) != 0) {
      const std::string p =
          param.get<std::string>() == "stop" ? "stop_sequences" : param.get<std::string>();
      message = p + ": " + message;
    }
    return message;
  }

  void start(const json& chunk) {
    started_ = true;
    id_ = message_id(chunk.value("id", "chatcmpl-0"));
    emit("message_start", {{"type", "message_start"},
                           {"message",
                            {{"id", id_},
                             {"type", "message"},
                             {"role", "assistant"},
                             {"model", chunk.value("model", model_)},
                             {"content", json::array()},
                             {"stop_reason", nullptr},
                             {"stop_sequence", nullptr},
                             {"usage", {{"input_tokens", input_tokens_}, {"output_tokens", 0}}}}}});
    emit("content_block_start", {{"type", "content_block_start"},
                                 {"index", 0},
                                 {"content_block", {{"type", "text"}, {"text", ""}}}});
    emit("ping", {{"type", "ping"}});
  }

  // The stop reason of a finished turn, and the stop sequence `text` ends
  // with (cut from `text`) when one ended it.
  std::pair<std::string, json> stop_reason(const std::string& finish, std::string& text) const {
    if (finish == "length") return {"max_tokens", nullptr};
    if (finish == "tool_calls") return {"tool_use", nullptr};
    for (const auto& s : stop_sequences_)
      if (finish == "stop" && text.size() >= s.size() &&
          text.compare(text.size() - s.size(), s.size(), s) == 0) {
        text.resize(text.size() - s.size());
        return {"stop_sequence", s};
      }
    return {"end_turn", nullptr};
  }

  // How much of `text` can go out now: all but the longest tail that is a
  // prefix of some stop sequence (it may still become one).
  size_t safe_length(const std::string& text) const {
    size_t hold = 0;
    for (const auto& s : stop_sequences_)
      for (size_t k = std::min(s.size(), text.size()); k > hold; --k)
        if (text.compare(text.size() - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
    return text.size() - hold;
  }

  void release(size_t n) {
    if (n == 0) return;
    emit("content_block_delta",
         {{"type", "content_block_delta"},
          {"index", block_},
          {"delta", {{"type", "text_delta"}, {"text", held_.substr(0, n)}}}});
    held_.erase(0, n);
  }

  // Streaming a tool call: the first delta of a call (it carries the id and
  // name) closes the open block and starts a tool_use block; argument
  // fragments go out as input_json_delta.
  void stream_tool_call(const json& call) {
    const int index = call.value("index", 0);
    if (!in_tool_block_ || index != tool_index_) {
      if (!in_tool_block_) release(held_.size());
      emit("content_block_stop", {{"type", "content_block_stop"}, {"index", block_}});
      ++block_;
      in_tool_block_ = true;
      tool_index_ = index;
      const json& fn = call.value("function", json::object());
      emit("content_block_start", {{"type", "content_block_start"},
                                   {"index", block_},
                                   {"content_block",
                                    {{"type", "tool_use"},
                                     {"id", call.value("id", "")},
                                     {"name", fn.value("name", "")},
                                     {"input", json::object()}}}});
    }
    const json& fn = call.value("function", json::object());
    const json& args = fn.value("arguments", json(""));
    if (args.is_string() && !args.get<std::string>().empty())
      emit("content_block_delta",
           {{"type", "content_block_delta"},
            {"index", block_},
            {"delta", {{"type", "input_json_delta"}, {"partial_json", args}}}});
  }

  // The translated turns of one Anthropic message: a user turn's
  // tool_result blocks become role "tool" messages (before its text), an
  // assistant turn's tool_use blocks its tool_calls.
  void add_turn(const std::string& role, const ojson& content, const std::string& where,
                ojson& messages) {
    if (content.is_string()) {
      messages.push_back({{"role", role}, {"content", content}});
      return;
    }
    if (!content.is_array())
      throw_bad_field("messages", where + " must be a string or a list of content blocks");
    ojson texts = ojson::array();
    ojson calls = ojson::array();
    for (size_t i = 0; i < content.size(); ++i) {
      const ojson& block = content[i];
      const std::string at = fmt::format("{}[{}]", where, i);
      if (!block.is_object() || !block.contains("type") || !block["type"].is_string())
        throw_bad_field("messages", at + " must be an object with a 'type'");
      const std::string type = block["type"].get<std::string>();
      if (type == "tool_use" && role == "assistant") {
        const std::string id = string_field(block, "id", "", "messages", at);
        const std::string name = string_field(block, "name", "", "messages", at);
        if (id.empty() || name.empty())
          throw_bad_field("messages", at + ": a tool_use block needs an 'id' and a 'name'");
        const ojson input = block.value("input", ojson::object());
        if (!input.is_object()) throw_bad_field("messages", at + ".input must be an object");
        tool_use_ids_.insert(id);
        calls.push_back({{"id", id},
                         {"type", "function"},
                         {"function", {{"name", name}, {"arguments", input.dump()}}}});
      } else if (type == "tool_result" && role == "user") {
        const std::string id = string_field(block, "tool_use_id", "", "messages", at);
        if (!tool_use_ids_.count(id))
          throw_bad_field("messages",
                          at + ".tool_use_id must name a tool_use block of an earlier turn");
        std::string result = block.contains("content") && !block["content"].is_null()
                                 ? text_of(block["content"], at + ".content", "messages")
                                 : "";
        if (const ojson* err = present(block, "is_error")) {
          if (!err->is_boolean()) throw_bad_field("messages", at + ".is_error must be a boolean");
          if (err->get<bool>()) result = "Error: " + result;
        }
        messages.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", result}});
      } else if (type == "text") {
        if (!block.contains("text") || !block["text"].is_string())
          throw_bad_field("messages", at + ".text must be a string");
        texts.push_back(block);
      } else {
        throw_bad_field("messages",
                        fmt::format("{}: content blocks of type '{}' are not supported in {} "
                                    "turns (text, tool_use in assistant turns, tool_result in "
                                    "user turns)",
                                    at, type.substr(0, 32), role));
      }
    }
    const std::string text = text_of(texts, where, "messages");
    if (!calls.empty()) {
      messages.push_back({{"role", role}, {"content", text}, {"tool_calls", std::move(calls)}});
    } else if (!text.empty() || messages.empty() || messages.back()["role"] != "tool") {
      messages.push_back({{"role", role}, {"content", text}});
    }
  }

  // tools, tool_choice -> the chat request's tools, tool_choice and
  // parallel_tool_calls.
  static void translate_tools(const ojson& body, ojson& chat) {
    if (const ojson* tools = present(body, "tools")) {
      ojson out = flat_tools_to_chat(
          *tools, "custom", "custom", "custom tools with an input_schema only",
          [](const ojson& t, const std::string& at) {
            const std::string name = string_field(t, "name", "", "tools", at);
            if (name.empty()) throw_bad_field("tools", at + ".name: field required");
            const ojson* schema = present(t, "input_schema");
            if (!schema || !schema->is_object())
              throw_bad_field("tools", at + ".input_schema must be an object (a JSON schema)");
            ojson fn = {{"name", name}};
            const std::string description = string_field(t, "description", "", "tools", at);
            if (!description.empty()) fn["description"] = description;
            fn["parameters"] = *schema;
            return fn;
          });
      if (!out.empty()) chat["tools"] = std::move(out);
    }
    const ojson* choice = present(body, "tool_choice");
    if (!choice) return;
    if (!choice->is_object())
      throw_bad_field("tool_choice", "tool_choice must be an object with a 'type'");
    const std::string type = string_field(*choice, "type", "", "tool_choice", "tool_choice");
    if (type == "auto") {
      chat["tool_choice"] = "auto";
    } else if (type == "any") {
      chat["tool_choice"] = "required";
    } else if (type == "none") {
      if (chat.contains("tools")) chat["tool_choice"] = "none";
    } else if (type == "tool") {
      const std::string name = string_field(*choice, "name", "", "tool_choice", "tool_choice");
      if (name.empty()) throw_bad_field("tool_choice", "tool_choice.name: field required");
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
    } else {
      throw_bad_field("tool_choice",
                      fmt::format("tool_choice.type must be 'auto', 'any', 'tool' or 'none', not "
                                  "'{}'",
                                  type.substr(0, 32)));
    }
    if (type != "none" && !chat.contains("tools"))
      throw_bad_field("tool_choice", "tool_choice needs tools");
    if (const ojson* p = present(*choice, "disable_parallel_tool_use")) {
      if (!p->is_boolean())
        throw_bad_field("tool_choice", "tool_choice.disable_parallel_tool_use must be a boolean");
      if (chat.contains("tools")) chat["parallel_tool_calls"] = !p->get<bool>();
    }
  }

  // A tool call's arguments (JSON text) as the tool_use block's input.
  static json input_of(const json& arguments) {
    if (!arguments.is_string()) return json::object();
    const json input = json::parse(arguments.get<std::string>(), nullptr, false);
    return input.is_object() ? input : json::object();
  }

  bool stream_ = false;
  std::set<std::string> tool_use_ids_;  // ids of the request's tool_use blocks
  int block_ = 0;                       // the open content block's index
  bool in_tool_block_ = false;
  int tool_index_ = -1;  // the chat tool call the open tool_use block streams
  std::vector<std::string> stop_sequences_;
  std::string model_;
  int64_t input_tokens_ = 0;
  int64_t output_tokens_ = 0;
  bool started_ = false;
  std::string id_;
  std::string held_;    // streamed text not yet sent
  std::string finish_;  // the chat finish_reason, once seen
};

}  // namespace

std::shared_ptr<ChatAdapter> make_anthropic_adapter(std::shared_ptr<ResponseSink> inner) {
  return std::make_shared<AnthropicAdapter>(std::move(inner));
}

}  // namespace loom::server
