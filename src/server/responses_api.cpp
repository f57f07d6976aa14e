// OpenAI Responses <-> chat completions (responses_api.h).
#include "server/responses_api.h"

#include <fmt/format.h>

#include <chrono>
#include <set>

#include "server/api_error.h"

namespace loom::server {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

const ojson* present(const ojson& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::string content_text(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw_bad_field("input", where + " must be a string or a list of content parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    const std::string type = part.is_object() ? string_field(part, "type", "", "input", at) : "";
    if (type != "input_text" && type != "output_text")
      throw_bad_field("input", fmt::format("{}: content parts of type '{}' are not supported "
                                           "(input_text, output_text)",
                                           at, type.substr(0, 32)));
    if (!part.contains("text") || !part["text"].is_string())
      throw_bad_field("input", at + ".text must be a string");
    if (!text.empty()) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

std::string suffix_id(const std::string& chat_id) {
  const size_t dash = chat_id.find('-');
  return dash == std::string::npos ? chat_id : chat_id.substr(dash + 1);
}

class ResponsesAdapter final : public ChatAdapter {
 public:
  using ChatAdapter::ChatAdapter;

  ojson translate(const ojson& body, const ModelContext& model,
                  const RequestLimits& limits) override {
    if (present(body, "previous_response_id"))
      throw_bad_field("previous_response_id",
                      "loom's /v1/responses is stateless (nothing is stored): send the whole "
                      "conversation in 'input' instead of previous_response_id");
    if (const ojson* store = present(body, "store"); store && *store != false)
      throw_bad_field("store", "loom does not store responses: omit 'store' or send false");
    if (const ojson* t = present(body, "truncation"); t && *t != "disabled")
      throw_bad_field("truncation", "only truncation 'disabled' is supported");
    if (const ojson* b = present(body, "background"); b && *b != false)
      throw_bad_field("background",
                      "loom runs responses in the foreground only: omit 'background'");
    if (present(body, "conversation"))
      throw_bad_field("conversation",
                      "loom's /v1/responses is stateless: send the whole conversation in 'input'");
    if (present(body, "prompt"))
      throw_bad_field("prompt", "stored prompt templates are not supported: send 'input'");

    ojson chat = ojson::object();
    if (const ojson* m = present(body, "model")) chat["model"] = *m;
    ojson messages = ojson::array();
    if (const ojson* instructions = present(body, "instructions")) {
      if (!instructions->is_string())
        throw_bad_field("instructions", "instructions must be a string");
      instructions_ = *instructions;
      messages.push_back({{"role", "system"}, {"content", *instructions}});
    }
    const ojson* input = present(body, "input");
    if (!input) throw_bad_field("input", "input: field required");
    if (input->is_string()) {
      messages.push_back({{"role", "user"}, {"content", *input}});
    } else if (input->is_array() && !input->empty()) {
      for (size_t i = 0; i < input->size(); ++i) {
        const ojson& item = (*input)[i];
        const std::string where = fmt::format("input[{}]", i);
        if (!item.is_object()) throw_bad_field("input", where + " must be an object");
        const std::string type = string_field(item, "type", "message", "input", where);
        if (type == "function_call" || type == "function_call_output") {
          add_call_item(type, item, where, messages);
          continue;
        }
        if (type != "message")
          throw_bad_field("input", fmt::format("{}: items of type '{}' are not supported "
                                               "(message, function_call, function_call_output)",
                                               where, type.substr(0, 32)));
        std::string role = string_field(item, "role", "", "input", where);
        if (role == "developer") role = "system";
        if (role != "user" && role != "assistant" && role != "system")
          throw_bad_field("input",
                          where + ".role must be 'user', 'assistant', 'system' or 'developer'");
        if (!item.contains("content")) throw_bad_field("input", where + ".content: field required");
        messages.push_back(
            {{"role", role}, {"content", content_text(item["content"], where + ".content")}});
      }
    } else {
      throw_bad_field("input", "input must be a string or a non-empty list of items");
    }
    if (messages.back().contains("tool_calls"))
      throw_bad_field("input", "a function_call item needs its function_call_output after it");
    chat["messages"] = std::move(messages);
    translate_tools(body, chat);
    if (const ojson* max = present(body, "max_output_tokens")) {
      max_output_tokens_ = *max;
      chat["max_completion_tokens"] = *max;
    }
    for (const char* name : {"temperature", "top_p", "user", "service_tier"})
      if (const ojson* v = present(body, name)) chat[name] = *v;
    // Token logprobs: `include: ["message.output_text.logprobs"]`, with
    // `top_logprobs` alternatives per token (which implies the include).
    if (const ojson* include = present(body, "include")) {
      if (!include->is_array()) throw_bad_field("include", "include must be a list of strings");
      for (const ojson& item : *include) {
        if (item != "message.output_text.logprobs")
          throw_bad_field("include", fmt::format("include value {} is not supported "
                                                 "(message.output_text.logprobs)",
                                                 item.dump().substr(0, 64)));
        logprobs_ = true;
      }
    }
    if (const ojson* top = present(body, "top_logprobs")) {
      logprobs_ = true;
      chat["top_logprobs"] = *top;
      top_logprobs_ = *top;
    }
    if (logprobs_) chat["logprobs"] = true;
    if (const ojson* reasoning = present(body, "reasoning")) {
      if (!reasoning->is_object()) throw_bad_field("reasoning", "reasoning must be an object");
      if (reasoning->contains("effort") && !(*reasoning)["effort"].is_null())
        chat["reasoning_effort"] = (*reasoning)["effort"];
    }
    if (const ojson* text = present(body, "text")) {
      if (!text->is_object()) throw_bad_field("text", "text must be an object");
      if (text->contains("format") && !(*text)["format"].is_null()) {
        const ojson& f = (*text)["format"];
        const std::string type =
            f.is_object() ? string_field(f, "type", "", "text", "text.format") : "";
        if (type == "json_schema") {
          ojson schema = f;
          schema.erase("type");
          chat["response_format"] = {{"type", "json_schema"}, {"json_schema", schema}};
        } else if (type == "text" || type == "json_object") {
          chat["response_format"] = {{"type", type}};
        } else {
          throw_bad_field("text",
                          "text.format.type must be 'text', 'json_object' or 'json_schema'");
        }
        text_format_ = f;
      }
    }
    if (const ojson* meta = present(body, "metadata")) metadata_ = *meta;
    if (const ojson* stream = present(body, "stream")) {
      if (!stream->is_boolean()) throw_bad_field("stream", "stream must be a boolean");
      stream_ = stream->get<bool>();
    }
    if (stream_) {
      chat["stream"] = true;
      chat["stream_options"] = {{"include_usage", true}};
    }
    try {
      const GenerationRequest g =
          parse_generation_request(Endpoint::ChatCompletions, chat, model, limits);
      model_ = g.model;
      input_tokens_ = g.prompt_tokens();
      temperature_ = g.params.temperature;
      top_p_ = g.params.top_p;
    } catch (const ApiError& e) {
      throw rename_error_param(flatten_tool_param(e, "parameters"),
                               {{"max_completion_tokens", "max_output_tokens"},
                                {"messages", "input"},
                                {"response_format.json_schema", "text.format"},
                                {"response_format", "text.format"},
                                {"reasoning_effort", "reasoning"},
                                {"logprobs", "include"}});
    }
    created_at_ = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
    return chat;
  }

 protected:
  json on_chat_body(const json& c) override {
    id_ = suffix_id(c.value("id", ""));
    const json& choice = c["choices"][0];
    text_ = choice["message"].value("content", json("")).is_string()
                ? choice["message"]["content"].get<std::string>()
                : "";
    input_tokens_ = c["usage"].value("prompt_tokens", input_tokens_);
    output_tokens_ = c["usage"].value("completion_tokens", 0);
    finish_ = choice.value("finish_reason", json("stop")).get<std::string>();
    append_logprobs(choice, nullptr);
    const json& calls = choice["message"].value("tool_calls", json::array());
    if (calls.is_array())
      for (const json& call : calls) {
        add_call(call);
        calls_.back()["arguments"] = call["function"].value("arguments", "");
      }
    with_message_ = !text_.empty() || calls_.empty();
    return response(true);
  }

  void on_stream_start() override {}

  void on_chat_chunk(const json& chunk) override {
    if (!started_) start(chunk);
    if (chunk.contains("usage") && chunk["usage"].is_object()) {
      output_tokens_ = chunk["usage"].value("completion_tokens", output_tokens_);
      input_tokens_ = chunk["usage"].value("prompt_tokens", input_tokens_);
    }
    if (!chunk.contains("choices") || chunk["choices"].empty()) return;
    const json& choice = chunk["choices"][0];
    const json& delta = choice.value("delta", json::object());
    json piece_logprobs = json::array();
    append_logprobs(choice, &piece_logprobs);
    if (delta.contains("content") && delta["content"].is_string() &&
        !delta["content"].get<std::string>().empty()) {
      const std::string piece = delta["content"].get<std::string>();
      text_ += piece;
      event("response.output_text.delta", {{"item_id", message_id()},
                                           {"output_index", 0},
                                           {"content_index", 0},
                                           {"delta", piece},
                                           {"logprobs", std::move(piece_logprobs)}});
    }
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string())
      finish_ = choice["finish_reason"].get<std::string>();
    if (delta.contains("tool_calls") && delta["tool_calls"].is_array())
      for (const json& call : delta["tool_calls"]) stream_call(call);
  }

  void on_stream_end() override {
    if (!started_) start(json::object());
    if (calls_.empty()) {
      close_message();
    } else {
      close_call();
    }
    const json r = response(true);
    event(r["status"] == "completed" ? "response.completed" : "response.incomplete",
          {{"response", r}});
  }

  json route_error(int, const json& err) override { return {{"error", err}}; }

  void emit_stream_error(int, const json& err) override {
    event("error", {{"code", err.value("type", json("server_error"))},
                    {"message", err.value("message", "error")},
                    {"param", err.value("param", json())}});
  }

 private:
  // The streamed message item's closing events (its text is final).
  void close_message() {
    const json part = output_part();
    event("response.output_text.done", {{"item_id", message_id()},
                                        {"output_index", 0},
                                        {"content_index", 0},
                                        {"text", text_},
                                        {"logprobs", logprobs_json_}});
    event("response.content_part.done",
          {{"item_id", message_id()}, {"output_index", 0}, {"content_index", 0}, {"part", part}});
    event("response.output_item.done", {{"output_index", 0}, {"item", message_item(true)}});
  }

  // A chat tool call -> a function_call output item (arguments empty).
  void add_call(const json& call) {
    const std::string call_id = call.value("id", "");
    calls_.push_back({{"type", "function_call"},
                      {"id", "fc_" + suffix_id(call_id)},
                      {"call_id", call_id},
                      {"name", call.value("function", json::object()).value("name", "")},
                      {"arguments", ""},
                      {"status", "completed"}});
  }

  // Streaming: a call's first delta (id and name) closes the open item and
  // opens a function_call item; argument fragments go out as deltas.
  void stream_call(const json& call) {
    const int index = call.value("index", 0);
    if (calls_.empty() || index != call_index_) {
      if (calls_.empty()) {
        close_message();
      } else {
        close_call();
      }
      call_index_ = index;
      add_call(call);
      json item = calls_.back();
      item["status"] = "in_progress";
      event("response.output_item.added",
            {{"output_index", static_cast<int>(calls_.size())}, {"item", item}});
    }
    const json& args = call.value("function", json::object()).value("arguments", json(""));
    if (!args.is_string() || args.get<std::string>().empty()) return;
    calls_.back()["arguments"] =
        calls_.back()["arguments"].get<std::string>() + args.get<std::string>();
    event("response.function_call_arguments.delta",
          {{"item_id", calls_.back()["id"]},
           {"output_index", static_cast<int>(calls_.size())},
           {"delta", args}});
  }

  void close_call() {
    const json& item = calls_.back();
    const int at = static_cast<int>(calls_.size());
    event("response.function_call_arguments.done",
          {{"item_id", item["id"]}, {"output_index", at}, {"arguments", item["arguments"]}});
    event("response.output_item.done", {{"output_index", at}, {"item", item}});
  }

  // function_call items -> an assistant turn's tool_calls (merged into the
  // assistant message before them); function_call_output items -> role
  // "tool" messages, answering a call of an earlier item.
  void add_call_item(const std::string& type, const ojson& item, const std::string& where,
                     ojson& messages) {
    const std::string call_id = string_field(item, "call_id", "", "input", where);
    if (call_id.empty()) throw_bad_field("input", where + ".call_id: field required");
    if (type == "function_call_output") {
      if (!call_ids_.count(call_id))
        throw_bad_field("input", where + ".call_id must name a function_call item before it");
      const ojson* output = present(item, "output");
      if (!output) throw_bad_field("input", where + ".output: field required");
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", call_id},
                          {"content", content_text(*output, where + ".output")}});
      return;
    }
    const std::string name = string_field(item, "name", "", "input", where);
    if (name.empty()) throw_bad_field("input", where + ".name: field required");
    const std::string arguments = string_field(item, "arguments", "", "input", where);
    call_ids_.insert(call_id);
    const ojson call = {{"id", call_id},
                        {"type", "function"},
                        {"function", {{"name", name}, {"arguments", arguments}}}};
    if (messages.empty() || messages.back()["role"] != "assistant")
      messages.push_back({{"role", "assistant"}, {"content", ""}});
    ojson& turn = messages.back();
    if (!turn.contains("tool_calls")) turn["tool_calls"] = ojson::array();
    turn["tool_calls"].push_back(call);
  }

  // tools (function tools), tool_choice and parallel_tool_calls -> the chat
  // request's; the response echoes them.
  void translate_tools(const ojson& body, ojson& chat) {
    if (const ojson* tools = present(body, "tools")) {
      ojson out = flat_tools_to_chat(
          *tools, "function", "", "function", [](const ojson& t, const std::string& at) {
            if (present(t, "strict"))
              throw_bad_field("tools", at + ".strict is not supported: omit it (forced calls are "
                                            "grammar-constrained by tool_choice)");
            ojson fn = {{"name", string_field(t, "name", "", "tools", at)}};
            if (const ojson* d = present(t, "description")) fn["description"] = *d;
            if (const ojson* p = present(t, "parameters")) fn["parameters"] = *p;
            return fn;
          });
      if (!out.empty()) {
        chat["tools"] = std::move(out);
        tools_ = *tools;
      }
    }
    if (const ojson* c = present(body, "tool_choice")) {
      if (c->is_object()) {
        const std::string type = string_field(*c, "type", "", "tool_choice", "tool_choice");
        if (type != "function")
          throw_bad_field("tool_choice",
                          fmt::format("tool_choice of type '{}' is not supported (function)",
                                      type.substr(0, 32)));
        chat["tool_choice"] = {
            {"type", "function"},
            {"function", {{"name", string_field(*c, "name", "", "tool_choice", "tool_choice")}}}};
      } else {
        chat["tool_choice"] = *c;  // "none", "auto", "required": the chat parser checks
      }
      tool_choice_ = *c;
    }
    if (const ojson* p = present(body, "parallel_tool_calls")) {
      chat["parallel_tool_calls"] = *p;
      parallel_tool_calls_ = *p;
    }
  }
  std::string message_id() const { return "msg_" + id_; }

  json output_part() const {
    return {{"type", "output_text"},
            {"text", text_},
            {"annotations", json::array()},
            {"logprobs", logprobs_json_}};
  }

  // The chat choice's token logprobs ({token, logprob, bytes, top_logprobs}:
  // the Responses API's shape too) appended to the output's, and to `piece`.
  void append_logprobs(const json& choice, json* piece) {
    if (!logprobs_ || !choice.contains("logprobs") || !choice["logprobs"].is_object()) return;
    const json& content = choice["logprobs"].value("content", json::array());
    if (!content.is_array()) return;
    for (const json& token : content) {
      logprobs_json_.push_back(token);
      if (piece) piece->push_back(token);
    }
  }

  json message_item(bool done) const {
    return {{"type", "message"},
            {"id", message_id()},
            {"status", done ? (finish_ == "length" ? "incomplete" : "completed") : "in_progress"},
            {"role", "assistant"},
            {"content", done ? json::array({output_part()}) : json::array()}};
  }

  // The finished output items: the message (left out when the reply is only
  // tool calls, unless it was streamed), then the function calls.
  json output() const {
    json items = json::array();
    if (with_message_) items.push_back(message_item(true));
    for (const json& call : calls_) items.push_back(call);
    return items;
  }

  // The response object; `done`: with its output, status and usage.
  json response(bool done) const {
    const bool cut = finish_ == "length";
    json r = {
        {"id", "resp_" + id_},
        {"object", "response"},
        {"created_at", created_at_},
        {"status", !done ? "in_progress"
                   : cut ? "incomplete"
                         : "completed"},
        {"error", nullptr},
        {"incomplete_details", done && cut ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
        {"instructions", instructions_.is_null() ? json(nullptr) : json(instructions_)},
        {"max_output_tokens",
         max_output_tokens_.is_null() ? json(nullptr) : json(max_output_tokens_)},
        {"model", model_},
        {"output", done ? output() : json::array()},
        {"parallel_tool_calls",
         parallel_tool_calls_.is_null() ? json(!tools_.is_null()) : json(parallel_tool_calls_)},
        {"previous_response_id", nullptr},
        {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
        {"store", false},
        {"temperature", temperature_},
        {"text",
         {{"format", text_format_.is_null() ? json{{"type", "text"}} : json(text_format_)}}},
        {"tool_choice", !tool_choice_.is_null() ? json(tool_choice_)
                        : tools_.is_null()      ? json("none")
                                                : json("auto")},
        {"tools", tools_.is_null() ? json::array() : json(tools_)},
        {"top_p", top_p_},
        {"top_logprobs", top_logprobs_.is_null() ? json(nullptr) : json(top_logprobs_)},
        {"truncation", "disabled"},
        {"metadata", metadata_.is_null() ? json::object() : json(metadata_)},
        {"usage", nullptr}};
    if (done)
      r["usage"] = {{"input_tokens", input_tokens_},
                    {"input_tokens_details", {{"cached_tokens", 0}}},
                    {"output_tokens", output_tokens_},
                    {"output_tokens_details", {{"reasoning_tokens", 0}}},
                    {"total_tokens", input_tokens_ + output_tokens_}};
    return r;
  }

  void start(const json& chunk) {
    started_ = true;
    id_ = suffix_id(chunk.value("id", "chatcmpl-0"));
    event("response.created", {{"response", response(false)}});
    event("response.in_progress", {{"response", response(false)}});
    event("response.output_item.added", {{"output_index", 0}, {"item", message_item(false)}});
    event("response.content_part.added", {{"item_id", message_id()},
                                          {"output_index", 0},
                                          {"content_index", 0},
                                          {"part",
                                           {{"type", "output_text"},
                                            {"text", ""},
                                            {"annotations", json::array()},
                                            {"logprobs", json::array()}}}});
  }

  // One event: its type, its fields and the next sequence number.
  void event(const std::string& type, json data) {
    data["type"] = type;
    data["sequence_number"] = sequence_++;
    emit(type, data);
  }

  bool stream_ = false;
  bool logprobs_ = false;
  json logprobs_json_ = json::array();
  std::string model_;
  ojson instructions_, max_output_tokens_, text_format_, metadata_, top_logprobs_;
  float temperature_ = 1.0f, top_p_ = 1.0f;
  int64_t created_at_ = 0;
  int64_t input_tokens_ = 0, output_tokens_ = 0;
  bool started_ = false;
  std::string id_;
  std::string text_;
  std::string finish_;
  int64_t sequence_ = 0;
  ojson tools_, tool_choice_, parallel_tool_calls_;  // as the request sent them
  std::set<std::string> call_ids_;                   // call_ids of the input's function_call items
  json calls_ = json::array();                       // the reply's function_call items
  int call_index_ = -1;       // the chat tool call the open function_call item streams
  bool with_message_ = true;  // the output has the message item
};

}  // namespace

std::shared_ptr<ChatAdapter> make_responses_adapter(std::shared_ptr<ResponseSink> inner) {
  return std::make_shared<ResponsesAdapter>(std::move(inner));
}

}  // namespace loom::server
