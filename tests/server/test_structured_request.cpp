// Request parsing of response_format, structured_outputs / guided_*, tools,
// tool_choice and parallel_tool_calls: accepted shapes give the right grammar
// kind; every bad value is a 400 naming its field.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/structured_request.h"

using namespace loom::server;
using json = nlohmann::ordered_json;
using loom::structured::GrammarKind;

namespace {

std::string param_of(const json& body, bool chat = true) {
  try {
    parse_output_structure(body, chat);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param();
  }
  return "<accepted>";
}

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "f",
  "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}},
  {"type": "function", "function": {"name": "g"}}])");

}  // namespace

TEST(StructuredRequest, ResponseFormats) {
  EXPECT_FALSE(parse_output_structure(json{{"response_format", {{"type", "text"}}}}, true).grammar);
  auto s = parse_output_structure(json{{"response_format", {{"type", "json_object"}}}}, false);
  ASSERT_TRUE(s.grammar);
  EXPECT_EQ(s.grammar->kind, GrammarKind::JsonObject);
  s = parse_output_structure(json::parse(R"({"response_format": {"type": "json_schema",
      "json_schema": {"name": "x", "strict": true, "schema": {"type": "object", "properties": {}}}}})"),
                             true);
  EXPECT_EQ(s.grammar->kind, GrammarKind::JsonSchema);
  EXPECT_EQ(s.param, "response_format");
}

TEST(StructuredRequest, GuidedAndStructuredOutputs) {
  EXPECT_EQ(parse_output_structure(json{{"guided_regex", "[a-z]+"}}, false).grammar->kind,
            GrammarKind::Regex);
  EXPECT_EQ(parse_output_structure(json{{"guided_choice", {"a", "b"}}}, false).grammar->kind,
            GrammarKind::Choice);
  EXPECT_EQ(parse_output_structure(json{{"guided_grammar", "root ::= \"x\""}}, false).grammar->kind,
            GrammarKind::Ebnf);
  EXPECT_EQ(
      parse_output_structure(json{{"guided_json", "{\"type\": \"integer\"}"}}, false).grammar->kind,
      GrammarKind::JsonSchema);
  auto s = parse_output_structure(json{{"structured_outputs", {{"choice", {"x"}}}}}, false);
  EXPECT_EQ(s.param, "structured_outputs.choice");
}

TEST(StructuredRequest, RejectionsNameTheField) {
  EXPECT_EQ(param_of(json{{"response_format", {{"type", "xml"}}}}), "response_format.type");
  EXPECT_EQ(param_of(json{{"response_format", "json"}}), "response_format");
  EXPECT_EQ(param_of(json::parse(R"({"response_format": {"type": "json_schema", "json_schema":
      {"schema": {"type": "number", "multipleOf": 0.5}}}})")),
            "response_format.json_schema.schema");
  EXPECT_EQ(param_of(json{{"guided_regex", 5}}), "guided_regex");
  EXPECT_EQ(param_of(json{{"guided_choice", json::array()}}), "guided_choice");
  EXPECT_EQ(param_of(json{{"guided_regex", "a"}, {"guided_choice", {"b"}}}), "guided_choice");
  EXPECT_EQ(param_of(json{{"response_format", {{"type", "json_object"}}}, {"guided_regex", "a"}}),
            "guided_regex");
  EXPECT_EQ(param_of(json{{"guided_decoding_backend", "outlines"}}), "guided_decoding_backend");
  EXPECT_EQ(param_of(json{{"guided_whitespace_pattern", " "}}), "guided_whitespace_pattern");
  EXPECT_EQ(param_of(json{{"structured_outputs", {{"structural_tag", "x"}}}}),
            "structured_outputs.structural_tag");
}

TEST(StructuredRequest, Tools) {
  auto s = parse_output_structure(json{{"tools", kTools}}, true);
  EXPECT_TRUE(s.tools.active());
  EXPECT_FALSE(s.tools.forced());
  EXPECT_EQ(s.tools.functions.size(), 2u);
  s = parse_output_structure(
      json{{"tools", kTools}, {"tool_choice", "required"}, {"parallel_tool_calls", false}}, true);
  EXPECT_TRUE(s.tools.forced());
  EXPECT_FALSE(s.tools.parallel);
  s = parse_output_structure(
      json{{"tools", kTools},
           {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}},
      true);
  EXPECT_EQ(s.tools.named, "g");
  EXPECT_FALSE(parse_output_structure(json{{"tools", kTools}, {"tool_choice", "none"}}, true)
                   .tools.active());

  EXPECT_EQ(param_of(json{{"tools", kTools}, {"tool_choice", "bogus"}}), "tool_choice");
  EXPECT_EQ(param_of(json{{"tools", kTools},
                          {"tool_choice", {{"type", "function"}, {"function", {{"name", "h"}}}}}}),
            "tool_choice");
  EXPECT_EQ(param_of(json{{"tool_choice", "required"}}), "tool_choice");
  EXPECT_EQ(param_of(json{{"tools", kTools}, {"parallel_tool_calls", "yes"}}),
            "parallel_tool_calls");
  EXPECT_EQ(param_of(json{{"tools", {{{"type", "retrieval"}}}}}), "tools[0].type");
  EXPECT_EQ(
      param_of(json{{"tools", {{{"type", "function"}, {"function", {{"name", "bad name"}}}}}}}),
      "tools[0].function.name");
  EXPECT_EQ(
      param_of(json::parse(R"({"tool_choice": "required", "tools": [{"type": "function", "function":
      {"name": "f", "parameters": {"type": "object", "properties": {"a": {"not": {}}}}}}]})")),
      "tools[0].function.parameters");
  // With auto the schema is not enforced, so not checked.
  EXPECT_EQ(param_of(json::parse(R"({"tools": [{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"a": {"not": {}}}}}}]})")),
            "<accepted>");
  EXPECT_EQ(param_of(json{{"tools", kTools}}, false), "tools");
  EXPECT_EQ(param_of(json{{"tools", kTools}, {"tool_choice", "required"}, {"guided_regex", "a"}}),
            "tool_choice");
}

TEST(StructuredRequest, OutputGrammar) {
  auto s = parse_output_structure(json{{"tools", kTools}, {"tool_choice", "required"}}, true);
  auto g = output_grammar(s, *tool_call_format("hermes"), std::nullopt, false);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->kind, GrammarKind::ToolCalls);
  EXPECT_NE(g->key().find("<tool_call>"), std::string::npos);
  g = output_grammar(s, *tool_call_format("hermes"), reasoning_format("qwen3"), false);
  EXPECT_TRUE(g->after_reasoning);
  g = output_grammar(s, *tool_call_format("pythonic"), std::nullopt, false);
  ASSERT_TRUE(g);
  EXPECT_NE(g->key().find("\"f(\""), std::string::npos) << g->key();
  EXPECT_FALSE(output_grammar(parse_output_structure(json{{"tools", kTools}}, true),
                              *tool_call_format("hermes"), std::nullopt, false));
}
