// OutputParser: one chat choice's generated text -> the parts of an OpenAI
// message: reasoning_content (a <think> section, when the model reasons),
// tool_calls (when the request has active tools) and content. Feeds the
// reasoning splitter first, then the tool-call parser on what is not
// reasoning. Also keeps the whole message for non-streaming bodies. Not
// thread-safe (one per choice).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"

namespace loom::server {

struct ToolCall {
  std::string id, name, arguments;
};

struct OutputDelta {
  std::string content, reasoning;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

class OutputParser {
 public:
  OutputParser(const std::optional<ReasoningFormat>& reasoning, bool reasoning_started,
               const std::optional<ToolCallFormat>& tools);
  OutputDelta push(std::string_view text);
  OutputDelta finish();

  const std::string& content() const { return content_; }
  const std::string& reasoning() const { return reasoning_; }
  const std::vector<ToolCall>& tool_calls() const { return calls_; }
  // The message object of a non-streaming body (after finish()).
  nlohmann::json message() const;

 private:
  void take(const ParsedDelta& d, OutputDelta& out);

  std::optional<ReasoningParser> reasoning_parser_;
  std::optional<ToolCallParser> tool_parser_;
  std::string content_, reasoning_;
  std::vector<ToolCall> calls_;
};

// OpenAI's streaming shape of tool-call deltas: the first of a call carries
// index, id, type and function.name (arguments ""), later ones index and
// function.arguments.
nlohmann::json tool_call_deltas_json(const std::vector<ToolCallDelta>& deltas);

}  // namespace loom::server
