// Tool calls in model output -> OpenAI tool_calls, incrementally. One parser
// for every format: a ToolCallFormat says how calls are framed (a start
// marker such as <tool_call> or [TOOL_CALLS], an end marker, a list with
// separators, or a call at the very start of the output) and how one call's
// body is written (a JSON object {"name", "arguments"|"parameters"}, or a
// Python-style call name(key=value, ...)). Text outside calls is content; a
// possible marker prefix at the end of a chunk is held back, so no call text
// ever leaks into content. Not thread-safe (one per choice).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "structured/grammar_spec.h"

namespace loom {
class Tokenizer;
}

namespace loom::server {

struct ToolCallFormat {
  enum class Body { Json, Pythonic };
  std::string name;       // hermes, llama3_json, mistral, pythonic
  std::string start;      // marker before the calls; "" = calls only at the output's start
  std::string end;        // marker after each call ("" = none)
  bool list = false;      // the calls form one list: [call, call] (JSON or Python)
  std::string separator;  // between calls outside a list (llama3: ";")
  Body body = Body::Json;
  // JSON body: where the function's arguments are ("arguments" or "parameters").
  std::vector<std::string> argument_keys = {"arguments", "parameters"};
  // How required / named tool_choice writes calls (the grammar's syntax);
  // nullopt: this format cannot be enforced by a JSON-schema grammar.
  std::optional<structured::ToolCallSyntax> syntax;
};

// Known formats by name; nullopt for an unknown name.
std::optional<ToolCallFormat> tool_call_format(std::string_view name);
std::vector<std::string> tool_call_format_names();
// The format a chat template writes calls in ("<tool_call>" -> hermes,
// "[TOOL_CALLS]" -> mistral, "<|python_tag|>" or "parameters" -> llama3_json,
// Gemma's start_of_turn templates -> pythonic); hermes when nothing matches.
ToolCallFormat detect_tool_call_format(std::string_view chat_template);

struct ToolCallDelta {
  int32_t index = 0;
  std::string id;         // set on the call's first delta
  std::string name;       // set on the call's first delta
  std::string arguments;  // a fragment of the arguments' JSON text
};

struct ParsedDelta {
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && tool_calls.empty(); }
};

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallFormat format);
  // New output text -> what became certain.
  ParsedDelta push(std::string_view text);
  // The output ended: whatever is held back (an unfinished call becomes content
  // unless its name was already reported).
  ParsedDelta finish();
  int32_t num_calls() const { return next_index_; }

 private:
  enum class State { Content, Calls, Done };
  void parse(ParsedDelta& out, bool at_end);
  bool parse_content(ParsedDelta& out, bool at_end);
  bool parse_calls(ParsedDelta& out, bool at_end);
  // One call body at buf_[pos_...]; false: needs more text.
  bool parse_json_call(ParsedDelta& out, bool at_end);
  bool parse_python_call(ParsedDelta& out, bool at_end);
  void emit_call_start(ParsedDelta& out, const std::string& name);
  // Not a call after all: the text consumed since the start marker is content.
  void leave_calls(ParsedDelta& out);

  ToolCallFormat format_;
  State state_ = State::Content;
  std::string buf_;  // text not yet consumed
  std::string raw_;  // consumed call framing (marker, brackets) not yet part of a reported call
  bool seen_text_ = false;  // non-space content was emitted (start-only formats stop looking)
  bool in_list_ = false;
  bool after_call_ = false;  // a call just ended (its end marker or a separator may follow)
  int32_t next_index_ = 0;
  // The call being read (streamed): its name was reported, its arguments
  // were streamed up to args_sent_ bytes of the body.
  bool call_open_ = false;
  size_t args_sent_ = 0;
  std::string pending_args_;
};

// "call_" + 24 random alphanumerics.
std::string make_tool_call_id();

}  // namespace loom::server
