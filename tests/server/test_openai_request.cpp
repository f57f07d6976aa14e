// OpenAI request parsing: every field, its type and range checks, the bounds
// a client can make large, and the error's status and param.
#include <gtest/gtest.h>

#include <string>

#include "server/api_error.h"
#include "server/json_body.h"
#include "server/openai_request.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

using namespace loom;
using namespace loom::server;
using nlohmann::json;

namespace {

const Tokenizer& tokenizer() {
  static auto tok = load_tokenizer_hf(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/tokenizer/qwen2");
  return *tok;
}

const ChatFormatter& chat() {
  static ChatFormatter f(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "", "<|im_end|>");
  return f;
}

ModelContext model_ctx(int32_t max_len = 512) {
  ModelContext m;
  m.name = "test-model";
  m.tokenizer = &tokenizer();
  m.chat = &chat();
  m.max_model_len = max_len;
  m.vocab_size = tokenizer().vocab_size();
  return m;
}

GenerationRequest completion(const json& body, const RequestLimits& limits = {}) {
  return parse_completion_request(body.dump(), model_ctx(), limits);
}
GenerationRequest chat_request(const json& body, const RequestLimits& limits = {}) {
  return parse_chat_request(body.dump(), model_ctx(), limits);
}

// Runs fn expecting an ApiError; returns it.
template <class F>
ApiError expect_error(F fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no ApiError thrown";
  return ApiError(0, "");
}

void expect_bad(const json& body, const std::string& param, int status = 400, bool chat = false) {
  SCOPED_TRACE(body.dump().substr(0, 200));
  ApiError e = expect_error([&] { chat ? chat_request(body) : completion(body); });
  EXPECT_EQ(e.status(), status) << e.what();
  EXPECT_EQ(e.param(), param) << e.what();
}

}  // namespace

TEST(OpenAiRequest, CompletionDefaults) {
  auto r = completion({{"model", "test-model"}, {"prompt", "Hello world"}});
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0], tokenizer().encode("Hello world", true, true));
  EXPECT_EQ(r.params.max_tokens, 16);
  EXPECT_EQ(r.params.n, 1);
  EXPECT_FLOAT_EQ(r.params.temperature, 1.0f);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.logprobs);
  EXPECT_EQ(r.model, "test-model");
}

TEST(OpenAiRequest, EveryField) {
  json body = {{"model", "test-model"},   {"prompt", "abc"},        {"max_tokens", 7},
               {"temperature", 0.5},      {"top_p", 0.9},           {"top_k", 40},
               {"min_p", 0.05},           {"n", 3},                 {"stop", {"x", "yz"}},
               {"seed", 1234},            {"presence_penalty", 0.5}, {"frequency_penalty", -0.5},
               {"repetition_penalty", 1.1}, {"logit_bias", {{"15", 5}, {"16", -100}}},
               {"logprobs", 2},           {"echo", false},          {"ignore_eos", true},
               {"min_tokens", 3},         {"user", "u1"},           {"priority", -5},
               {"stream", true},          {"stream_options", {{"include_usage", true}}},
               {"some_unknown_field", {1, 2, 3}}};
  auto r = completion(body);
  const auto& p = r.params;
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_FLOAT_EQ(p.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_EQ(p.n, 3);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(p.seed, 1234u);
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.1f);
  EXPECT_EQ(p.logit_bias.size(), 2u);
  EXPECT_FLOAT_EQ(p.logit_bias.at(16), -100.0f);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(p.logprobs, 2);
  EXPECT_FALSE(r.echo);
  EXPECT_TRUE(completion({{"prompt", "abc"}, {"echo", true}}).echo);  // echo + logprobs: strict_fields
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.min_tokens, 3);
  EXPECT_EQ(r.user, "u1");
  EXPECT_EQ(r.priority, -5);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.num_choices(), 3);
}

TEST(OpenAiRequest, PromptForms) {
  auto a = completion({{"prompt", {"one", "two words"}}, {"n", 2}});
  EXPECT_EQ(a.prompts.size(), 2u);
  EXPECT_EQ(a.num_choices(), 4);
  EXPECT_EQ(a.prompt_texts[1], "two words");
  auto b = completion({{"prompt", {1, 2, 3}}});
  ASSERT_EQ(b.prompts.size(), 1u);
  EXPECT_EQ(b.prompts[0], (std::vector<int32_t>{1, 2, 3}));
  auto c = completion({{"prompt", {{1, 2}, {3}}}});
  ASSERT_EQ(c.prompts.size(), 2u);
  EXPECT_EQ(c.prompts[1], (std::vector<int32_t>{3}));
  EXPECT_EQ(c.prompt_tokens(), 3);
  // null counts as absent
  auto d = completion({{"prompt", "x"}, {"temperature", nullptr}, {"stop", nullptr}});
  EXPECT_FLOAT_EQ(d.params.temperature, 1.0f);
}

