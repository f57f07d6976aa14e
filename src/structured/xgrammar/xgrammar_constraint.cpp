// The matcher behind one constrained sequence: bitmask fill, accept, rollback.
#include "structured/xgrammar/xgrammar_constraint.h"

#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace loom::structured {

namespace {

class XGrammarConstraint final : public TokenConstraint {
 public:
  explicit XGrammarConstraint(xgrammar::GrammarMatcher matcher, int32_t vocab_size)
      : matcher_(std::move(matcher)),
        vocab_size_(vocab_size),
        words_(xgrammar::GetBitmaskSize(vocab_size)) {}

  bool fill_next_token_bitmask(std::span<uint32_t> words) override {
    LOOM_CHECK(int64_t(words.size()) >= words_, "bitmask of {} words, the grammar needs {}",
               words.size(), words_);
    // xgrammar writes int32 words with the same bit order (bit t % 32 of word
    // t / 32); words past its vocabulary stay cleared (never allowed).
    int64_t shape[1] = {words_};
    DLTensor t{};
    t.data = words.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = xgrammar::GetBitmaskDLType();
    t.shape = shape;
    t.strides = nullptr;
    t.byte_offset = 0;
    return matcher_.FillNextTokenBitmask(&t);
  }

  bool accept_token(int32_t token) override {
    if (token < 0 || token >= vocab_size_) return false;
    return matcher_.AcceptToken(token);
  }

  void rollback(int32_t n) override {
    if (n > 0) matcher_.Rollback(n);
  }

  bool is_terminated() const override { return matcher_.IsTerminated(); }

  std::unique_ptr<TokenConstraint> clone() const override {
    return std::make_unique<XGrammarConstraint>(matcher_.Fork(), vocab_size_);
  }

 private:
  xgrammar::GrammarMatcher matcher_;
  int32_t vocab_size_;
  int64_t words_;
};

}  // namespace

xgrammar::TokenizerInfo make_tokenizer_info(const Tokenizer& tokenizer, int32_t vocab_size) {
  const int32_t n = tokenizer.vocab_size();
  LOOM_CHECK(vocab_size >= n, "model vocabulary {} < tokenizer vocabulary {}", vocab_size, n);
  std::vector<std::string> vocab(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id)
    if (!tokenizer.is_special(id)) vocab[size_t(id)] = tokenizer.token_bytes(id, false);
  std::vector<int32_t> stop;
  for (int32_t id : tokenizer.special().eos_ids)
    if (id >= 0 && id < n) stop.push_back(id);
  return xgrammar::TokenizerInfo(vocab, xgrammar::VocabType::RAW, vocab_size, stop);
}

XGrammarConstraintFactory::XGrammarConstraintFactory(xgrammar::CompiledGrammar grammar,
                                                     std::string description)
    : grammar_(std::move(grammar)), description_(std::move(description)) {}

std::unique_ptr<TokenConstraint> XGrammarConstraintFactory::make() const {
  return std::make_unique<XGrammarConstraint>(xgrammar::GrammarMatcher(grammar_),
                                              grammar_.GetTokenizerInfo().GetVocabSize());
}

}  // namespace loom::structured
