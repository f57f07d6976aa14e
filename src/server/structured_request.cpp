// Request fields -> OutputStructure. Field names and shapes follow OpenAI's
// chat completions reference (response_format, tools, tool_choice,
// parallel_tool_calls) and vLLM's extensions (structured_outputs, guided_*).
#include "server/structured_request.h"

#include <fmt/format.h>

#include "server/api_error.h"
#include "server/json_body.h"

namespace loom::server {

using json = nlohmann::ordered_json;
using structured::GrammarError;
using structured::GrammarSpec;

namespace {

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

// A GrammarError from a spec builder -> 400 naming the field.
template <class Fn>
GrammarSpec build(const std::string& param, Fn&& fn) {
  try {
    return fn();
  } catch (const GrammarError& e) {
    throw ApiError(400, fmt::format("{}: {}", param, e.what()), param);
  }
}

// A JSON Schema given as an object, or (vLLM accepts it) as a JSON string.
json schema_value(const json& v, const std::string& param, const structured::SpecLimits& limits) {
  if (v.is_object() || v.is_boolean()) return v;
  if (v.is_string()) {
    const auto& text = v.get_ref<const std::string&>();
    if (text.size() > limits.max_source_bytes)
      throw_bad_field(param, fmt::format("{}: the schema is {} bytes; at most {} are accepted",
                                         param, text.size(), limits.max_source_bytes));
    auto parsed = parse_json_text(text);
    if (parsed && (parsed->is_object() || parsed->is_boolean())) return std::move(*parsed);
  }
  throw_bad_field(param, fmt::format("'{}' must be a JSON Schema object", param));
}

std::vector<std::string> string_list(const json& v, const std::string& param) {
  if (!v.is_array()) throw_bad_field(param, fmt::format("'{}' must be a list of strings", param));
  std::vector<std::string> out;
  for (const auto& s : v) {
    if (!s.is_string())
      throw_bad_field(param, fmt::format("'{}' must be a list of strings", param));
    out.push_back(s.get<std::string>());
  }
  return out;
}

std::string string_field(const json& v, const std::string& param) {
  if (!v.is_string()) throw_bad_field(param, fmt::format("'{}' must be a string", param));
  return v.get<std::string>();
}

std::optional<GrammarSpec> parse_response_format(const json& rf,
                                                 const structured::SpecLimits& lim) {
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    throw_bad_field("response_format", "'response_format' must be an object with a 'type'");
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") return structured::json_object_spec();
  if (type == "json_schema") {
    const json* js = field(rf, "json_schema");
    if (!js || !js->is_object())
      throw_bad_field("response_format.json_schema",
                      "'response_format.json_schema' must be an object {name, schema, strict}");
    if (const json* name = field(*js, "name"); name && !name->is_string())
      throw_bad_field("response_format.json_schema.name", "'name' must be a string");
    if (const json* strict = field(*js, "strict"); strict && !strict->is_boolean())
      throw_bad_field("response_format.json_schema.strict", "'strict' must be a boolean");
    const json* schema = field(*js, "schema");
    // OpenAI: no schema means any JSON object.
    if (!schema) return structured::json_object_spec();
    const std::string param = "response_format.json_schema.schema";
    const json s = schema_value(*schema, param, lim);
    return build(param, [&] { return structured::json_schema_spec(s, lim); });
  }
  throw_bad_field("response_format.type",
                  fmt::format("unknown response_format type '{}' (expected text, json_object or "
                              "json_schema)",
                              type.substr(0, 64)));
}

// vLLM's structured_outputs object and guided_* fields: at most one kind.
std::optional<std::pair<GrammarSpec, std::string>> parse_guided(const json& body,
                                                                const structured::SpecLimits& lim) {
  std::vector<std::pair<GrammarSpec, std::string>> found;
  auto take = [&](const json& obj, const std::string& prefix, const char* json_key,
                  const char* regex_key, const char* choice_key, const char* grammar_key) {
    if (const json* v = field(obj, json_key)) {
      const std::string p = prefix + json_key;
      const json s = schema_value(*v, p, lim);
      found.emplace_back(build(p, [&] { return structured::json_schema_spec(s, lim); }), p);
    }
    if (const json* v = field(obj, regex_key)) {
      const std::string p = prefix + regex_key;
      const std::string r = string_field(*v, p);
      found.emplace_back(build(p, [&] { return structured::regex_spec(r, lim); }), p);
    }
    if (const json* v = field(obj, choice_key)) {
      const std::string p = prefix + choice_key;
      const auto choices = string_list(*v, p);
      found.emplace_back(build(p, [&] { return structured::choice_spec(choices, lim); }), p);
    }
    if (const json* v = field(obj, grammar_key)) {
      const std::string p = prefix + grammar_key;
      const std::string g = string_field(*v, p);
      found.emplace_back(build(p, [&] { return structured::ebnf_spec(g, lim); }), p);
    }
  };
  take(body, "", "guided_json", "guided_regex", "guided_choice", "guided_grammar");
  if (const json* so = field(body, "structured_outputs")) {
    if (!so->is_object())
      throw_bad_field("structured_outputs", "'structured_outputs' must be an object");
    take(*so, "structured_outputs.", "json", "regex", "choice", "grammar");
    if (const json* jo = field(*so, "json_object")) {
      if (!jo->is_boolean())
        throw_bad_field("structured_outputs.json_object", "'json_object' must be a boolean");
      if (jo->get<bool>()) found.emplace_back(structured::json_object_spec(), "structured_outputs");
    }
    for (const char* unsupported : {"structural_tag", "whitespace_pattern"})
      if (field(*so, unsupported))
        throw_bad_field(std::string("structured_outputs.") + unsupported,
                        fmt::format("'structured_outputs.{}' is not supported", unsupported));
  }
  if (field(body, "guided_whitespace_pattern"))
    throw_bad_field("guided_whitespace_pattern", "'guided_whitespace_pattern' is not supported");
  if (const json* backend = field(body, "guided_decoding_backend")) {
    const std::string b = string_field(*backend, "guided_decoding_backend");
    if (b != "xgrammar" && b != "auto")
      throw_bad_field("guided_decoding_backend",
                      fmt::format("guided_decoding_backend '{}' is not available (this server "
                                  "uses xgrammar)",
                                  b.substr(0, 64)));
  }
  if (found.size() > 1)
    throw_bad_field(found[1].second, fmt::format("'{}' and '{}' cannot be combined: give one "
                                                 "output constraint",
                                                 found[0].second, found[1].second));
  if (found.empty()) return std::nullopt;
  return found.front();
}

bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

ToolsRequest parse_tools(const json& body, const structured::SpecLimits& lim) {
  ToolsRequest t;
  if (const json* tools = field(body, "tools")) {
    if (!tools->is_array()) throw_bad_field("tools", "'tools' must be a list");
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& tool = (*tools)[i];
      const std::string where = fmt::format("tools[{}]", i);
      if (!tool.is_object() || !tool.contains("type") || tool["type"] != "function")
        throw_bad_field(where + ".type",
                        "each tool must be {\"type\": \"function\", \"function\": {...}}");
      const json* fn = field(tool, "function");
      if (!fn || !fn->is_object())
        throw_bad_field(where + ".function", "'function' must be an object");
      const json* name = field(*fn, "name");
      if (!name || !name->is_string() || !valid_function_name(name->get<std::string>()))
        throw_bad_field(where + ".function.name",
                        "'name' must be 1-64 characters of a-z, A-Z, 0-9, _ and -");
      structured::FunctionSchema f;
      f.name = name->get<std::string>();
      for (const auto& other : t.functions)
        if (other.name == f.name)
          throw_bad_field(where + ".function.name",
                          fmt::format("two tools are named '{}'", f.name));
      if (const json* params = field(*fn, "parameters")) {
        const std::string p = where + ".function.parameters";
        if (!params->is_object()) throw_bad_field(p, "'parameters' must be a JSON Schema object");
        f.parameters = *params;
      }
      t.functions.push_back(std::move(f));
    }
  }
  if (const json* tc = field(body, "tool_choice")) {
    if (tc->is_string()) {
      const std::string c = tc->get<std::string>();
      if (c == "auto")
        t.choice = ToolsRequest::Choice::Auto;
      else if (c == "none")
        t.choice = ToolsRequest::Choice::None;
      else if (c == "required")
        t.choice = ToolsRequest::Choice::Required;
      else
        throw_bad_field("tool_choice", fmt::format("unknown tool_choice '{}' (expected none, auto, "
                                                   "required or {{\"type\": \"function\", "
                                                   "\"function\": {{\"name\": ...}}}})",
                                                   c.substr(0, 64)));
    } else if (tc->is_object()) {
      const json* fn = field(*tc, "function");
      if (!tc->contains("type") || (*tc)["type"] != "function" || !fn || !fn->is_object() ||
          !fn->contains("name") || !(*fn)["name"].is_string())
        throw_bad_field("tool_choice",
                        "a named tool_choice is {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}");
      t.choice = ToolsRequest::Choice::Named;
      t.named = (*fn)["name"].get<std::string>();
      bool known = false;
      for (const auto& f : t.functions) known |= f.name == t.named;
      if (!known)
        throw_bad_field(
            "tool_choice",
            fmt::format("tool_choice names '{}', which is not in 'tools'", t.named.substr(0, 64)));
    } else {
      throw_bad_field("tool_choice", "'tool_choice' must be a string or an object");
    }
    if (t.functions.empty() && t.choice != ToolsRequest::Choice::None)
      throw_bad_field("tool_choice", "'tool_choice' needs 'tools'");
  }
  if (const json* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean())
      throw_bad_field("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    t.parallel = p->get<bool>();
  }
  // Forced calls follow the schemas: check them now, naming the tool. (With
  // auto, the schemas are only shown to the model, never enforced.)
  for (size_t i = 0; i < t.functions.size() && t.forced(); ++i)
    if (!t.functions[i].parameters.is_null() &&
        (t.choice == ToolsRequest::Choice::Required || t.functions[i].name == t.named)) {
      const std::string p = fmt::format("tools[{}].function.parameters", i);
      build(p, [&] { return structured::json_schema_spec(t.functions[i].parameters, lim); });
    }
  return t;
}

}  // namespace

