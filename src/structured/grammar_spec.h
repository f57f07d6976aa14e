// GrammarSpec: what a request's output must match, before compilation. Every
// kind (JSON schema, any JSON object, regex, EBNF, fixed choices, and their
// compositions: a reasoning section first, tool-call wrappers) is lowered to
// one tree of xgrammar structural-tag "format" nodes, so one compile path
// serves them all and the tree's text is the cache key. Plain data.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
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
  // What makes a grammar's compile time grow with a number in the request
  // (measured on the 150k-token default vocabulary: a 5,000-value enum
  // compiles in ~50 s, maxLength 100,000 in ~18 s, (a|b){1,5000} in ~20 s).
  int32_t max_enum_values = 1024;    // enum and const values in one schema, all together
  int64_t max_string_length = 4096;  // minLength / maxLength
  int64_t max_repetition = 256;      // {m,n} counts in a regex, pattern or grammar
};

// The largest count of a {m}, {m,} or {m,n} repetition in a regex (or EBNF)
// text, outside character classes and escapes; 0 when none.
int64_t max_counted_repetition(std::string_view text);
// Throws GrammarError::TooLarge when `text` repeats more than limits allow.
void check_repetitions(const std::string& what, std::string_view text, const SpecLimits& limits);

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
// or, in Python style (Gemma, Llama 3.2 pythonic),
//   call_begin <name>(<key>=<value>, ...) call_end
// with calls joined by `separator` and the whole list inside list_begin ...
// list_end (Mistral's [TOOL_CALLS][...], pythonic [f(a=1), g(b=2)]).
// Arguments follow the function's JSON Schema (checked like
// json_schema_spec); in Python style the parameters must be an object schema
// with `properties`, each keyword argument's value is written as JSON (the
// tool-call parser reads JSON's true/false/null and escapes beside Python's),
// required arguments first, then the optional ones in schema order.
struct FunctionSchema {
  std::string name;
  ordered_json parameters;  // null: no parameters ({})
};
struct ToolCallSyntax {
  std::string call_begin, call_end, separator, list_begin, list_end;
  std::string arguments_key = "arguments";
  bool python = false;  // name(key=value, ...) in place of the JSON object
};
// At least one call; exactly one unless `parallel`.
GrammarSpec tool_calls_spec(const std::vector<FunctionSchema>& functions,
                            const ToolCallSyntax& syntax, bool parallel,
                            const SpecLimits& limits = {});

}  // namespace loom::structured
