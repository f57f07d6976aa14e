// Forced tool calls (tool_choice required or named) in every format that has a
// grammar: random walks over the tokens the compiled grammar allows (a byte
// vocabulary, so any text the grammar accepts can be walked) must end, and
// the format's own parser must read each walk back as calls to the allowed
// functions with arguments that follow their schema, in JSON formats and in
// Python-style ones (pythonic, gemma_tool_code).
#include <gtest/gtest.h>

#include <random>

#include "server/api_error.h"
#include "server/structured_request.h"
#include "server/tool_call_parser.h"
#include "structured/grammar_compiler.h"
#include "tokenizer/tokenizer.h"

using namespace loom;
using namespace loom::server;
using json = nlohmann::ordered_json;

namespace {

// One token per printable ASCII byte and newline, then eos.
class ByteTokenizer : public Tokenizer {
 public:
  ByteTokenizer() {
    for (int c = 32; c < 127; ++c) vocab_.emplace_back(1, char(c));
    vocab_.emplace_back("\n");
    vocab_.push_back("</s>");
    special_.eos = int32_t(vocab_.size()) - 1;
    special_.eos_ids = {*special_.eos};
  }
  std::vector<int32_t> encode(std::string_view, bool, bool) const override { return {}; }
  std::string token_bytes(int32_t id, bool) const override {
    return is_special(id) ? "" : vocab_[size_t(id)];
  }
  std::string decode(const std::vector<int32_t>& ids, bool) const override {
    std::string s;
    for (int32_t id : ids) s += token_bytes(id, false);
    return s;
  }
  int32_t vocab_size() const override { return int32_t(vocab_.size()); }
  bool is_special(int32_t id) const override { return id == *special_.eos; }
  std::optional<int32_t> token_id(std::string_view) const override { return std::nullopt; }
  std::string_view token_text(int32_t id) const override { return vocab_[size_t(id)]; }

 private:
  std::vector<std::string> vocab_;
};

const json kWeather = json::parse(R"({"type": "function", "function": {"name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 6},
  "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false}}})");
const json kTime = json::parse(R"({"type": "function", "function": {"name": "get_time",
  "parameters": {"type": "object", "properties": {"tz": {"type": "integer", "minimum": -12,
  "maximum": 14}}, "required": ["tz"], "additionalProperties": false}}})");

// No required argument: a call may name any subset, in schema order.
const json kNote = json::parse(R"({"type": "function", "function": {"name": "note",
  "parameters": {"type": "object", "properties": {"text": {"type": "string", "maxLength": 8},
  "done": {"type": "boolean"}, "n": {"type": ["integer", "null"], "minimum": -99999,
  "maximum": 99999}}}}})");

// A random walk of the constraint to its end; "" if it did not end.
std::string walk(TokenConstraint& c, const ByteTokenizer& tok, std::mt19937& rng) {
  std::string text;
  std::vector<uint32_t> words(size_t((tok.vocab_size() + 31) / 32));
  for (int step = 0; step < 4000 && !c.is_terminated(); ++step) {
    std::fill(words.begin(), words.end(), 0u);
    std::vector<int32_t> allowed;
    const bool masked = c.fill_next_token_bitmask(words);
    for (int32_t t = 0; t < tok.vocab_size(); ++t)
      if (!masked || (words[size_t(t) / 32] >> (t % 32)) & 1u) allowed.push_back(t);
    if (allowed.empty()) return "";
    // Ending is one choice among many: favour it a little so walks stay short.
    int32_t t = allowed[rng() % allowed.size()];
    for (int32_t a : allowed)
      if (tok.is_special(a) && rng() % 4 == 0) t = a;
    EXPECT_TRUE(c.accept_token(t));
    text += tok.token_bytes(t, false);
  }
  return c.is_terminated() ? text : "";
}

void check_args(const std::string& name, const json& args) {
  ASSERT_TRUE(args.is_object()) << args;
  if (name == "get_weather") {
    ASSERT_TRUE(args.contains("city") && args["city"].is_string()) << args;
    EXPECT_LE(args["city"].get<std::string>().size(), 6u);
    ASSERT_TRUE(args.contains("unit")) << args;
    EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << args;
    EXPECT_EQ(args.size(), 2u) << args;
  } else if (name == "note") {
    for (const auto& [key, value] : args.items()) {
      if (key == "text") {
        ASSERT_TRUE(value.is_string()) << args;
        // Escapes (\uXXXX among them) read back as one character each.
        EXPECT_LE(value.get<std::string>().size(), 8u) << args;
      } else if (key == "done") {
        EXPECT_TRUE(value.is_boolean()) << args;
      } else {
        ASSERT_EQ(key, "n") << args;
        EXPECT_TRUE(value.is_null() || value.is_number_integer()) << args;
      }
    }
  } else {
    ASSERT_EQ(name, "get_time");
    ASSERT_TRUE(args.contains("tz") && args["tz"].is_number_integer()) << args;
    EXPECT_GE(args["tz"].get<int>(), -12);
    EXPECT_LE(args["tz"].get<int>(), 14);
    EXPECT_EQ(args.size(), 1u) << args;
  }
}

