// Unicode normalisation for tokenizer normalisers: NFC (canonical
// decomposition, canonical ordering, canonical composition), from tables
// generated out of the Unicode Character Database (unicode_nfc_data.cpp).
#pragma once

#include <string>
#include <string_view>

namespace loom::tok {

// NFC of valid UTF-8 text.
std::string nfc(std::string_view text);

}  // namespace loom::tok