TEST(OpenAiRequest, PromptErrors) {
  expect_bad(json::object(), "prompt");
  expect_bad({{"prompt", 5}}, "prompt");
  expect_bad({{"prompt", json::array()}}, "prompt");
  expect_bad({{"prompt", {1, "a"}}}, "prompt");
  expect_bad({{"prompt", {-1}}}, "prompt");
  expect_bad({{"prompt", {1u << 30}}}, "prompt");
  expect_bad({{"prompt", {json::array()}}}, "prompt");
  expect_bad({{"prompt", {{1.5}}}}, "prompt");
  expect_bad({{"prompt", "x"}, {"model", "other"}}, "model", 404);
  expect_bad({{"prompt", "x"}, {"model", 3}}, "model");
}

TEST(OpenAiRequest, WrongTypesNameTheField) {
  const json base = {{"prompt", "x"}};
  const std::pair<const char*, json> cases[] = {
      {"max_tokens", "10"}, {"max_tokens", 1.5},      {"temperature", "hot"},
      {"top_p", true},      {"top_k", 2.5},           {"n", "2"},
      {"stop", 3},          {"stop", {1}},            {"seed", "s"},
      {"logit_bias", {1}},  {"logprobs", true},       {"echo", 1},
      {"ignore_eos", "no"}, {"min_tokens", -1},       {"user", 5},
      {"priority", "hi"},   {"stream", "true"},       {"stream_options", 1},
      {"presence_penalty", "a"}, {"frequency_penalty", json::array()},
      {"repetition_penalty", json::object()}, {"min_p", "0"},
  };
  for (const auto& [name, value] : cases) {
    json body = base;
    body[name] = value;
    expect_bad(body, name);
  }
}

TEST(OpenAiRequest, Ranges) {
  const json base = {{"prompt", "x"}};
  const std::pair<const char*, json> cases[] = {
      {"max_tokens", 0},          {"max_tokens", 1e30},         {"max_tokens", 100000},
      {"temperature", -0.1},      {"temperature", 1e308},       {"top_p", 0.0},
      {"top_p", 1.5},             {"top_k", -2},                {"min_p", 1.5},
      {"n", 0},                   {"n", 17},                    {"n", 18446744073709551615ull},
      {"presence_penalty", 2.5},  {"frequency_penalty", -3},    {"repetition_penalty", 0},
      {"logprobs", 21},           {"logprobs", -1},             {"min_tokens", 17},
      {"priority", 1e12},         {"logit_bias", {{"abc", 1}}}, {"logit_bias", {{"-1", 1}}},
      {"logit_bias", {{"5", 101}}}, {"logit_bias", {{"99999999", 1}}}, {"stop", {""}},
  };
  for (const auto& [name, value] : cases) {
    json body = base;
    body[name] = value;
    expect_bad(body, name);
  }
  // stream_options without stream
  expect_bad({{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}, "stream_options");
}

TEST(OpenAiRequest, Bounds) {
  RequestLimits limits;
  // too many / too long stop strings
  json many_stops = json::array();
  for (int i = 0; i < 17; ++i) many_stops.push_back(std::to_string(i) + "s");
  expect_bad({{"prompt", "x"}, {"stop", many_stops}}, "stop");
  expect_bad({{"prompt", "x"}, {"stop", std::string(300, 'a')}}, "stop");
  // logit_bias entries
  json bias = json::object();
  for (int i = 0; i < 1025; ++i) bias[std::to_string(i)] = 1;
  expect_bad({{"prompt", "x"}, {"logit_bias", bias}}, "logit_bias");
  // prompts x n
  json prompts = json::array();
  for (int i = 0; i < 33; ++i) prompts.push_back("p");
  expect_bad({{"prompt", prompts}}, "prompt");
  json eight = json::array();
  for (int i = 0; i < 8; ++i) eight.push_back("p");
  expect_bad({{"prompt", eight}, {"n", 16}}, "n");
  // prompt vs context (512 tokens): a long prompt, then prompt + max_tokens
  std::vector<int32_t> ids(600, 10);
  expect_bad({{"prompt", ids}}, "prompt");
  std::vector<int32_t> ids500(500, 10);
  expect_bad({{"prompt", ids500}, {"max_tokens", 20}}, "max_tokens");
  EXPECT_EQ(completion({{"prompt", ids500}, {"max_tokens", 12}}).params.max_tokens, 12);
  // user length
  expect_bad({{"prompt", "x"}, {"user", std::string(300, 'u')}}, "user");
}

TEST(OpenAiRequest, BodyBounds) {
  RequestLimits limits;
  limits.max_body_bytes = 100;
  ApiError big = expect_error(
      [&] { parse_completion_request(std::string(200, ' '), model_ctx(), limits); });
  EXPECT_EQ(big.status(), 413);
  std::string deep = "{\"prompt\": ";
  deep.append(100, '[');
  deep.append(100, ']');
  deep.push_back('}');
  ApiError d = expect_error([&] { parse_completion_request(deep, model_ctx(), {}); });
  EXPECT_EQ(d.status(), 400);
  EXPECT_NE(std::string(d.what()).find("nesting"), std::string::npos);
  // brackets inside strings do not count
  EXPECT_EQ(json_nesting_depth("{\"a\": \"[[[[[[\\\"[[[[\"}", 64), 1);
  EXPECT_EQ(json_nesting_depth(std::string(1000000, '['), 64), 65);
  for (std::string bad : {"{", "{\"prompt\": }", "[1,2]", "\"s\"", "", "{\"prompt\": \"\xff\"}",
                          "{\"prompt\": \"\\ud800\"}", "nul"}) {
    ApiError e = expect_error([&] { parse_completion_request(bad, model_ctx(), {}); });
    EXPECT_EQ(e.status(), 400) << bad;
  }
  std::string invalid_utf8 = "{\"prompt\": \"a\xc3\x28\"}";
  ApiError u = expect_error([&] { parse_completion_request(invalid_utf8, model_ctx(), {}); });
  EXPECT_NE(std::string(u.what()).find("UTF-8"), std::string::npos);
}

TEST(OpenAiRequest, Chat) {
  json body = {{"model", "test-model"},
               {"messages",
                {{{"role", "system"}, {"content", "Be brief."}},
                 {{"role", "user"},
                  {"content", {{{"type", "text"}, {"text", "Hi"}}, {{"type", "text"}, {"text", "there"}}}}}}},
               {"max_completion_tokens", 9},
               {"max_tokens", 100},
               {"logprobs", true},
               {"top_logprobs", 3}};
  auto r = chat_request(body);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompt_texts[0],
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi\nthere<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(r.prompts[0], tokenizer().encode(r.prompt_texts[0], false, true));
  EXPECT_EQ(r.params.max_tokens, 9);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.params.logprobs, 3);
  // default max_tokens: what fits in the context
  auto d = chat_request({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  EXPECT_EQ(d.params.max_tokens + int32_t(d.prompts[0].size()), 512);
  EXPECT_FALSE(d.logprobs);
}

// Tool calls and tool schemas reach the template in the client's key order
// (a template's tojson prints them; models were trained on that order).
TEST(OpenAiRequest, ChatKeepsKeyOrderForTojson) {
  static ChatFormatter f(
      "{% for m in messages %}{{ m.role }}:{% if m.tool_calls %}{{ m.tool_calls | tojson }}"
      "{% else %}{{ m.content }}{% endif %};{% endfor %}{{ tools | tojson }}",
      "", "");
  ModelContext m = model_ctx();
  m.chat = &f;
  const std::string body = R"({"tools": [{"type": "function", "function": {"name": "get",
      "parameters": {"type": "object", "required": ["z", "a"]}}}],
    "messages": [{"role": "user", "content": "x"},
                 {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
                   "id": "c1", "function": {"name": "get", "arguments": "{\"z\": 1}"}}]}]})";
  const auto r = parse_chat_request(body, m, {});
  ASSERT_EQ(r.prompt_texts.size(), 1u);
  const std::string& text = r.prompt_texts[0];
  const auto calls = text.find("[{\"type\"");
  ASSERT_NE(calls, std::string::npos) << text;
  EXPECT_LT(text.find("\"type\"", calls), text.find("\"id\"", calls)) << text;
  EXPECT_LT(text.find("\"id\"", calls), text.find("\"function\": {", calls)) << text;
  const auto tools = text.rfind("[{\"type\"");
  EXPECT_LT(text.find("\"name\"", tools), text.find("\"parameters\"", tools)) << text;
  EXPECT_LT(text.find("\"type\": \"object\"", tools), text.find("\"required\"", tools))
      << text;
}