void run_format(const std::string& format, const json& tool_choice, bool parallel,
                const std::string& only) {
  if (!structured::GrammarCompiler::available()) GTEST_SKIP() << "built without xgrammar";
  ByteTokenizer tok;
  structured::GrammarCompiler compiler(tok, tok.vocab_size());
  const json body = {{"tools", {kWeather, kTime, kNote}},
                     {"tool_choice", tool_choice},
                     {"parallel_tool_calls", parallel}};
  const OutputStructure s = parse_output_structure(body, true);
  const ToolCallFormat f = *tool_call_format(format);
  const auto spec = output_grammar(s, f, std::nullopt, false);
  ASSERT_TRUE(spec.has_value());
  auto factory = compiler.compile(*spec);
  std::mt19937 rng(17);
  int multi = 0;
  for (int i = 0; i < 20; ++i) {
    auto c = factory->make();
    const std::string text = walk(*c, tok, rng);
    ASSERT_FALSE(text.empty()) << format << ": the walk did not end";
    // Parsed whole and byte by byte.
    for (int how = 0; how < 2; ++how) {
      ToolCallParser p(f);
      std::string content;
      std::vector<std::pair<std::string, std::string>> calls;
      auto take = [&](const ParsedDelta& d) {
        content += d.content;
        for (const auto& t : d.tool_calls) {
          if (t.index >= int32_t(calls.size())) calls.push_back({t.name, ""});
          calls[size_t(t.index)].second += t.arguments;
        }
      };
      if (how == 0) {
        take(p.push(text));
      } else {
        for (char ch : text) take(p.push(std::string(1, ch)));
      }
      take(p.finish());
      EXPECT_EQ(content.find_first_not_of(" \n"), std::string::npos)
          << format << ": content " << content << " from " << text;
      ASSERT_GE(calls.size(), 1u) << format << ": " << text;
      if (!parallel) {
        EXPECT_EQ(calls.size(), 1u) << text;
      }
      multi += calls.size() > 1;
      for (const auto& [name, args] : calls) {
        if (!only.empty()) {
          EXPECT_EQ(name, only);
        }
        const json a = json::parse(args, nullptr, false);
        ASSERT_FALSE(a.is_discarded()) << format << ": arguments " << args << " of " << text;
        check_args(name, a);
      }
    }
  }
  if (parallel) {
    EXPECT_GT(multi, 0) << format << ": parallel calls never walked";
  }
}

}  // namespace

TEST(ForcedToolCalls, EveryGrammarFormatParsesBack) {
  const json named = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  for (const std::string format :
       {"hermes", "llama3_json", "mistral", "pythonic", "gemma_tool_code"}) {
    SCOPED_TRACE(format);
    run_format(format, "required", true, "");
    run_format(format, "required", false, "");
    run_format(format, named, false, "get_time");  // a named choice is one call
  }
}

TEST(ForcedToolCalls, PythonStyleNeedsAnObjectOfIdentifiers) {
  const json bad_name = json::parse(R"({"type": "function", "function": {"name": "f",
    "parameters": {"type": "object", "properties": {"a-b": {"type": "string"}}}}})");
  const json not_object = json::parse(R"({"type": "function", "function": {"name": "f",
    "parameters": {"anyOf": [{"type": "object"}, {"type": "object"}]}}})");
  for (const json& tool : {bad_name, not_object}) {
    const OutputStructure s =
        parse_output_structure(json{{"tools", {tool}}, {"tool_choice", "required"}}, true);
    EXPECT_NO_THROW(output_grammar(s, *tool_call_format("hermes"), std::nullopt, false));
    try {
      output_grammar(s, *tool_call_format("pythonic"), std::nullopt, false);
      ADD_FAILURE() << tool << " accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_NE(std::string(e.what()).find("python-style"), std::string::npos) << e.what();
    }
  }
}
