// End-of-generation id collection.
#include "tokenizer/special_tokens.h"

#include <algorithm>
#include <string_view>

namespace loom::tok {

void collect_eos_ids(BpeConfig& cfg, const std::vector<int32_t>& extra) {
  auto& ids = cfg.special.eos_ids;
  auto add = [&ids, &cfg](int32_t id) {
    if (id >= 0 && static_cast<size_t>(id) < cfg.tokens.size() &&
        std::find(ids.begin(), ids.end(), id) == ids.end())
      ids.push_back(id);
  };
  if (cfg.special.eos) add(*cfg.special.eos);
  for (int32_t id : extra) add(id);
  static constexpr std::string_view kEndOfTurn[] = {
      "<|im_end|>",  "<|eot_id|>",      "<|eom_id|>", "<end_of_turn>", "<|end|>",
      "<|endoftext|>", "<|end_of_text|>", "<|return|>", "<｜end▁of▁sentence｜>", "<EOT>"};
  for (const AddedToken& a : cfg.added)
    if (a.special && std::find(std::begin(kEndOfTurn), std::end(kEndOfTurn), a.content) != std::end(kEndOfTurn))
      add(a.id);
}

}  // namespace loom::tok
