// The structure a request asks of its output: response_format (json_object,
// json_schema), vLLM's structured_outputs / guided_json / guided_regex /
// guided_choice / guided_grammar, and tools / tool_choice /
// parallel_tool_calls. Parsed and checked here (every unknown value or
// unsupported schema feature is a 400 naming the field); compiled later, off
// the engine thread, by the server. Pure.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"
#include "structured/grammar_spec.h"

namespace loom::server {

struct ToolsRequest {
  enum class Choice { Auto, None, Required, Named };
  std::vector<structured::FunctionSchema> functions;
  Choice choice = Choice::Auto;
  std::string named;     // Choice::Named: the function
  bool parallel = true;  // parallel_tool_calls
  // Tool calls are looked for in the output.
  bool active() const { return !functions.empty() && choice != Choice::None; }
  // Tool calls are enforced by a grammar.
  bool forced() const { return choice == Choice::Required || choice == Choice::Named; }
};

struct OutputStructure {
  std::optional<structured::GrammarSpec> grammar;  // response_format / guided_*: enforced
  std::string param;                               // the request field it came from
  ToolsRequest tools;
};

// chat: tools are accepted (chat completions only).
OutputStructure parse_output_structure(const nlohmann::ordered_json& body, bool chat,
                                       const structured::SpecLimits& limits = {});

// The grammar to enforce for a request, given how the model writes tool calls
// and reasons: the forced tool calls or the response format, after the
// reasoning section when the model reasons. nullopt: unconstrained. Throws
// ApiError (400) when the forced tool calls cannot be written as a grammar in
// this format.
std::optional<structured::GrammarSpec> output_grammar(
    const OutputStructure& structure, const ToolCallFormat& tool_format,
    const std::optional<ReasoningFormat>& reasoning, bool reasoning_started);

}  // namespace loom::server
