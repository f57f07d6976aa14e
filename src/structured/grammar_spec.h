// GrammarSpec: what a request's output must match, before compilation. Every
// kind (JSON schema, any JSON object, regex, EBNF, fixed choices, and their
// compositions: a reasoning section first, tool-call wrappers) is lowered to
// one tree of xgrammar structural-tag "format" nodes, so one compile path
// serves them all and the tree's text is the cache key. Plain data.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "structured/grammar_error.h"

namespace loom::structured {

using ordered_json = nlohmann::ordered_json;  // schemas keep their property order

enum class GrammarKind : uint8_t { JsonSchema, JsonObject, Regex, Ebnf, Choice, ToolCalls };
const char* grammar_kind_name(GrammarKind kind);  // "json_schema", "json_object", ...

struct GrammarSpec {
  GrammarKind kind = GrammarKind::JsonObject;
  ordered_json format;  // a structural-tag format node
  // The canonical text of the format (the compile cache's key, with the tokenizer).
  std::string key() const { return format.dump(); }
  // "json_schema", "json_schema after reasoning", ... for logs and errors.
  std::string describe() const;
  bool after_reasoning = false;
};

// Limits on what a client can make large before anything is compiled.
struct SpecLimits {
  size_t max_source_bytes = 64 << 10;  // a schema's JSON text, a regex, a grammar
  int32_t max_schema_depth = 32;       // nested schema objects
  int32_t max_choices = 1024;
  size_t max_choice_bytes = 4096;
};

// Each checks its input and throws GrammarError (naming the feature) when it
// cannot be enforced exactly; the result then constrains to exactly it.
GrammarSpec json_schema_spec(const ordered_json& schema, const SpecLimits& limits = {});
GrammarSpec json_object_spec();
GrammarSpec regex_spec(const std::string& pattern, const SpecLimits& limits = {});
GrammarSpec ebnf_spec(const std::string& grammar, const SpecLimits& limits = {});
GrammarSpec choice_spec(const std::vector<std::string>& choices, const SpecLimits& limits = {});

// The output may open with a reasoning section (`start` free text `end`, as
// Qwen3's <think>...</think>) before `inner` applies; `started`: the prompt
// already opened it, so the output begins inside it.
GrammarSpec after_reasoning(const GrammarSpec& inner, const std::string& start,
                            const std::string& end, bool started);

// Tool calls in a model's own format: each call is
//   call_begin {"name": "<name>", "<arguments_key>": <arguments>} call_end
// with calls joined by `separator` and the whole list inside list_begin ...
// list_end (Mistral's [TOOL_CALLS][...]). Arguments follow the function's
// JSON Schema (checked like json_schema_spec).
struct FunctionSchema {
  std::string name;
  ordered_json parameters;  // null: no parameters ({})
};
struct ToolCallSyntax {
  std::string call_begin, call_end, separator, list_begin, list_end;
  std::string arguments_key = "arguments";
};
// At least one call; exactly one unless `parallel`.
GrammarSpec tool_calls_spec(const std::vector<FunctionSchema>& functions,
                            const ToolCallSyntax& syntax, bool parallel,
                            const SpecLimits& limits = {});

}  // namespace loom::structured
