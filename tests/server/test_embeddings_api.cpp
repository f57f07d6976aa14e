// /v1/embeddings bodies (server/embeddings_api.h): every input form, the
// options, the bounds (each a 400 naming its field), and the response body
// (float and base64 carrying the same floats).
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/embeddings_api.h"
#include "tokenizer/tokenizer.h"

namespace loom::server {
namespace {

using json = nlohmann::ordered_json;

const Tokenizer& tokenizer() {
  static auto tok =
      load_tokenizer_hf(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/tokenizer/qwen2");
  return *tok;
}

ModelContext model_ctx(int32_t max_len = 64) {
  ModelContext m;
  m.name = "embed-model";
  m.aliases = {"alias"};
  m.tokenizer = &tokenizer();
  m.max_model_len = max_len;
  m.vocab_size = tokenizer().vocab_size();
  return m;
}

EmbeddingRequest parse(const json& body, const RequestLimits& limits = {}, int32_t max_len = 64) {
  return parse_embedding_request(body, model_ctx(max_len), limits);
}

// The param of the 400 the body gets.
std::string refused(const json& body, const RequestLimits& limits = {}, int32_t max_len = 64) {
  try {
    parse(body, limits, max_len);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << e.what();
    return e.param();
  }
  ADD_FAILURE() << "accepted: " << body.dump();
  return "";
}

TEST(EmbeddingsApi, InputForms) {
  const auto hello = tokenizer().encode("Hello world", true, true);
  EXPECT_EQ(parse({{"input", "Hello world"}}).inputs, std::vector<std::vector<int32_t>>{hello});
  const EmbeddingRequest two = parse({{"input", {"Hello world", "bye"}}, {"model", "alias"}});
  ASSERT_EQ(two.inputs.size(), 2u);
  EXPECT_EQ(two.inputs[0], hello);
  EXPECT_EQ(two.inputs[1], tokenizer().encode("bye", true, true));
  EXPECT_EQ(two.model, "alias");
  EXPECT_EQ(two.prompt_tokens(), int64_t(hello.size() + two.inputs[1].size()));
  EXPECT_EQ(parse({{"input", {1, 2, 3}}}).inputs, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  EXPECT_EQ(parse({{"input", {{1, 2}, {3}}}}).inputs,
            (std::vector<std::vector<int32_t>>{{1, 2}, {3}}));
  const EmbeddingRequest d = parse({{"input", "x"}});
  EXPECT_EQ(d.model, "embed-model");
  EXPECT_FALSE(d.base64);
  EXPECT_TRUE(d.normalize);
}

TEST(EmbeddingsApi, Options) {
  const EmbeddingRequest r = parse({{"input", "x"},
                                    {"encoding_format", "base64"},
                                    {"user", "u-1"},
                                    {"normalize", false},
                                    {"priority", -3},
                                    {"unknown_field", 1}});
  EXPECT_TRUE(r.base64);
  EXPECT_EQ(r.user, "u-1");
  EXPECT_FALSE(r.normalize);
  EXPECT_EQ(r.priority, -3);
  EXPECT_FALSE(parse({{"input", "x"}, {"encoding_format", "float"}}).base64);
  EXPECT_FALSE(
      parse({{"input", "x"}, {"encoding_format", nullptr}, {"dimensions", nullptr}}).base64);
  // vLLM's: keep the last k tokens; -1: the context.
  EXPECT_EQ(parse({{"input", {1, 2, 3, 4, 5}}, {"truncate_prompt_tokens", 2}}).inputs[0],
            (std::vector<int32_t>{4, 5}));
  std::vector<int32_t> long_ids(100, 7);
  long_ids[99] = 9;
  const auto cut = parse({{"input", long_ids}, {"truncate_prompt_tokens", -1}}).inputs[0];
  EXPECT_EQ(cut.size(), 64u);
  EXPECT_EQ(cut.back(), 9);
  const auto plain = parse({{"input", "Hello world"}, {"add_special_tokens", false}}).inputs[0];
  EXPECT_EQ(plain, tokenizer().encode("Hello world", false, true));
}

TEST(EmbeddingsApi, RefusedNamingTheField) {
  EXPECT_EQ(refused({{"input", "x"}, {"dimensions", 32}}), "dimensions");
  EXPECT_EQ(refused({{"input", "x"}, {"dimensions", "a"}}), "dimensions");
  EXPECT_EQ(refused({{"input", "x"}, {"encoding_format", "int8"}}), "encoding_format");
  EXPECT_EQ(refused({{"input", "x"}, {"encoding_format", 1}}), "encoding_format");
  EXPECT_EQ(refused({{"input", "x"}, {"user", 5}}), "user");
  EXPECT_EQ(refused({{"input", "x"}, {"user", std::string(300, 'u')}}), "user");
  EXPECT_EQ(refused({{"input", "x"}, {"normalize", "yes"}}), "normalize");
  EXPECT_EQ(refused({{"input", "x"}, {"truncate_prompt_tokens", 0}}), "truncate_prompt_tokens");
  EXPECT_EQ(refused({{"input", "x"}, {"truncate_prompt_tokens", -2}}), "truncate_prompt_tokens");
  EXPECT_EQ(refused({{"input", "x"}, {"model", 3}}), "model");
  EXPECT_EQ(refused(json::object()), "input");
  EXPECT_EQ(refused({{"input", nullptr}}), "input");
  EXPECT_EQ(refused({{"input", 5}}), "input");
  EXPECT_EQ(refused({{"input", json::array()}}), "input");
  EXPECT_EQ(refused({{"input", ""}}), "input");
  EXPECT_EQ(refused({{"input", {json::array()}}}), "input");
  EXPECT_EQ(refused({{"input", {1, "a"}}}), "input");
  EXPECT_EQ(refused({{"input", {1.5}}}), "input");
  EXPECT_EQ(refused({{"input", {-1}}}), "input");
  EXPECT_EQ(refused({{"input", {tokenizer().vocab_size()}}}), "input");
  EXPECT_EQ(refused({{"input", {"a", {1}}}}), "input");
  EXPECT_EQ(refused({{"input", {{1}, "a"}}}), "input");
  EXPECT_EQ(refused({{"input", {{{1}}}}}), "input");
  EXPECT_EQ(refused({{"input", std::vector<int32_t>(65, 1)}}), "input");  // beyond the context
  try {
    parse({{"input", "x"}, {"model", "other"}});
    ADD_FAILURE();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 404);
    EXPECT_EQ(e.param(), "model");
  }
}

TEST(EmbeddingsApi, CountAndTotalBounds) {
  RequestLimits limits;
  limits.max_embedding_inputs = 3;
  limits.max_embedding_tokens = 10;
  EXPECT_EQ(parse({{"input", {"a", "b", "c"}}}, limits).inputs.size(), 3u);
  EXPECT_EQ(refused({{"input", {"a", "b", "c", "d"}}}, limits), "input");
  EXPECT_EQ(parse({{"input", {std::vector<int32_t>(5, 1), std::vector<int32_t>(5, 2)}}}, limits)
                .prompt_tokens(),
            10);
  EXPECT_EQ(refused({{"input", {std::vector<int32_t>(5, 1), std::vector<int32_t>(6, 2)}}}, limits),
            "input");
}

TEST(EmbeddingsApi, ResponseBodyFloatAndBase64) {
  EmbeddingRequest r = parse({{"input", {{1, 2}, {3}}}});
  const std::vector<std::vector<float>> v = {{0.5f, -1.25f, 3.0f}, {1e-8f, 0.0f, -0.0f}};
  const json f = json::parse(embedding_response_body(r, v));
  EXPECT_EQ(f["object"], "list");
  EXPECT_EQ(f["model"], "embed-model");
  EXPECT_EQ(f["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(f["usage"]["total_tokens"], 3);
  ASSERT_EQ(f["data"].size(), 2u);
  EXPECT_EQ(f["data"][1]["object"], "embedding");
  EXPECT_EQ(f["data"][1]["index"], 1);
  EXPECT_EQ(f["data"][0]["embedding"].get<std::vector<float>>(), v[0]);
  r.base64 = true;
  const json b = json::parse(embedding_response_body(r, v));
  // 0.5f, -1.25f, 3.0f little-endian: 00 00 00 3f | 00 00 a0 bf | 00 00 40 40
  EXPECT_EQ(b["data"][0]["embedding"], "AAAAPwAAoL8AAEBA");
  EXPECT_EQ(base64_floats({}), "");
  EXPECT_EQ(base64_floats({1.0f}), "AACAPw==");
  const std::string two = base64_floats({1.0f, 2.0f});  // 8 bytes: one '=' of padding
  EXPECT_EQ(two, "AACAPwAAAEA=");
}

}  // namespace
}  // namespace loom::server
