// UTF-8 helpers for the tokenizers: decoding with the Unicode "maximal subpart"
// rule for invalid bytes (what Rust's from_utf8_lossy does), the GPT-2
// byte <-> printable-character map used by byte-level BPE, and whitespace tests.
// Everything here is pure and thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace loom::tok {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// One step of UTF-8 decoding at s[pos]. For a valid character, valid is true and
// len its byte length. For invalid input, valid is false and len is the length
// of the maximal subpart to replace by one U+FFFD (at least 1).
struct Utf8Step {
  uint32_t cp;
  uint32_t len;
  bool valid;
};
Utf8Step utf8_step(std::string_view s, size_t pos);

void utf8_append(std::string& out, uint32_t cp);
bool utf8_is_valid(std::string_view s);
// Replaces each maximal invalid subpart by U+FFFD.
std::string utf8_lossy(std::string_view s);
// Length of the longest prefix whose lossy decoding cannot change when more
// bytes are appended: everything but a trailing, still-completable sequence.
size_t utf8_stable_prefix(std::string_view s);
// Number of code points (invalid subparts count one each).
size_t utf8_length(std::string_view s);

// Rust's char::is_whitespace (the Unicode White_Space property).
bool is_unicode_whitespace(uint32_t cp);

// GPT-2 byte-level alphabet: byte -> the UTF-8 of its printable stand-in, and
// back (-1 for a code point that stands for no byte).
const std::array<std::string, 256>& byte_level_chars();
int byte_level_byte(uint32_t cp);

}  // namespace loom::tok
