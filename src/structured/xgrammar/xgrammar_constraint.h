// TokenConstraint over xgrammar's GrammarMatcher, and the model vocabulary as
// xgrammar sees it. Internal to src/structured (the only place that includes
// xgrammar's headers).
#pragma once

#include <xgrammar/xgrammar.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/token_constraint.h"
#include "structured/utf8_token_masks.h"

namespace loom {
class Tokenizer;
}

namespace loom::structured {

// The vocabulary as the grammar sees it: each token's bytes as it appears in
// decoded output (special tokens: none, so never allowed), eos ids as the
// stop tokens.
struct GrammarVocab {
  std::vector<std::string> bytes;
  std::vector<int32_t> stop;
};
GrammarVocab grammar_vocab(const Tokenizer& tokenizer, int32_t vocab_size);
// xgrammar's view of it: ids past the tokenizer's up to vocab_size never allowed.
xgrammar::TokenizerInfo make_tokenizer_info(const GrammarVocab& vocab, int32_t vocab_size);

// Matchers of one compiled grammar, their masks also restricted to tokens that
// keep the output valid UTF-8 (`utf8`: shared by every grammar of the
// vocabulary); `tokenizer` (which must outlive them; null: no jump-forward)
// cuts their forced strings into tokens.
class XGrammarConstraintFactory final : public TokenConstraintFactory {
 public:
  XGrammarConstraintFactory(xgrammar::CompiledGrammar grammar, std::string description,
                            std::shared_ptr<const Utf8TokenMasks> utf8, const Tokenizer* tokenizer);
  std::unique_ptr<TokenConstraint> make() const override;
  std::string describe() const override { return description_; }
  const xgrammar::CompiledGrammar& grammar() const { return grammar_; }

 private:
  xgrammar::CompiledGrammar grammar_;
  std::string description_;
  std::shared_ptr<const Utf8TokenMasks> utf8_;
  const Tokenizer* tokenizer_;
};

}  // namespace loom::structured
