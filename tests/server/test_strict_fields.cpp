// Strict fields: unimplemented features (suffix, best_of > n) and unknown enum
// values are 400s naming the field; known values and unknown field names pass;
// reasoning_effort reaches the chat template; prompt scoring (echo + logprobs,
// prompt_logprobs, max_tokens 0); several served model names.
#include <gtest/gtest.h>

#include <string>

#include "server/api_error.h"
#include "server/openai_request.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

using namespace loom;
using namespace loom::server;
using nlohmann::json;

namespace {

const Tokenizer& tokenizer() {
  static auto tok =
      load_tokenizer_hf(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/tokenizer/qwen2");
  return *tok;
}

// Writes the effort into the prompt, so a test can see the template got it.
const ChatFormatter& chat() {
  static ChatFormatter f(
      "{% if reasoning_effort is defined %}effort={{ reasoning_effort }}\n{% endif %}"
      "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
      "", "");
  return f;
}

ModelContext model_ctx() {
  ModelContext m;
  m.name = "test-model";
  m.aliases = {"alias-a", "alias-b"};
  m.tokenizer = &tokenizer();
  m.chat = &chat();
  m.max_model_len = 512;
  m.vocab_size = tokenizer().vocab_size();
  return m;
}

GenerationRequest completion(const json& body) {
  return parse_completion_request(body.dump(), model_ctx(), {});
}
GenerationRequest chat_request(json body) {
  if (!body.contains("messages"))
    body["messages"] = json::array({{{"role", "user"}, {"content", "hi"}}});
  return parse_chat_request(body.dump(), model_ctx(), {});
}

template <class F>
void expect_bad(F fn, const std::string& param, const std::string& needle = "") {
  try {
    fn();
    ADD_FAILURE() << "no ApiError for " << param;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), param) << e.what();
    if (!needle.empty()) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

}  // namespace

TEST(StrictFields, SuffixRefusedNamingTheField) {
  expect_bad([] { completion({{"prompt", "x"}, {"suffix", "tail"}}); }, "suffix", "not supported");
  expect_bad([] { completion({{"prompt", "x"}, {"suffix", 3}}); }, "suffix");
  EXPECT_NO_THROW(completion({{"prompt", "x"}, {"suffix", nullptr}}));
  EXPECT_NO_THROW(completion({{"prompt", "x"}, {"suffix", ""}}));
}

TEST(StrictFields, BestOf) {
  expect_bad([] { completion({{"prompt", "x"}, {"best_of", 3}}); }, "best_of", "not supported");
  expect_bad(
      [] {
        completion({{"prompt", "x"}, {"n", 3}, {"best_of", 2}});
      },
      "best_of", "at least n");
  expect_bad([] { completion({{"prompt", "x"}, {"best_of", 0}}); }, "best_of");
  expect_bad([] { completion({{"prompt", "x"}, {"best_of", "2"}}); }, "best_of");
  EXPECT_EQ(completion({{"prompt", "x"}, {"n", 2}, {"best_of", 2}}).params.n, 2);
  EXPECT_NO_THROW(completion({{"prompt", "x"}, {"best_of", 1}}));
}

TEST(StrictFields, PromptScoring) {
  // echo + logprobs scores the prompt; so does vLLM's prompt_logprobs; both
  // allow max_tokens 0 (the prompt alone), which otherwise stays refused.
  auto echo = completion({{"prompt", "x y"}, {"echo", true}, {"logprobs", 2}, {"max_tokens", 0}});
  EXPECT_EQ(echo.params.prompt_logprobs, 2);
  EXPECT_EQ(echo.params.max_tokens, 0);
  EXPECT_FALSE(echo.prompt_logprobs.has_value());
  auto vllm = chat_request({{"prompt_logprobs", 3}, {"max_tokens", 1}});
  EXPECT_EQ(vllm.prompt_logprobs, 3);
  EXPECT_EQ(vllm.params.prompt_logprobs, 3);
  EXPECT_EQ(completion({{"prompt", "x"}, {"echo", true}, {"max_tokens", 0}}).params.prompt_logprobs, 0);
  EXPECT_FALSE(completion({{"prompt", "x"}, {"logprobs", 1}}).params.prompt_logprobs.has_value());
  expect_bad([] { completion({{"prompt", "x"}, {"max_tokens", 0}}); }, "max_tokens");
  expect_bad([] { chat_request({{"max_tokens", 0}}); }, "max_tokens");
  expect_bad([] { completion({{"prompt", "x"}, {"prompt_logprobs", 21}}); }, "prompt_logprobs");
  expect_bad([] { completion({{"prompt", "x"}, {"prompt_logprobs", "1"}}); }, "prompt_logprobs");
}

TEST(StrictFields, EnumValues) {
  expect_bad(
      [] {
        chat_request({{"reasoning_effort", "extreme"}});
      },
      "reasoning_effort", "'extreme'");
  expect_bad([] { chat_request({{"reasoning_effort", 1}}); }, "reasoning_effort");
  expect_bad([] { chat_request({{"tool_choice", "sometimes"}}); }, "tool_choice");
  expect_bad([] { chat_request({{"tool_choice", {{"type", "function"}}}}); }, "tool_choice");
  expect_bad(
      [] {
        chat_request({{"response_format", {{"type", "xml"}}}});
      },
      "response_format", "xml");
  expect_bad([] { completion({{"prompt", "x"}, {"response_format", "json"}}); }, "response_format");
  expect_bad([] { completion({{"prompt", "x"}, {"service_tier", "gold"}}); }, "service_tier");
  const json tools = json::array(
      {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::object()}}}}});
  for (const char* v : {"none", "auto", "required"})
    EXPECT_NO_THROW(chat_request({{"tools", tools}, {"tool_choice", v}}));
  EXPECT_NO_THROW(chat_request({{"tool_choice", "none"}}));
  expect_bad([] { chat_request({{"tool_choice", "auto"}}); }, "tool_choice", "needs 'tools'");
  EXPECT_NO_THROW(chat_request(
      {{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}}));
  expect_bad(
      [&] {
        chat_request({{"tools", tools},
                      {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}});
      },
      "tool_choice", "'g'");
  EXPECT_NO_THROW(chat_request({{"response_format", {{"type", "text"}}}}));
  EXPECT_NO_THROW(completion({{"prompt", "x"}, {"service_tier", "auto"}}));
}

