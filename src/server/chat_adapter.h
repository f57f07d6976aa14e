// ChatAdapter: serves another API's generation route (Anthropic's
// /v1/messages, OpenAI's /v1/responses) through the chat completions path.
// translate() turns the route's body into a chat completions body (checked
// in the route's own terms first, then by the chat parser); as a
// ResponseSink wrapped around the connection's, the adapter turns what the
// chat path sends — one JSON body, SSE chunks, or an OpenAI error — into the
// route's own response and events. The chat path serialises its calls to a
// sink, so an adapter needs no lock. One adapter per HTTP exchange.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/api_error.h"
#include "server/http_types.h"
#include "server/openai_request.h"

namespace loom::server {

class ChatAdapter : public ResponseSink {
 public:
  explicit ChatAdapter(std::shared_ptr<ResponseSink> inner) : inner_(std::move(inner)) {}

  // The route's body -> a chat completions body (stream_options.include_usage
  // set when streaming, n = 1). Throws ApiError naming the route's field.
  virtual nlohmann::ordered_json translate(const nlohmann::ordered_json& body,
                                           const ModelContext& model,
                                           const RequestLimits& limits) = 0;

  void send(HttpResponse response) final;
  void begin_stream(int status, std::string content_type, HttpHeaders headers) final;
  void write(std::string chunk) final;
  void end_stream() final;
  void on_close(std::function<void()> callback) final { inner_->on_close(std::move(callback)); }

 protected:
  // A complete chat completion (status 200) -> the route's body.
  virtual nlohmann::json on_chat_body(const nlohmann::json& completion) = 0;
  // Streaming: the stream opened, one chat chunk, the stream's end (after
  // the usage chunk). Emit events with emit().
  virtual void on_stream_start() = 0;
  virtual void on_chat_chunk(const nlohmann::json& chunk) = 0;
  virtual void on_stream_end() = 0;
  // An OpenAI error ({"error": {...}}) with its status, before or while
  // streaming -> the route's error body (or event, when streaming).
  virtual nlohmann::json route_error(int status, const nlohmann::json& openai_error) = 0;
  virtual void emit_stream_error(int status, const nlohmann::json& openai_error) = 0;

  // Writes one SSE event: "event: NAME\ndata: JSON\n\n".
  void emit(const std::string& event, const nlohmann::json& data);

 private:
  void handle_event(const std::string& data);

  std::shared_ptr<ResponseSink> inner_;
  std::string pending_;  // SSE bytes not yet split into events
  bool streaming_ = false;
  bool failed_ = false;  // an error event went out; the rest is dropped
};

// The chat path's field names -> the route's, applied to an ApiError's param
// (a name or a name's sub-path: "response_format.json_schema.schema") and to
// the names its message quotes ('max_completion_tokens'). The first match wins.
ApiError rename_error_param(const ApiError& e,
                            std::initializer_list<std::pair<const char*, const char*>> names);

// A chat tool's param ("tools[1].function.parameters.type") as a route whose
// tools are flat names it: "tools[1]." + the rest, with "parameters" spelled
// `parameters_name` ("input_schema" on /v1/messages). Other params unchanged.
ApiError flatten_tool_param(const ApiError& e, const std::string& parameters_name);

// A flat tool list (/v1/messages, /v1/responses: {type, name, ...} per tool)
// as chat function tools: `tools` must be a list of objects whose type
// (`fallback_type` when absent) is `type`, else a 400 saying only
// `supported` are; `function` turns one tool (and its "tools[i]" path) into
// the chat function object.
nlohmann::ordered_json flat_tools_to_chat(
    const nlohmann::ordered_json& tools, const std::string& type, const std::string& fallback_type,
    const std::string& supported,
    const std::function<nlohmann::ordered_json(const nlohmann::ordered_json&, const std::string&)>&
        function);

// obj[key] (obj an object) as a string; `fallback` when absent or null. Any
// other type is an ApiError for `param`: "WHERE.KEY must be a string".
std::string string_field(const nlohmann::ordered_json& obj, const char* key,
                         const std::string& fallback, const char* param, const std::string& where);

}  // namespace loom::server
