// BpeTokenizer: the one Tokenizer implementation behind both loaders. It runs
// the HF `tokenizers` pipeline for BPE models: added/special tokens split out
// first (longest match), then per remaining segment normaliser -> pre-tokeniser
// -> BPE merges (by merge rank, or by token score for SentencePiece GGUF files)
// with byte fallback, and a decoder that undoes the byte-level alphabet or the
// SentencePiece space marker. Both byte-level BPE (GPT-2, Llama 3, Qwen2) and
// SentencePiece-style BPE (Llama 2, Gemma) are configurations of this class.
// Immutable after construction; every const method is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"

namespace loom::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// An HF added token (tokenizer.json "added_tokens", or a GGUF control /
// user-defined token).
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // skipped by decode(skip_special); not split when !parse_special
  bool normalized = false;   // matched in normalised text rather than raw text
  bool lstrip = false;       // also swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only matches bounded by non-word characters
};

struct NormalizerStep {
  enum class Kind { Nfc, Replace, Prepend };
  Kind kind;
  std::string pattern;               // Replace: literal pattern (empty when regex)
  std::shared_ptr<const Regex> regex;  // Replace with a regex pattern
  std::string content;               // Replace: replacement; Prepend: prefix
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
enum class PrependScheme { Always, First, Never };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel, Metaspace, Digits };
  Kind kind;
  // Split: a regex or a literal string.
  std::shared_ptr<const Regex> regex;
  std::string literal;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  // ByteLevel
  bool add_prefix_space = false;
  bool use_regex = true;
  // Metaspace
  std::string replacement = "\xE2\x96\x81";  // U+2581
  PrependScheme prepend_scheme = PrependScheme::Always;
  bool split = true;
  // Digits
  bool individual_digits = false;
};

struct DecoderSpec {
  bool byte_level = false;  // tokens are spelled in the GPT-2 byte alphabet
  std::vector<std::pair<std::string, std::string>> replacements;  // per token, in order
  bool byte_fallback = false;  // "<0xAB>" tokens are the byte 0xAB
  int strip_leading_spaces = 0;  // leading ' ' removed from the joined output
};

// Everything a loader fills in. Ids index `tokens`, which holds the model's
// vocabulary with added tokens' contents at their ids ("" for holes).
struct BpeConfig {
  std::vector<std::string> tokens;
  TokenMap vocab;  // model vocabulary: text -> id (what merges produce)
  // Merge priority, either by explicit merges (pairs of ids, rank = index)...
  std::vector<std::pair<int32_t, int32_t>> merges;
  // ... or, when use_scores, by the score of the merged token (higher first).
  bool use_scores = false;
  std::vector<float> scores;

  bool byte_level = false;  // words are bytes mapped to the GPT-2 alphabet
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  std::optional<int32_t> unk_id;

  std::vector<AddedToken> added;
  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  DecoderSpec decoder;
  SpecialTokens special;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // Validates the config (ids in range, merges resolvable) and builds the
  // lookup tables; throws loom::Error on inconsistent input.
  explicit BpeTokenizer(BpeConfig config);
  ~BpeTokenizer() override;

  std::vector<int32_t> encode(std::string_view text, bool add_special = false,
                              bool parse_special = true) const override;
  std::string token_bytes(int32_t id, bool include_special = false) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(cfg_.tokens.size()); }
  bool is_special(int32_t id) const override;
  std::optional<int32_t> token_id(std::string_view token_text) const override;
  std::string_view token_text(int32_t id) const override;

 private:
  struct Piece {
    std::string text;
    bool at_start;  // begins at offset 0 of the original input
  };
  struct MergeResult {
    uint64_t rank;
    int32_t new_id;
  };
  class AddedMatcher;

  std::string normalize(std::string_view text) const;
  void pre_tokenize(std::vector<Piece>& pieces) const;
  void encode_text(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  std::optional<MergeResult> find_merge(int32_t left, int32_t right) const;

  BpeConfig cfg_;
  std::vector<uint8_t> special_flags_;  // by id
  std::unordered_map<uint64_t, MergeResult> merge_table_;
  std::vector<uint32_t> score_rank_;  // by id, 0 = highest score (use_scores)
  std::vector<uint32_t> token_chars_;  // by id, code points of the vocab text (use_scores)
  int32_t byte_ids_[256];              // byte-level: id of each byte's character (-1: none)
  int32_t byte_fallback_ids_[256];     // "<0xAB>" ids (-1: none)
  TokenMap added_by_content_;
  std::unique_ptr<AddedMatcher> raw_matcher_;         // non-normalised added tokens
  std::unique_ptr<AddedMatcher> raw_matcher_nospecial_;  // same without special ones
  std::unique_ptr<AddedMatcher> norm_matcher_;        // normalised added tokens
  std::unique_ptr<AddedMatcher> norm_matcher_nospecial_;
  std::shared_ptr<const Regex> gpt2_regex_;
};

}  // namespace loom::tok
