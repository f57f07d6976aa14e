// Replays the request fuzzer's seed corpus (fuzz/request_seeds) through the
// paths fuzz_request drives — completions and chat parsing, and the
// /v1/messages and /v1/responses adapters — in the ordinary test build: each
// body parses into a bounded request or raises ApiError, nothing else. The
// *_types seeds put wrong types at every level and must all be ApiErrors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "server/anthropic_api.h"
#include "server/api_error.h"
#include "server/json_body.h"
#include "server/openai_request.h"
#include "server/responses_api.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

using namespace loom;
using namespace loom::server;

namespace {

const std::string kSeeds = std::string(LOOM_SOURCE_DIR) + "/fuzz/request_seeds";

class RequestSeeds : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ =
        load_tokenizer_hf(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/tokenizer/qwen2");
    chat_ = std::make_unique<ChatFormatter>(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        "", "<|im_end|>");
    model_.name = "m";
    model_.tokenizer = tokenizer_.get();
    model_.chat = chat_.get();
    model_.max_model_len = 4096;
    model_.vocab_size = tokenizer_->vocab_size();
    limits_.max_body_bytes = 1 << 16;
  }

  // 0 parsed, 1 ApiError; any other exception fails the test.
  int run_endpoint(const std::string& body, Endpoint endpoint) {
    try {
      const auto r = endpoint == Endpoint::ChatCompletions
                         ? parse_chat_request(body, model_, limits_)
                         : parse_completion_request(body, model_, limits_);
      EXPECT_FALSE(r.prompts.empty());
      for (const auto& p : r.prompts)
        EXPECT_LE(int64_t(p.size()) + r.params.max_tokens, model_.max_model_len);
      return 0;
    } catch (const ApiError&) {
      return 1;
    }
  }

  int run_adapter(const std::string& body, bool responses) {
    try {
      const auto parsed = parse_json_body(body, limits_.max_body_bytes, limits_.max_json_depth);
      auto adapter = responses ? make_responses_adapter(nullptr) : make_anthropic_adapter(nullptr);
      const auto chat = adapter->translate(parsed, model_, limits_);
      const auto r = parse_generation_request(Endpoint::ChatCompletions, chat, model_, limits_);
      EXPECT_EQ(r.prompts.size(), 1u);
      EXPECT_EQ(r.params.n, 1);
      return 0;
    } catch (const ApiError&) {
      return 1;
    }
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatFormatter> chat_;
  ModelContext model_;
  RequestLimits limits_;
};

std::vector<std::filesystem::path> seeds() {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(kSeeds))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

}  // namespace

TEST_F(RequestSeeds, EveryPathParsesOrRaisesApiError) {
  const auto files = seeds();
  ASSERT_GE(files.size(), 9u);
  for (const auto& path : files) {
    SCOPED_TRACE(path.filename().string());
    const std::string body = read(path);
    ASSERT_FALSE(body.empty());
    run_endpoint(body, Endpoint::Completions);
    run_endpoint(body, Endpoint::ChatCompletions);
    run_adapter(body, false);
    run_adapter(body, true);
  }
}

TEST_F(RequestSeeds, RouteSeedsParseOnTheirRoute) {
  for (const char* name : {"messages.json", "messages_blocks.json", "messages_tools.json"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(run_adapter(read(kSeeds + "/" + name), false), 0);
  }
  for (const char* name : {"responses.json", "responses_string.json", "responses_tools.json"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(run_adapter(read(kSeeds + "/" + name), true), 0);
  }
}

TEST_F(RequestSeeds, WrongTypesAreApiErrorsAtEveryField) {
  // Each field of the *_types seeds alone on an otherwise valid body: a
  // wrong type anywhere is a 400, never an escaped JSON exception.
  for (const auto& [seed, valid, responses] :
       {std::tuple{"messages_types.json", "messages.json", false},
        std::tuple{"responses_types.json", "responses.json", true}}) {
    const auto bad = nlohmann::ordered_json::parse(read(kSeeds + "/" + seed));
    const auto ok = nlohmann::ordered_json::parse(read(kSeeds + "/" + valid));
    EXPECT_EQ(run_adapter(bad.dump(), responses), 1) << seed;
    for (const auto& [key, value] : bad.items()) {
      SCOPED_TRACE(std::string(seed) + ": " + key);
      auto body = ok;
      body[key] = value;
      EXPECT_EQ(run_adapter(body.dump(), responses), 1);
    }
  }
}
