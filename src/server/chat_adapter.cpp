// Decoding what the chat path sends (see chat_adapter.h): a JSON body or an
// error, or SSE frames "data: JSON\n\n" ending with "data: [DONE]".
#include "server/chat_adapter.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <string_view>

namespace loom::server {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

// A chat answer cut by the server's shutdown ends with finish_reason
// "abort". Neither adapted API has such a stop reason, and ending normally
// would pass a cut answer off as complete: the route answers with a 503 (as
// a request arriving during shutdown gets) or, mid-stream, an error event.
bool aborted(const json& body_or_chunk) {
  const json& choices = body_or_chunk.value("choices", json::array());
  return choices.is_array() && !choices.empty() && choices[0].is_object() &&
         choices[0].value("finish_reason", json()) == "abort";
}

json shutdown_error() {
  return {{"message", "the server shut down before the answer was complete"},
          {"type", "service_unavailable"}};
}

}  // namespace

void ChatAdapter::send(HttpResponse response) {
  json body = json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (response.status == 200 && body.is_object() && aborted(body)) {
    response.status = 503;
    body = json{{"error", shutdown_error()}};
  }
  if (response.status == 200 && body.is_object() && !body.contains("error")) {
    response.body = on_chat_body(body).dump(-1, ' ', false, json::error_handler_t::replace);
  } else {
    if (!body.is_object() || !body.contains("error"))
      body = json{{"error", {{"message", "internal error"}, {"type", "server_error"}}}};
    response.body = route_error(response.status, body["error"])
                        .dump(-1, ' ', false, json::error_handler_t::replace);
  }
  response.content_type = "application/json";
  inner_->send(std::move(response));
}

void ChatAdapter::begin_stream(int status, std::string content_type, HttpHeaders headers) {
  streaming_ = true;
  inner_->begin_stream(status, std::move(content_type), std::move(headers));
  on_stream_start();
}

void ChatAdapter::write(std::string chunk) {
  pending_ += chunk;
  size_t end;
  while ((end = pending_.find("\n\n")) != std::string::npos) {
    const std::string frame = pending_.substr(0, end);
    pending_.erase(0, end + 2);
    if (frame.rfind("data: ", 0) == 0) handle_event(frame.substr(6));
  }
}

void ChatAdapter::end_stream() {
  if (!failed_) on_stream_end();
  inner_->end_stream();
}

void ChatAdapter::handle_event(const std::string& data) {
  if (failed_ || data == "[DONE]") return;
  const json event = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!event.is_object()) {
    spdlog::warn("chat adapter: a chunk that is not JSON was dropped");
    return;
  }
  if (event.contains("error")) {
    failed_ = true;
    const json& err = event["error"];
    const int status = err.value("code", json()).is_number_integer() ? err["code"].get<int>() : 500;
    emit_stream_error(status, err);
    return;
  }
  on_chat_chunk(event);
  if (aborted(event)) {
    failed_ = true;
    emit_stream_error(503, shutdown_error());
  }
}

void ChatAdapter::emit(const std::string& event, const json& data) {
  inner_->write("event: " + event +
                "\ndata: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n");
}

namespace {

// `name` at the start of s, alone or followed by a sub-path ('.', '[') or a
// closing quote.
bool names_field(std::string_view s, std::string_view name) {
  return s.substr(0, name.size()) == name && (s.size() == name.size() || s[name.size()] == '.' ||
                                              s[name.size()] == '[' || s[name.size()] == '\'');
}

}  // namespace

ApiError rename_error_param(const ApiError& e,
                            std::initializer_list<std::pair<const char*, const char*>> names) {
  std::string param = e.param();
  for (const auto& [from, to] : names)
    if (names_field(param, from)) {
      param = to + param.substr(std::string_view(from).size());
      break;
    }
  // Quoted names in the message: 'max_completion_tokens' must be ...
  std::string message = e.what();
  for (size_t q = message.find('\''); q != std::string::npos; q = message.find('\'', q + 1))
    for (const auto& [from, to] : names)
      if (names_field(std::string_view(message).substr(q + 1), from)) {
        message.replace(q + 1, std::string_view(from).size(), to);
        break;
      }
  ApiError out(e.status(), message, param, e.type());
  if (e.retry_after() > 0) return std::move(out).with_retry_after(e.retry_after());
  return out;
}

ojson flat_tools_to_chat(const ojson& tools, const std::string& type,
                         const std::string& fallback_type, const std::string& supported,
                         const std::function<ojson(const ojson&, const std::string&)>& function) {
  if (!tools.is_array()) throw_bad_field("tools", "tools must be a list");
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!t.is_object()) throw_bad_field("tools", at + " must be an object");
    const std::string got = string_field(t, "type", fallback_type, "tools", at);
    if (got != type)
      throw_bad_field("tools", fmt::format("{}: tools of type '{}' are not supported ({})", at,
                                           got.substr(0, 32), supported));
    out.push_back({{"type", "function"}, {"function", function(t, at)}});
  }
  return out;
}

ApiError flatten_tool_param(const ApiError& e, const std::string& parameters_name) {
  const std::string& param = e.param();
  const size_t close = param.find("].function");
  if (param.rfind("tools[", 0) != 0 || close == std::string::npos) return e;
  std::string rest = param.substr(close + std::string_view("].function").size());
  if (rest.rfind(".parameters", 0) == 0)
    rest = "." + parameters_name + rest.substr(std::string_view(".parameters").size());
  ApiError out(e.status(), e.what(), param.substr(0, close + 1) + rest, e.type());
  if (e.retry_after() > 0) return std::move(out).with_retry_after(e.retry_after());
  return out;
}

std::string string_field(const nlohmann::ordered_json& obj, const char* key,
                         const std::string& fallback, const char* param, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw_bad_field(param, fmt::format("{}.{} must be a string", where, key));
  return it->get<std::string>();
}

}  // namespace loom::server