TEST(OpenAiRequest, ChatErrors) {
  const json user = {{{"role", "user"}, {"content", "Hi"}}};
  expect_bad(json::object(), "messages", 400, true);
  expect_bad({{"messages", "hi"}}, "messages", 400, true);
  expect_bad({{"messages", json::array()}}, "messages", 400, true);
  expect_bad({{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}, "messages", 400, true);
  expect_bad({{"messages", {{{"role", "user"}, {"content", 5}}}}}, "messages", 400, true);
  expect_bad({{"messages", user}, {"logprobs", 2}}, "logprobs", 400, true);
  expect_bad({{"messages", user}, {"top_logprobs", 2}}, "top_logprobs", 400, true);
  expect_bad({{"messages", user}, {"logprobs", true}, {"top_logprobs", 50}}, "top_logprobs", 400,
             true);
  expect_bad({{"messages", user}, {"max_completion_tokens", 0}}, "max_completion_tokens", 400,
             true);
  json many = json::array();
  for (int i = 0; i < 1025; ++i) many.push_back(user[0]);
  expect_bad({{"messages", many}}, "messages", 400, true);
  ModelContext no_chat = model_ctx();
  no_chat.chat = nullptr;
  ApiError e = expect_error([&] {
    parse_chat_request(json{{"messages", user}}.dump(), no_chat, {});
  });
  EXPECT_EQ(e.status(), 400);
}

TEST(ApiErrorBody, Shape) {
  json j = json::parse(error_body(ApiError(400, "bad n", "n")));
  EXPECT_EQ(j["error"]["message"], "bad n");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "n");
  EXPECT_TRUE(j["error"]["code"].is_null());
  json k = json::parse(error_body("x\xff", "server_error", ""));
  EXPECT_TRUE(k["error"]["param"].is_null());
}
