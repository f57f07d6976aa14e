// IncrementalDecoder: chunks are valid UTF-8, concatenate to decode(), hold
// back split characters (byte-level pieces of emoji/CJK, byte-fallback
// tokens) and turn bytes that can never complete into U+FFFD.
#include <gtest/gtest.h>

#include "fixture_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace loom {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::vector<std::string> stream(const Tokenizer& tok, const std::vector<int32_t>& ids, std::string* flushed,
                                bool skip_special = true) {
  IncrementalDecoder dec(tok, skip_special);
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(dec.push(id));
  *flushed = dec.flush();
  return chunks;
}

class IncrementalFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(IncrementalFixture, ChunksAreValidAndConcatenate) {
  auto tok = load_tokenizer_hf(test::fixture_dir() + "/" + GetParam());
  const std::vector<std::string> texts = {
      "Emoji 👨‍👩‍👧‍👦 and 🇫🇷 flags 🧑🏿‍🚀", "中文字符和日本語のテキスト", " leading space", "<s>hi</s> <|im_end|> x",
      "\u16a0\u16a1 rare runes \U0001f9ec", "mixed ascii and ünïcödé"};
  for (const auto& text : texts) {
    const auto ids = tok->encode(text, true);
    std::string flushed;
    const auto chunks = stream(*tok, ids, &flushed);
    std::string joined;
    for (const auto& c : chunks) {
      EXPECT_TRUE(tok::utf8_is_valid(c)) << GetParam() << ": invalid chunk for " << text;
      joined += c;
    }
    EXPECT_EQ(flushed, "");
    EXPECT_EQ(joined, tok->decode(ids)) << GetParam();
    // With specials shown, too.
    const auto chunks2 = stream(*tok, ids, &flushed, false);
    joined.clear();
    for (const auto& c : chunks2) joined += c;
    EXPECT_EQ(joined + flushed, tok->decode(ids, false)) << GetParam();
  }
}

INSTANTIATE_TEST_SUITE_P(Trained, IncrementalFixture,
                         ::testing::Values("gpt2", "llama3", "qwen2", "llama2", "llama2_metaspace", "gemma"),
                         [](const auto& info) { return std::string(info.param); });

// Finds the id of the byte-level token spelling exactly `bytes`.
int32_t byte_level_id(const Tokenizer& tok, const std::string& bytes) {
  std::string spelled;
  for (unsigned char b : bytes) spelled += tok::byte_level_chars()[b];
  auto id = tok.token_id(spelled);
  EXPECT_TRUE(id.has_value());
  return id.value_or(0);
}

TEST(IncrementalDecoder, ByteLevelSplitEmojiIsHeldBack) {
  auto tok = load_tokenizer_hf(test::fixture_dir() + "/gpt2");
  const std::string emoji = "\xF0\x9F\x98\x80";  // 😀 as four single-byte tokens
  IncrementalDecoder dec(*tok);
  EXPECT_EQ(dec.push(byte_level_id(*tok, "a")), "a");
  EXPECT_EQ(dec.push(byte_level_id(*tok, "\xF0")), "");
  EXPECT_EQ(dec.push(byte_level_id(*tok, "\x9F")), "");
  EXPECT_EQ(dec.push(byte_level_id(*tok, "\x98")), "");
  EXPECT_EQ(dec.push(byte_level_id(*tok, "\x80")), emoji);
  EXPECT_EQ(dec.flush(), "");
}

TEST(IncrementalDecoder, InvalidBytesBecomeReplacementOnceKnown) {
  auto tok = load_tokenizer_hf(test::fixture_dir() + "/gpt2");
  IncrementalDecoder dec(*tok);
  EXPECT_EQ(dec.push(byte_level_id(*tok, "\xE4")), "");         // could start a CJK character
  EXPECT_EQ(dec.push(byte_level_id(*tok, "a")), kFffd + "a");   // ... but cannot any more
  EXPECT_EQ(dec.push(byte_level_id(*tok, "\xFF")), kFffd);      // never valid
  EXPECT_EQ(dec.push(byte_level_id(*tok, "\xE4")), "");
  EXPECT_EQ(dec.push(byte_level_id(*tok, "\xBD")), "");
  EXPECT_EQ(dec.flush(), kFffd);  // truncated at the end
  const std::vector<int32_t> ids = {byte_level_id(*tok, "\xE4"), byte_level_id(*tok, "a"),
                                    byte_level_id(*tok, "\xFF"), byte_level_id(*tok, "\xE4"),
                                    byte_level_id(*tok, "\xBD")};
  EXPECT_EQ(tok->decode(ids), kFffd + "a" + kFffd + kFffd);
}

TEST(IncrementalDecoder, ByteFallbackPieces) {
  auto tok = load_tokenizer_hf(test::fixture_dir() + "/llama2");
  // "ᚠ" (E1 9A A0) is not in the small vocabulary: three <0x..> tokens.
  const auto ids = tok->encode("x\u16a0");
  ASSERT_GE(ids.size(), 4u);
  IncrementalDecoder dec(*tok);
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(dec.push(id));
  EXPECT_EQ(chunks[chunks.size() - 1], "\u16a0");
  EXPECT_EQ(chunks[chunks.size() - 2], "");
  EXPECT_EQ(chunks[chunks.size() - 3], "");
  // The prepended "▁" is stripped only at the very start.
  std::string joined;
  for (const auto& c : chunks) joined += c;
  EXPECT_EQ(joined, "x\u16a0");
  EXPECT_EQ(dec.flush(), "");
}

TEST(IncrementalDecoder, LeadingSpaceStrippedOnceAcrossSpecials) {
  auto tok = load_tokenizer_hf(test::fixture_dir() + "/llama2");
  const auto ids = tok->encode("Hello world", true);  // <s> ▁Hello ▁world
  std::string flushed;
  std::string joined;
  for (const auto& c : stream(*tok, ids, &flushed)) joined += c;
  EXPECT_EQ(joined + flushed, "Hello world");
  EXPECT_EQ(tok->decode(ids), "Hello world");
  joined.clear();
  for (const auto& c : stream(*tok, ids, &flushed, false)) joined += c;
  EXPECT_EQ(joined + flushed, tok->decode(ids, false));
}

TEST(Utf8, StablePrefix) {
  EXPECT_EQ(tok::utf8_stable_prefix(""), 0u);
  EXPECT_EQ(tok::utf8_stable_prefix("abc"), 3u);
  EXPECT_EQ(tok::utf8_stable_prefix("a\xF0\x9F"), 1u);
  EXPECT_EQ(tok::utf8_stable_prefix("a\xF0\x9F\x98"), 1u);
  EXPECT_EQ(tok::utf8_stable_prefix("a\xF0\x9F\x98\x80"), 5u);
  EXPECT_EQ(tok::utf8_stable_prefix("a\xE4"), 1u);
  EXPECT_EQ(tok::utf8_stable_prefix("a\xE4x"), 3u);       // invalid: nothing to wait for
  EXPECT_EQ(tok::utf8_stable_prefix("a\xED\xA0"), 3u);    // surrogate: never valid
  EXPECT_EQ(tok::utf8_stable_prefix("\x80\x80\x80"), 3u);
  EXPECT_EQ(tok::utf8_lossy("a\xF0\x9F" "b"), "a" + kFffd + "b");
  EXPECT_EQ(tok::utf8_lossy("\xC0\xAF"), kFffd + kFffd);
}

}  // namespace
}  // namespace loom
