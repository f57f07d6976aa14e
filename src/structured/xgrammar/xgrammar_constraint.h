// TokenConstraint over xgrammar's GrammarMatcher, and the model vocabulary as
// xgrammar sees it. Internal to src/structured (the only place that includes
// xgrammar's headers).
#pragma once

#include <xgrammar/xgrammar.h>

#include <cstdint>
#include <memory>
#include <string>

#include "engine/token_constraint.h"

namespace loom {
class Tokenizer;
}

namespace loom::structured {

// Each token's bytes as it appears in decoded output (special tokens: none,
// so never allowed), eos ids as the stop tokens, ids past the tokenizer's up
// to vocab_size as never allowed.
xgrammar::TokenizerInfo make_tokenizer_info(const Tokenizer& tokenizer, int32_t vocab_size);

class XGrammarConstraintFactory final : public TokenConstraintFactory {
 public:
  XGrammarConstraintFactory(xgrammar::CompiledGrammar grammar, std::string description);
  std::unique_ptr<TokenConstraint> make() const override;
  std::string describe() const override { return description_; }
  const xgrammar::CompiledGrammar& grammar() const { return grammar_; }

 private:
  xgrammar::CompiledGrammar grammar_;
  std::string description_;
};

}  // namespace loom::structured
