// loom's tokenizers vs HF `tokenizers` on the trained fixtures made by
// scripts/make_tokenizer_fixtures.py: ids (plain, with special tokens added,
// with special-token parsing off), decodes and streaming decodes, per string.
#include <gtest/gtest.h>

#include "fixture_util.h"
#include "tokenizer/tokenizer.h"

namespace loom {
namespace {

class HfFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(HfFixture, MatchesHf) {
  const std::string dir = test::fixture_dir() + "/" + GetParam();
  auto tok = load_tokenizer_hf(dir);
  const auto expected = test::read_json(dir + "/expected.json");
  EXPECT_EQ(tok->vocab_size(), expected["vocab_size"].get<int32_t>());
  const auto r = test::compare_with_hf(*tok, expected["cases"], GetParam());
  std::printf("[ fixture  ] %s: %d strings, %d mismatches\n", GetParam(), r.strings, r.mismatches);
  EXPECT_EQ(r.mismatches, 0);
  EXPECT_GE(r.strings, 30);
}

INSTANTIATE_TEST_SUITE_P(Trained, HfFixture,
                         ::testing::Values("gpt2", "llama3", "qwen2", "llama2", "llama2_metaspace", "gemma"),
                         [](const auto& info) { return std::string(info.param); });

TEST(HfSpecialTokens, FromConfigFiles) {
  auto qwen = load_tokenizer_hf(test::fixture_dir() + "/qwen2");
  const auto& q = qwen->special();
  EXPECT_FALSE(q.add_bos);
  ASSERT_TRUE(q.eos.has_value());
  EXPECT_EQ(qwen->token_text(*q.eos), "<|im_end|>");
  // <|im_end|> and <|endoftext|> both end generation.
  EXPECT_EQ(q.eos_ids.size(), 2u);
  EXPECT_TRUE(qwen->is_special(*q.eos));
  EXPECT_FALSE(qwen->is_special(*qwen->token_id("<tool_call>")));

  auto llama3 = load_tokenizer_hf(test::fixture_dir() + "/llama3");
  const auto& l = llama3->special();
  EXPECT_TRUE(l.add_bos);  // from the TemplateProcessing post-processor
  EXPECT_EQ(llama3->token_text(*l.bos), "<|begin_of_text|>");
  EXPECT_EQ(llama3->token_text(*l.eos), "<|eot_id|>");

  auto gemma = load_tokenizer_hf(test::fixture_dir() + "/gemma");
  const auto& g = gemma->special();
  EXPECT_TRUE(g.add_bos);
  EXPECT_EQ(*g.bos, 2);
  EXPECT_EQ(*g.eos, 1);
  EXPECT_EQ(*g.pad, 0);
  EXPECT_EQ(*g.unk, 3);
  // eos, generation_config's extra id 5 (<end_of_turn>); no duplicates.
  EXPECT_EQ(g.eos_ids, (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(gemma->decode_strip_leading_spaces(), 0);
  auto llama2 = load_tokenizer_hf(test::fixture_dir() + "/llama2");
  EXPECT_EQ(llama2->decode_strip_leading_spaces(), 1);
}

TEST(HfTokenizer, TokenBytes) {
  auto gpt2 = load_tokenizer_hf(test::fixture_dir() + "/gpt2");
  const auto eot = *gpt2->token_id("<|endoftext|>");
  EXPECT_EQ(gpt2->token_bytes(eot, false), "");
  EXPECT_EQ(gpt2->token_bytes(eot, true), "<|endoftext|>");
  EXPECT_EQ(gpt2->token_bytes(-1), "");
  EXPECT_EQ(gpt2->token_bytes(gpt2->vocab_size()), "");
  // "Ġ" is the space byte.
  EXPECT_EQ(gpt2->token_bytes(*gpt2->token_id("\xC4\xA0")), " ");
  auto llama2 = load_tokenizer_hf(test::fixture_dir() + "/llama2");
  EXPECT_EQ(llama2->token_bytes(*llama2->token_id("<0x41>")), "A");
  EXPECT_EQ(llama2->token_bytes(*llama2->token_id("\xE2\x96\x81")), " ");
}

TEST(HfTokenizer, LongInputsAreFast) {
  // A long word must not take quadratic time in the merge loop.
  auto gemma = load_tokenizer_hf(test::fixture_dir() + "/gemma");
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "the quick brown fox ";
  const auto ids = gemma->encode(text);
  EXPECT_GT(ids.size(), 1000u);
  EXPECT_EQ(gemma->decode(ids), text);
  auto qwen = load_tokenizer_hf(test::fixture_dir() + "/qwen2");
  const std::string digits(200000, '7');
  EXPECT_EQ(qwen->decode(qwen->encode(digits)), digits);
}

}  // namespace
}  // namespace loom