TEST(StrictFields, ReasoningEffortReachesTheTemplate) {
  const auto with = chat_request({{"reasoning_effort", "low"}});
  EXPECT_EQ(with.prompt_texts[0].rfind("effort=low\n", 0), 0u) << with.prompt_texts[0];
  const auto without = chat_request(json::object());
  EXPECT_EQ(without.prompt_texts[0].find("effort="), std::string::npos);
}

TEST(StrictFields, UnknownFieldNamesStayIgnored) {
  EXPECT_NO_THROW(
      completion({{"prompt", "x"}, {"frobnicate", {{"a", 1}}}, {"metadata", {{"k", "v"}}}}));
  EXPECT_NO_THROW(chat_request({{"store", true}, {"whatever_new_field", "x"}}));
}

TEST(ServedNames, EveryNameAcceptedAndReported) {
  EXPECT_EQ(completion({{"prompt", "x"}}).model, "test-model");
  EXPECT_EQ(completion({{"prompt", "x"}, {"model", "alias-b"}}).model, "alias-b");
  try {
    completion({{"prompt", "x"}, {"model", "other"}});
    ADD_FAILURE();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 404);
    EXPECT_EQ(e.param(), "model");
  }
  EXPECT_EQ(model_ctx().served_names(),
            (std::vector<std::string>{"test-model", "alias-a", "alias-b"}));
}
