// Which tokens keep a model's output valid UTF-8. A grammar constrains
// characters, but a byte-level vocabulary can spell bytes that are no
// character at all: an encoded surrogate (ED A0..BF xx), an overlong form, a
// stray continuation byte. xgrammar's character classes accept UTF-8-encoded
// surrogates as one code point, so a JSON string could pass its maxLength in
// the grammar's count and fail it (and UTF-8 decoding) in the client's. This
// table gives, for each partial-character state of the output so far, the
// tokens whose bytes continue it validly (a token may end mid-character: the
// next one completes it); stop tokens only between characters. Built once
// per vocabulary; immutable and thread-safe after construction.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace loom::structured {

class Utf8TokenMasks {
 public:
  // The UTF-8 decoder's states: between characters, or how many
  // continuation bytes are still due and which range the next must be in.
  static constexpr uint8_t Start = 0, Cont1 = 1, Cont2 = 2, Cont2E0 = 3, Cont2ED = 4, Cont3 = 5,
                           Cont3F0 = 6, Cont3F4 = 7, kStates = 8;
  static constexpr uint8_t kInvalid = 0xFF;

  // vocab[id]: the token's bytes in decoded output ("" = a token that writes
  // nothing: neutral); words: the bitmask's size in 32-bit words (ids past
  // vocab stay allowed: the grammar decides); stop: ids allowed only at Start.
  Utf8TokenMasks(const std::vector<std::string>& vocab, int64_t words,
                 const std::vector<int32_t>& stop);

  // The state after `bytes` from `s`; kInvalid when they break UTF-8.
  static uint8_t advance(uint8_t s, std::string_view bytes);
  // The state after token `id` from `s` (kInvalid as above).
  uint8_t after(uint8_t s, int32_t id) const;
  // ANDs the mask of state `s` into `words`.
  void restrict(uint8_t s, std::span<uint32_t> words) const;

 private:
  std::vector<std::string> vocab_;
  std::vector<std::vector<uint32_t>> masks_;  // [state][word]
};

}  // namespace loom::structured
