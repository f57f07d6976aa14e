// Lowering each kind of output constraint to xgrammar structural-tag format
// nodes (see its docs/structural_tag/structural_tag.md for the node types).
#include "structured/grammar_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

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

ordered_json sequence_node(ordered_json elements) {
  if (elements.size() == 1) return std::move(elements[0]);
  return {{"type", "sequence"}, {"elements", std::move(elements)}};
}

// The keyword arguments of a Python-style call, `key=value, ...`, for a
// prepared object schema: required properties in schema order, then each
// optional one. With no required property the first argument present may be
// any optional one, so there is one branch per optional property (the tails
// repeat; xgrammar compiles identical nodes once).
ordered_json python_kwargs_node(const std::string& function, const ordered_json& params,
                                const SpecLimits& limits) {
  auto refuse = [&](const std::string& why) {
    return GrammarError(
        GrammarError::Kind::Unsupported,
        fmt::format("function '{}': python-style tool calls {}", function.substr(0, 64), why));
  };
  if (!params.is_object() || params.value("type", ordered_json("object")) != "object")
    throw refuse("need the parameters to be an object schema");
  for (const char* k : {"$ref", "anyOf", "oneOf", "allOf", "patternProperties", "enum", "const"})
    if (params.contains(k))
      throw refuse(fmt::format("cannot express '{}' at the top of the parameters", k));
  const ordered_json props = params.value("properties", ordered_json::object());
  if (!props.is_object()) throw refuse("need 'properties' to be an object");
  std::vector<std::string> required;
  if (params.contains("required")) {
    if (!params["required"].is_array()) throw refuse("need 'required' to be a list");
    for (const auto& r : params["required"]) {
      if (!r.is_string() || !props.contains(r.get<std::string>()))
        throw refuse(fmt::format("need every required argument in 'properties' ({})",
                                 r.dump().substr(0, 64)));
      required.push_back(r.get<std::string>());
    }
  }
  // Each value's schema carries the top-level definitions its $refs point at.
  auto argument = [&](const std::string& key) {
    bool identifier = !key.empty() && !std::isdigit(static_cast<unsigned char>(key[0]));
    for (char c : key)
      identifier = identifier && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!identifier)
      throw refuse(fmt::format("need argument names that are Python identifiers ({})",
                               ordered_json(key).dump().substr(0, 64)));
    ordered_json value = props[key];
    if (value.is_object())
      for (const char* defs : {"$defs", "definitions"})
        if (params.contains(defs) && !value.contains(defs)) value[defs] = params[defs];
    return ordered_json::array({const_node(key + "="), schema_node(value)});
  };
  std::vector<std::string> optional;
  for (const auto& [key, value] : props.items())
    if (std::find(required.begin(), required.end(), key) == required.end()) optional.push_back(key);
  // ", key=value" for each optional property from `from` on, each optional.
  auto optional_tail = [&](size_t from) {
    ordered_json elements = ordered_json::array();
    for (size_t i = from; i < optional.size(); ++i) {
      ordered_json item = ordered_json::array({const_node(", ")});
      for (auto& e : argument(optional[i])) item.push_back(std::move(e));
      elements.push_back({{"type", "optional"}, {"content", sequence_node(std::move(item))}});
    }
    return elements;
  };
  ordered_json elements = ordered_json::array();
  if (!required.empty()) {
    for (size_t i = 0; i < required.size(); ++i) {
      if (i > 0) elements.push_back(const_node(", "));
      for (auto& e : argument(required[i])) elements.push_back(std::move(e));
    }
    for (auto& e : optional_tail(0)) elements.push_back(std::move(e));
  } else {
    ordered_json branches = ordered_json::array({const_node("")});
    for (size_t i = 0; i < optional.size(); ++i) {
      ordered_json branch = argument(optional[i]);
      for (auto& e : optional_tail(i + 1)) branch.push_back(std::move(e));
      branches.push_back(sequence_node(std::move(branch)));
    }
    elements.push_back({{"type", "or"}, {"elements", std::move(branches)}});
  }
  ordered_json node = sequence_node(std::move(elements));
  // Quadratic in the optional properties when none is required.
  const size_t bytes = node.dump().size();
  if (bytes > 4 * limits.max_source_bytes)
    throw GrammarError(GrammarError::Kind::TooLarge,
                       fmt::format("function '{}': its python-style call grammar is {} bytes; at "
                                   "most {} are accepted (mark some arguments required)",
                                   function.substr(0, 64), bytes, 4 * limits.max_source_bytes));
  return node;
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
  return {GrammarKind::JsonSchema, schema_node(prepare_json_schema(schema, limits))};
}

GrammarSpec json_object_spec() {
  // Any object: additional properties of any JSON value.
  return {GrammarKind::JsonObject,
          schema_node({{"type", "object"}, {"additionalProperties", true}})};
}

int64_t max_counted_repetition(std::string_view s) {
  int64_t most = 0;
  bool in_class = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\\') {
      ++i;  // an escaped character is a literal
      continue;
    }
    if (in_class) {
      in_class = c != ']';
      continue;
    }
    if (c == '[') {
      in_class = true;
      continue;
    }
    if (c != '{') continue;
    // {m}, {m,}, {m,n}: every number counts (saturating; a huge one is over any limit).
    size_t j = i + 1;
    bool any = false;
    int64_t n = 0;
    for (; j < s.size() && ((s[j] >= '0' && s[j] <= '9') || s[j] == ',' || s[j] == ' '); ++j) {
      if (s[j] >= '0' && s[j] <= '9') {
        n = std::min<int64_t>(n * 10 + (s[j] - '0'), int64_t(1) << 40);
        any = true;
      } else {
        most = std::max(most, n);
        n = 0;
      }
    }
    if (any && j < s.size() && s[j] == '}') most = std::max(most, n);
  }
  return most;
}

void check_repetitions(const std::string& what, std::string_view text, const SpecLimits& limits) {
  const int64_t n = max_counted_repetition(text);
  if (n > limits.max_repetition)
    throw GrammarError(GrammarError::Kind::TooLarge,
                       fmt::format("the {} repeats something {} times ({{m,n}}); at most {} are "
                                   "accepted",
                                   what, n, limits.max_repetition));
}

GrammarSpec regex_spec(const std::string& pattern, const SpecLimits& limits) {
  check_size("regex", pattern.size(), limits);
  check_repetitions("regex", pattern, limits);
  if (pattern.empty()) throw GrammarError(GrammarError::Kind::Invalid, "the regex is empty");
  return {GrammarKind::Regex, {{"type", "regex"}, {"pattern", pattern}}};
}

GrammarSpec ebnf_spec(const std::string& grammar, const SpecLimits& limits) {
  check_size("grammar", grammar.size(), limits);
  check_repetitions("grammar", grammar, limits);
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
      params = prepare_json_schema(params, limits);
    } catch (const GrammarError& e) {
      throw GrammarError(e.kind(),
                         fmt::format("function '{}': {}", f.name.substr(0, 64), e.what()));
    }
    if (syntax.python) {
      tags.push_back({{"type", "tag"},
                      {"begin", syntax.call_begin + f.name + "("},
                      {"content", python_kwargs_node(f.name, params, limits)},
                      {"end", ")" + syntax.call_end}});
      continue;
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
