// The checks of strict_fields.h. Enum values are OpenAI's as of its API
// reference; reasoning_effort is handed to the chat template as a variable
// (openai_request.cpp), as vLLM does, so templates that read it see it.
#include "server/strict_fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <string>

#include "server/api_error.h"

namespace loom::server {

using json = nlohmann::ordered_json;

namespace {

const json* present(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::string one_of(std::initializer_list<const char*> values) {
  std::string out;
  for (const char* v : values) out += fmt::format("{}'{}'", out.empty() ? "" : ", ", v);
  return out;
}

// A string field whose value must be one of `values`.
void check_enum(const json& body, const char* name, std::initializer_list<const char*> values) {
  const json* v = present(body, name);
  if (!v) return;
  if (!v->is_string()) throw_bad_field(name, fmt::format("'{}' must be a string", name));
  const auto& s = v->get_ref<const std::string&>();
  if (std::none_of(values.begin(), values.end(), [&](const char* x) { return s == x; }))
    throw_bad_field(name, fmt::format("'{}' must be one of {}; got '{}'", name, one_of(values),
                                      s.substr(0, 64)));
}

void check_response_format(const json& body) {
  const json* rf = present(body, "response_format");
  if (!rf) return;
  if (!rf->is_object() || !rf->contains("type"))
    throw_bad_field("response_format", "'response_format' must be an object with a 'type'");
  const json& type = (*rf)["type"];
  const auto known = {"text", "json_object", "json_schema", "structural_tag"};
  if (!type.is_string() || std::none_of(known.begin(), known.end(), [&](const char* x) {
        return type.get_ref<const std::string&>() == x;
      }))
    throw_bad_field("response_format",
                    fmt::format("'response_format.type' must be one of {}; got {}", one_of(known),
                                type.dump().substr(0, 64)));
}

void check_tool_choice(const json& body) {
  const json* tc = present(body, "tool_choice");
  if (!tc) return;
  if (tc->is_string()) {
    check_enum(body, "tool_choice", {"none", "auto", "required"});
    return;
  }
  const bool named = tc->is_object() && tc->value("type", json()) == "function" &&
                     tc->contains("function") && (*tc)["function"].is_object() &&
                     (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string();
  if (!named)
    throw_bad_field("tool_choice",
                    "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", "
                    "\"function\": {\"name\": ...}}");
}

}  // namespace

void check_strict_fields(Endpoint endpoint, const json& body) {
  if (!body.is_object()) return;  // the parser reports that
  if (endpoint == Endpoint::Completions) {
    if (const json* s = present(body, "suffix")) {
      if (!s->is_string()) throw_bad_field("suffix", "'suffix' must be a string");
      if (!s->get_ref<const std::string&>().empty())
        throw_bad_field("suffix", "'suffix' (insertion after the completion) is not supported");
    }
    if (const json* b = present(body, "best_of")) {
      const json* n = present(body, "n");
      const int64_t want = n && n->is_number_integer() ? n->get<int64_t>() : 1;
      if (!b->is_number_integer() || b->get<int64_t>() < 1)
        throw_bad_field("best_of", "'best_of' must be an integer >= 1");
      if (b->get<int64_t>() < want)
        throw_bad_field("best_of", fmt::format("'best_of' ({}) must be at least n ({})",
                                               b->get<int64_t>(), want));
      if (b->get<int64_t>() > want)
        throw_bad_field("best_of", fmt::format("'best_of' > n is not supported: loom returns every "
                                               "candidate it generates (ask for n = {} instead)",
                                               b->get<int64_t>()));
    }
  }
  if (endpoint == Endpoint::ChatCompletions) {
    check_enum(body, "reasoning_effort", {"none", "minimal", "low", "medium", "high"});
    check_tool_choice(body);
  }
  check_response_format(body);
  check_enum(body, "service_tier", {"auto", "default", "flex", "scale", "priority"});
}

}  // namespace loom::server
