// Shared by the loaders: end-of-generation ids from well-known token texts.
#pragma once

#include <cstdint>
#include <vector>

#include "tokenizer/bpe_tokenizer.h"

namespace loom::tok {

// Appends to special.eos_ids (deduplicated, eos first): eos itself, then
// `extra` ids, then every special added token whose text marks the end of a
// turn in a well-known chat format (<|im_end|>, <|eot_id|>, <end_of_turn>...).
void collect_eos_ids(BpeConfig& cfg, const std::vector<int32_t>& extra);

}  // namespace loom::tok
