// NFC normalisation (stub until the tables land).
#include "tokenizer/normalize.h"

namespace loom::tok {

std::string nfc(std::string_view text) { return std::string(text); }

}  // namespace loom::tok
