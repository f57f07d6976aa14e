// The matcher behind one constrained sequence: bitmask fill, accept, rollback.
#include "structured/xgrammar/xgrammar_constraint.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace loom::structured {

namespace {

class XGrammarConstraint final : public TokenConstraint {
 public:
  XGrammarConstraint(xgrammar::GrammarMatcher matcher, int32_t vocab_size,
                     std::shared_ptr<const Utf8TokenMasks> utf8,
                     std::vector<uint8_t> states = {Utf8TokenMasks::Start})
      : matcher_(std::move(matcher)),
        vocab_size_(vocab_size),
        words_(xgrammar::GetBitmaskSize(vocab_size)),
        utf8_(std::move(utf8)),
        states_(std::move(states)) {}

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
    if (!matcher_.FillNextTokenBitmask(&t))  // every token: the UTF-8 rule still applies
      std::fill(words.begin(), words.begin() + words_, ~0u);
    utf8_->restrict(states_.back(), words.first(size_t(words_)));
    return true;
  }

  bool accept_token(int32_t token) override {
    if (token < 0 || token >= vocab_size_) return false;
    const uint8_t next = utf8_->after(states_.back(), token);
    if (next == Utf8TokenMasks::kInvalid || !matcher_.AcceptToken(token)) return false;
    states_.push_back(next);
    return true;
  }

  void rollback(int32_t n) override {
    if (n <= 0) return;
    matcher_.Rollback(n);
    states_.resize(states_.size() - std::min(size_t(n), states_.size() - 1));
  }

  bool is_terminated() const override { return matcher_.IsTerminated(); }

  std::unique_ptr<TokenConstraint> clone() const override {
    return std::make_unique<XGrammarConstraint>(matcher_.Fork(), vocab_size_, utf8_, states_);
  }

 private:
  xgrammar::GrammarMatcher matcher_;
  int32_t vocab_size_;
  int64_t words_;
  std::shared_ptr<const Utf8TokenMasks> utf8_;
  std::vector<uint8_t> states_;  // the UTF-8 state before the first and after each accepted token
};

}  // namespace

GrammarVocab grammar_vocab(const Tokenizer& tokenizer, int32_t vocab_size) {
  const int32_t n = tokenizer.vocab_size();
  LOOM_CHECK(vocab_size >= n, "model vocabulary {} < tokenizer vocabulary {}", vocab_size, n);
  GrammarVocab v;
  v.bytes.resize(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id)
    if (!tokenizer.is_special(id)) v.bytes[size_t(id)] = tokenizer.token_bytes(id, false);
  for (int32_t id : tokenizer.special().eos_ids)
    if (id >= 0 && id < n) v.stop.push_back(id);
  return v;
}

xgrammar::TokenizerInfo make_tokenizer_info(const GrammarVocab& vocab, int32_t vocab_size) {
  return xgrammar::TokenizerInfo(vocab.bytes, xgrammar::VocabType::RAW, vocab_size, vocab.stop);
}

XGrammarConstraintFactory::XGrammarConstraintFactory(xgrammar::CompiledGrammar grammar,
                                                     std::string description,
                                                     std::shared_ptr<const Utf8TokenMasks> utf8)
    : grammar_(std::move(grammar)), description_(std::move(description)), utf8_(std::move(utf8)) {}

std::unique_ptr<TokenConstraint> XGrammarConstraintFactory::make() const {
  return std::make_unique<XGrammarConstraint>(xgrammar::GrammarMatcher(grammar_),
                                              grammar_.GetTokenizerInfo().GetVocabSize(), utf8_);
}

}  // namespace loom::structured