OutputStructure parse_output_structure(const json& body, bool chat,
                                       const structured::SpecLimits& limits) {
  OutputStructure out;
  std::optional<GrammarSpec> rf;
  if (const json* v = field(body, "response_format")) rf = parse_response_format(*v, limits);
  auto guided = parse_guided(body, limits);
  if (rf && guided)
    throw_bad_field(guided->second,
                    fmt::format("'response_format' and '{}' cannot be combined", guided->second));
  if (rf) {
    out.grammar = std::move(rf);
    out.param = "response_format";
  } else if (guided) {
    out.grammar = std::move(guided->first);
    out.param = guided->second;
  }
  if (chat) {
    out.tools = parse_tools(body, limits);
  } else {
    for (const char* f : {"tools", "tool_choice"})
      if (field(body, f)) throw_bad_field(f, fmt::format("'{}' needs /v1/chat/completions", f));
  }
  if (out.tools.forced() && out.grammar)
    throw_bad_field("tool_choice", fmt::format("a required or named tool_choice cannot be combined "
                                               "with '{}'",
                                               out.param));
  return out;
}

std::optional<GrammarSpec> output_grammar(const OutputStructure& s, const ToolCallFormat& format,
                                          const std::optional<ReasoningFormat>& reasoning,
                                          bool reasoning_started) {
  std::optional<GrammarSpec> g = s.grammar;
  if (s.tools.forced()) {
    if (!format.syntax)
      throw ApiError(400,
                     fmt::format("tool_choice 'required' or a named function is not supported "
                                 "for this model's tool-call format ({})",
                                 format.name),
                     "tool_choice");
    std::vector<structured::FunctionSchema> fns;
    for (const auto& f : s.tools.functions)
      if (s.tools.choice != ToolsRequest::Choice::Named || f.name == s.tools.named)
        fns.push_back(f);
    const bool parallel = s.tools.choice == ToolsRequest::Choice::Required && s.tools.parallel;
    try {
      g = structured::tool_calls_spec(fns, *format.syntax, parallel);
    } catch (const GrammarError& e) {
      throw ApiError(400, e.what(), "tools");
    }
  }
  if (g && reasoning)
    g = structured::after_reasoning(*g, reasoning->start, reasoning->end, reasoning_started);
  return g;
}

}  // namespace loom::server
