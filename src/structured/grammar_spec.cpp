// Lowering each kind of output constraint to xgrammar structural-tag format
// nodes (see its docs/structural_tag/structural_tag.md for the node types).
#include "structured/grammar_spec.h"

#include <fmt/format.h>

#include "structured/schema_check.h"

namespace loom::structured {

namespace {

// Whitespace runs inside generated JSON are capped: an unbounded run lets a
// model at high temperature pad forever (a known failure of free-whitespace
// JSON grammars) while 16 still fits pretty-printed nesting.
constexpr int kMaxWhitespace = 16;

void check_size(const std::string& what, size_t bytes, const SpecLimits& limits) {
  if (bytes > limits.max_source_bytes)
    throw GrammarError(GrammarError::Kind::TooLarge,
                       fmt::format("the {} is {} bytes; at most {} are accepted", what, bytes,
                                   limits.max_source_bytes));
}

ordered_json schema_node(const ordered_json& schema) {
  return {{"type", "json_schema"}, {"json_schema", schema}, {"max_whitespace_cnt", kMaxWhitespace}};
}

ordered_json const_node(const std::string& value) {
  return {{"type", "const_string"}, {"value", value}};
}

}  // namespace

const char* grammar_kind_name(GrammarKind kind) {
  switch (kind) {
    case GrammarKind::JsonSchema:
      return "json_schema";
    case GrammarKind::JsonObject:
      return "json_object";
    case GrammarKind::Regex:
      return "regex";
    case GrammarKind::Ebnf:
      return "grammar";
    case GrammarKind::Choice:
      return "choice";
    case GrammarKind::ToolCalls:
      return "tool_calls";
  }
  return "?";
}

std::string GrammarSpec::describe() const {
  std::string out = grammar_kind_name(kind);
  if (after_reasoning) out += " after reasoning";
  return out;
}

GrammarSpec json_schema_spec(const ordered_json& schema, const SpecLimits& limits) {
  check_size("schema", schema.dump().size(), limits);
  return {GrammarKind::JsonSchema,
          schema_node(prepare_json_schema(schema, limits.max_schema_depth))};
}

GrammarSpec json_object_spec() {
  // Any object: additional properties of any JSON value.
  return {GrammarKind::JsonObject,
          schema_node({{"type", "object"}, {"additionalProperties", true}})};
}

GrammarSpec regex_spec(const std::string& pattern, const SpecLimits& limits) {
  check_size("regex", pattern.size(), limits);
  if (pattern.empty()) throw GrammarError(GrammarError::Kind::Invalid, "the regex is empty");
  return {GrammarKind::Regex, {{"type", "regex"}, {"pattern", pattern}}};
}

GrammarSpec ebnf_spec(const std::string& grammar, const SpecLimits& limits) {
  check_size("grammar", grammar.size(), limits);
  if (grammar.empty()) throw GrammarError(GrammarError::Kind::Invalid, "the grammar is empty");
  return {GrammarKind::Ebnf, {{"type", "grammar"}, {"grammar", grammar}}};
}

GrammarSpec choice_spec(const std::vector<std::string>& choices, const SpecLimits& limits) {
  if (choices.empty()) throw GrammarError(GrammarError::Kind::Invalid, "no choices given");
  if (int64_t(choices.size()) > limits.max_choices)
    throw GrammarError(GrammarError::Kind::TooLarge,
                       fmt::format("{} choices; at most {}", choices.size(), limits.max_choices));
  ordered_json elements = ordered_json::array();
  for (const auto& c : choices) {
    if (c.empty()) throw GrammarError(GrammarError::Kind::Invalid, "a choice is empty");
    if (c.size() > limits.max_choice_bytes)
      throw GrammarError(
          GrammarError::Kind::TooLarge,
          fmt::format("a choice is {} bytes; at most {}", c.size(), limits.max_choice_bytes));
    elements.push_back(const_node(c));
  }
  if (elements.size() == 1) return {GrammarKind::Choice, elements[0]};
  return {GrammarKind::Choice, {{"type", "or"}, {"elements", std::move(elements)}}};
}

GrammarSpec after_reasoning(const GrammarSpec& inner, const std::string& start,
                            const std::string& end, bool started) {
  // The free text stops at `end`; up to two newlines may follow it (Qwen3
  // writes "</think>\n\n") before the constrained part.
  ordered_json reasoning = {{"type", "tag"},
                            {"begin", started ? "" : start},
                            {"content", {{"type", "any_text"}}},
                            {"end", end}};
  if (!started) reasoning = {{"type", "optional"}, {"content", std::move(reasoning)}};
  GrammarSpec out = inner;
  out.format = {
      {"type", "sequence"},
      {"elements",
       {std::move(reasoning), {{"type", "regex"}, {"pattern", "\\n{0,2}"}}, inner.format}}};
  out.after_reasoning = true;
  return out;
}

GrammarSpec tool_calls_spec(const std::vector<FunctionSchema>& functions,
                            const ToolCallSyntax& syntax, bool parallel, const SpecLimits& limits) {
  if (functions.empty()) throw GrammarError(GrammarError::Kind::Invalid, "no functions given");
  ordered_json tags = ordered_json::array();
  for (const auto& f : functions) {
    ordered_json params =
        f.parameters.is_null()
            ? ordered_json{{"type", "object"}, {"properties", ordered_json::object()}}
            : f.parameters;
    try {
      check_size("parameters schema", params.dump().size(), limits);
      params = prepare_json_schema(params, limits.max_schema_depth);
    } catch (const GrammarError& e) {
      throw GrammarError(e.kind(),
                         fmt::format("function '{}': {}", f.name.substr(0, 64), e.what()));
    }
    const std::string begin =
        fmt::format("{}{{\"name\": {}, {}: ", syntax.call_begin, ordered_json(f.name).dump(),
                    ordered_json(syntax.arguments_key).dump());
    tags.push_back({{"type", "tag"},
                    {"begin", begin},
                    {"content", schema_node(params)},
                    {"end", "}" + syntax.call_end}});
  }
  ordered_json calls = {{"type", "tags_with_separator"},
                        {"tags", std::move(tags)},
                        {"separator", syntax.separator},
                        {"at_least_one", true},
                        {"stop_after_first", !parallel}};
  ordered_json format = std::move(calls);
  if (!syntax.list_begin.empty() || !syntax.list_end.empty()) {
    ordered_json elements = ordered_json::array();
    if (!syntax.list_begin.empty()) elements.push_back(const_node(syntax.list_begin));
    elements.push_back(std::move(format));
    if (!syntax.list_end.empty()) elements.push_back(const_node(syntax.list_end));
    format = {{"type", "sequence"}, {"elements", std::move(elements)}};
  }
  return {GrammarKind::ToolCalls, std::move(format)};
}

}  // namespace loom::structured
