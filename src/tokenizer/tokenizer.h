// Tokenizer: text <-> token ids for the model's vocabulary. Two kinds:
// byte-level BPE (GPT-2, Llama 3, Qwen2 pre-tokeniser patterns) and
// SentencePiece-style BPE (Llama 2, Gemma), each loaded from GGUF metadata or
// from an HF tokenizer.json. Immutable after loading; safe to share across
// threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

class GgufFile;

struct SpecialTokens {
  std::optional<int32_t> bos;
  std::optional<int32_t> eos;
  std::optional<int32_t> pad;
  std::optional<int32_t> unk;
  std::vector<int32_t> eos_ids;  // every id that ends generation (eos, <|eot_id|>, <end_of_turn>...)
  bool add_bos = false;           // prepend bos when encoding a prompt
  bool add_eos = false;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encodes text. With parse_special, text matching a special/added token's
  // content becomes that token (as HF does for added tokens); otherwise such
  // text is tokenised as plain text. add_special prepends bos (and appends
  // eos) as the tokenizer's config says.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special = false,
                                      bool parse_special = true) const = 0;
  // Bytes of one token's text as it contributes to decoded output (may be a
  // partial UTF-8 sequence for byte-level tokens). Special tokens give their
  // content when include_special, else "".
  virtual std::string token_bytes(int32_t id, bool include_special = false) const = 0;
  // Decodes a sequence (joins token_bytes, applying the decoder's rules such as
  // SentencePiece's leading-space strip). Invalid UTF-8 is replaced by U+FFFD,
  // one per maximal invalid subpart (as HF's byte-level decoder does; HF's
  // ByteFallback decoder instead gives one per byte of an invalid run -- the
  // only place loom's decode differs from HF's, and only on invalid bytes).
  // Text given to encode() that is not valid UTF-8 is first made valid the same way.
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual bool is_special(int32_t id) const = 0;
  virtual std::optional<int32_t> token_id(std::string_view token_text) const = 0;
  virtual std::string_view token_text(int32_t id) const = 0;  // the vocab string
  const SpecialTokens& special() const { return special_; }
  // How many leading spaces decode() strips from the joined output (a
  // SentencePiece decoder removing the space it prepended); 0 for byte-level.
  int decode_strip_leading_spaces() const { return strip_leading_spaces_; }

 protected:
  SpecialTokens special_;
  int strip_leading_spaces_ = 0;
};

// Loads from GGUF metadata (tokenizer.ggml.*).
std::unique_ptr<Tokenizer> load_tokenizer_gguf(const GgufFile& gguf);
// Loads from an HF directory: tokenizer.json plus tokenizer_config.json (added
// tokens, bos/eos, add_bos_token) and generation_config.json (eos ids).
std::unique_ptr<Tokenizer> load_tokenizer_hf(const std::string& model_dir);

// Streaming detokenisation for one sequence: feed ids one at a time and get the
// new text; text is held back while it ends in an incomplete UTF-8 character,
// so every emitted chunk is valid UTF-8 and the chunks concatenate to decode().
// Bytes that can no longer complete a character are emitted as U+FFFD at once.
// O(token length) per push. Not thread-safe (one per sequence); the tokenizer
// must outlive it.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special = true);
  std::string push(int32_t id);  // new complete text (possibly "")
  std::string flush();           // whatever is held back, invalid bytes as U+FFFD

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;    // bytes not yet returned (an incomplete trailing character)
  int strip_left_;         // leading spaces still to strip (decode_strip_leading_spaces)
};

}  // namespace loom
