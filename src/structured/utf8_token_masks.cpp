// Per-state token masks for valid UTF-8 output (utf8_token_masks.h).
#include "structured/utf8_token_masks.h"

#include <algorithm>

namespace loom::structured {

namespace {

// The state after one byte (the well-formed sequences of Unicode's table
// 3-7: no overlongs, no surrogates, nothing past U+10FFFF).
uint8_t step(uint8_t s, uint8_t b) {
  using S = Utf8TokenMasks;
  const bool cont = b >= 0x80 && b <= 0xBF;
  switch (s) {
    case S::Start:
      if (b < 0x80) return S::Start;
      if (b >= 0xC2 && b <= 0xDF) return S::Cont1;
      if (b == 0xE0) return S::Cont2E0;
      if (b == 0xED) return S::Cont2ED;
      if (b >= 0xE1 && b <= 0xEF) return S::Cont2;
      if (b == 0xF0) return S::Cont3F0;
      if (b >= 0xF1 && b <= 0xF3) return S::Cont3;
      if (b == 0xF4) return S::Cont3F4;
      return S::kInvalid;
    case S::Cont1:
      return cont ? S::Start : S::kInvalid;
    case S::Cont2:
      return cont ? S::Cont1 : S::kInvalid;
    case S::Cont2E0:
      return b >= 0xA0 && b <= 0xBF ? S::Cont1 : S::kInvalid;
    case S::Cont2ED:
      return b >= 0x80 && b <= 0x9F ? S::Cont1 : S::kInvalid;
    case S::Cont3:
      return cont ? S::Cont2 : S::kInvalid;
    case S::Cont3F0:
      return b >= 0x90 && b <= 0xBF ? S::Cont2 : S::kInvalid;
    case S::Cont3F4:
      return b >= 0x80 && b <= 0x8F ? S::Cont2 : S::kInvalid;
  }
  return S::kInvalid;
}

}  // namespace

uint8_t Utf8TokenMasks::advance(uint8_t s, std::string_view bytes) {
  for (char c : bytes) {
    if (s == kInvalid) return s;
    s = step(s, static_cast<uint8_t>(c));
  }
  return s;
}

Utf8TokenMasks::Utf8TokenMasks(const std::vector<std::string>& vocab, int64_t words,
                               const std::vector<int32_t>& stop)
    : vocab_(vocab), masks_(kStates, std::vector<uint32_t>(static_cast<size_t>(words), ~0u)) {
  const int64_t n = std::min<int64_t>(int64_t(vocab_.size()), words * 32);
  for (int s = 0; s < kStates; ++s) {
    std::vector<uint32_t>& m = masks_[size_t(s)];
    for (int64_t id = 0; id < n; ++id)
      if (advance(uint8_t(s), vocab_[size_t(id)]) == kInvalid)
        m[size_t(id / 32)] &= ~(1u << (id % 32));
    if (s != Start)
      for (int32_t id : stop)
        if (id >= 0 && id < words * 32) m[size_t(id / 32)] &= ~(1u << (id % 32));
  }
}

uint8_t Utf8TokenMasks::after(uint8_t s, int32_t id) const {
  if (id < 0 || size_t(id) >= vocab_.size()) return s;
  return advance(s, vocab_[size_t(id)]);
}

void Utf8TokenMasks::restrict(uint8_t s, std::span<uint32_t> words) const {
  const std::vector<uint32_t>& m = masks_[s < kStates ? s : Start];
  const size_t n = std::min(words.size(), m.size());
  for (size_t i = 0; i < n; ++i) words[i] &= m[i];
}

}  // namespace loom::structured
