// Reasoning, then tool calls, then content; accumulation for the final body.
#include "server/output_parser.h"

namespace loom::server {

using nlohmann::json;

OutputParser::OutputParser(const std::optional<ReasoningFormat>& reasoning, bool reasoning_started,
                           const std::optional<ToolCallFormat>& tools) {
  if (reasoning) reasoning_parser_.emplace(*reasoning, reasoning_started);
  if (tools) tool_parser_.emplace(*tools);
}

void OutputParser::take(const ParsedDelta& d, OutputDelta& out) {
  out.content += d.content;
  for (const auto& t : d.tool_calls) {
    if (t.index >= int32_t(calls_.size())) calls_.push_back({t.id, t.name, ""});
    calls_[size_t(t.index)].arguments += t.arguments;
    out.tool_calls.push_back(t);
  }
}

OutputDelta OutputParser::push(std::string_view text) {
  OutputDelta out;
  std::string content(text);
  if (reasoning_parser_) {
    auto r = reasoning_parser_->push(text);
    out.reasoning = std::move(r.reasoning);
    content = std::move(r.content);
  }
  if (tool_parser_)
    take(tool_parser_->push(content), out);
  else
    out.content = std::move(content);
  content_ += out.content;
  reasoning_ += out.reasoning;
  return out;
}

OutputDelta OutputParser::finish() {
  OutputDelta out;
  std::string content;
  if (reasoning_parser_) {
    auto r = reasoning_parser_->finish();
    out.reasoning = std::move(r.reasoning);
    content = std::move(r.content);
  }
  if (tool_parser_) {
    take(tool_parser_->push(content), out);
    take(tool_parser_->finish(), out);
  } else {
    out.content = std::move(content);
  }
  content_ += out.content;
  reasoning_ += out.reasoning;
  return out;
}

json OutputParser::message() const {
  json m = {{"role", "assistant"}};
  // With tool calls, whitespace around them is not content.
  const bool blank = content_.find_first_not_of(" \n\t\r") == std::string::npos;
  m["content"] = !calls_.empty() && blank ? json(nullptr) : json(content_);
  if (reasoning_parser_)
    m["reasoning_content"] = reasoning_.empty() ? json(nullptr) : json(reasoning_);
  if (!calls_.empty()) {
    json calls = json::array();
    for (const auto& c : calls_)
      calls.push_back({{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

json tool_call_deltas_json(const std::vector<ToolCallDelta>& deltas) {
  json out = json::array();
  for (const auto& d : deltas) {
    // Fragments of one call within one chunk are merged.
    if (!out.empty() && out.back()["index"] == d.index && d.id.empty()) {
      out.back()["function"]["arguments"] =
          out.back()["function"]["arguments"].get<std::string>() + d.arguments;
      continue;
    }
    json j = {{"index", d.index}};
    if (!d.id.empty()) {
      j["id"] = d.id;
      j["type"] = "function";
      j["function"] = {{"name", d.name}, {"arguments", d.arguments}};
    } else {
      j["function"] = {{"arguments", d.arguments}};
    }
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace loom::server
