// The tool-call and reasoning parsers: every format, the output fed whole, split
// at every byte boundary, and byte by byte, must give the same content and
// calls; a call's id and name come before its arguments; no call text leaks
// into content.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/output_parser.h"
#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"

using namespace loom::server;
using json = nlohmann::json;

namespace {

struct Result {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

void take(const ParsedDelta& d, Result& r, std::vector<bool>& named) {
  r.content += d.content;
  for (const auto& t : d.tool_calls) {
    if (t.index >= int32_t(r.calls.size())) {
      ASSERT_EQ(t.index, int32_t(r.calls.size())) << "indexes go up by one";
      ASSERT_FALSE(t.id.empty()) << "the first delta of a call carries its id";
      ASSERT_FALSE(t.name.empty()) << "the first delta of a call carries its name";
      EXPECT_EQ(t.id.rfind("call_", 0), 0u);
      r.calls.push_back({t.name, ""});
      named.push_back(true);
    } else {
      EXPECT_TRUE(t.id.empty() && t.name.empty()) << "id and name come once";
    }
    r.calls[size_t(t.index)].second += t.arguments;
  }
}

Result run(const std::string& format, const std::vector<std::string>& pieces) {
  ToolCallParser p(*tool_call_format(format));
  Result r;
  std::vector<bool> named;
  for (const auto& piece : pieces) take(p.push(piece), r, named);
  take(p.finish(), r, named);
  return r;
}

// Whole, every two-way split, and byte by byte agree with `expect`.
void check(const std::string& format, const std::string& text, const std::string& content,
           const std::vector<std::pair<std::string, json>>& calls) {
  auto same = [&](const Result& r, const std::string& how) {
    EXPECT_EQ(r.content, content) << format << " " << how;
    ASSERT_EQ(r.calls.size(), calls.size()) << format << " " << how;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(r.calls[i].first, calls[i].first) << how;
      EXPECT_EQ(json::parse(r.calls[i].second), calls[i].second)
          << how << ": " << r.calls[i].second;
    }
  };
  same(run(format, {text}), "whole");
  for (size_t cut = 0; cut <= text.size(); ++cut)
    same(run(format, {text.substr(0, cut), text.substr(cut)}), "split at " + std::to_string(cut));
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  same(run(format, bytes), "byte by byte");
}

}  // namespace

TEST(ToolCallParser, HermesOneCall) {
  check("hermes",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": [1, "
        "2]}}\n"
        "</tool_call>",
        "", {{"get_weather", {{"city", "Paris"}, {"n", {1, 2}}}}});
}

TEST(ToolCallParser, HermesTextThenTwoCalls) {
  check("hermes",
        "Let me look.<tool_call>\n{\"name\": \"a\", \"arguments\": {\"s\": \"}<tool_call>\\\"\"}}\n"
        "</tool_call>\n<tool_call>\n{\"arguments\": {}, \"name\": \"b\"}\n</tool_call>",
        "Let me look.\n", {{"a", {{"s", "}<tool_call>\""}}}, {"b", json::object()}});
}

TEST(ToolCallParser, HermesPlainTextWithAngleBrackets) {
  check("hermes", "a < b and <tool is not a call <", "a < b and <tool is not a call <", {});
}

TEST(ToolCallParser, HermesUnfinishedCallIsContent) {
  // Cut before the name: nothing was reported, so the text stays content.
  check("hermes", "<tool_call>\n{\"na", "<tool_call>\n{\"na", {});
  check("mistral", "[TOOL_CALLS] no list", "[TOOL_CALLS] no list", {});
}

TEST(ToolCallParser, Llama3Json) {
  check("llama3_json",
        "{\"name\": \"f\", \"parameters\": {\"x\": 1}}; {\"name\": \"g\", \"parameters\": {}}", "",
        {{"f", {{"x", 1}}}, {"g", json::object()}});
  check("llama3_json", "The answer is {1}.", "The answer is {1}.", {});
  check("llama3_json", "{\"answer\": 42}", "{\"answer\": 42}", {});
}

TEST(ToolCallParser, Mistral) {
  check("mistral",
        "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"q\": \"a,b]\"}}, {\"name\": \"g\", "
        "\"arguments\": {}}]",
        "", {{"f", {{"q", "a,b]"}}}, {"g", json::object()}});
}

TEST(ToolCallParser, Pythonic) {
  check("pythonic", "[get_weather(city='Paris', days=3, ok=True), now()]", "",
        {{"get_weather", {{"city", "Paris"}, {"days", 3}, {"ok", true}}}, {"now", json::object()}});
  check("pythonic", "[not a call]", "[not a call]", {});
  check("pythonic", "Sure: [f(x=1)]", "Sure: [f(x=1)]", {});
}

TEST(ToolCallParser, StringArgumentsAreDecoded) {
  check("hermes", "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", "",
        {{"f", {{"a", 1}}}});
}

TEST(ToolCallParser, DetectsFormatFromTemplate) {
  EXPECT_EQ(detect_tool_call_format("{{ '<tool_call>' }}").name, "hermes");
  EXPECT_EQ(detect_tool_call_format("[TOOL_CALLS] {{ x }}").name, "mistral");
  EXPECT_EQ(detect_tool_call_format("<|python_tag|>").name, "llama3_json");
  EXPECT_EQ(detect_tool_call_format("<start_of_turn>user").name, "pythonic");
  EXPECT_EQ(detect_tool_call_format("").name, "hermes");
}

namespace {
std::pair<std::string, std::string> reason(const std::vector<std::string>& pieces, bool started) {
  ReasoningParser p(*reasoning_format("qwen3"), started);
  std::string r, c;
  for (const auto& piece : pieces) {
    auto d = p.push(piece);
    r += d.reasoning;
    c += d.content;
  }
  auto d = p.finish();
  return {r + d.reasoning, c + d.content};
}
}  // namespace

TEST(ReasoningParser, SplitsAtEveryBoundary) {
  const std::string text = "<think>\nx < y </thin k></think>\n\nThe answer.";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    auto [r, c] = reason({text.substr(0, cut), text.substr(cut)}, false);
    EXPECT_EQ(r, "\nx < y </thin k>") << cut;
    EXPECT_EQ(c, "The answer.") << cut;
  }
  EXPECT_EQ(reason({"no reasoning here"}, false).second, "no reasoning here");
  EXPECT_EQ(reason({"inside</think>out"}, true),
            std::make_pair(std::string("inside"), std::string("out")));
  EXPECT_EQ(reason({"<thi"}, false).second, "<thi");
}

TEST(OutputParser, ReasoningThenToolCall) {
  OutputParser p(reasoning_format("qwen3"), false, tool_call_format("hermes"));
  const std::string text =
      "<think>call it</think>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": "
      "1}}\n</tool_call>";
  for (char ch : text) p.push(std::string(1, ch));
  p.finish();
  const json m = p.message();
  EXPECT_EQ(m["reasoning_content"], "call it");
  EXPECT_TRUE(m["content"].is_null());
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"a", 1}}));
}
