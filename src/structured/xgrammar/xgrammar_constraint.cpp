// The matcher behind one constrained sequence: bitmask fill, accept, rollback,
// and the forced continuation (xgrammar's jump-forward string, tokenised).
#include "structured/xgrammar/xgrammar_constraint.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace loom::structured {

namespace {

// Jump-forward: bytes of forced text looked at per token asked for (a token of
// the default vocabulary is rarely longer), which bounds the grammar walk.
constexpr int32_t kForcedBytesPerToken = 16;

class XGrammarConstraint final : public TokenConstraint {
 public:
  XGrammarConstraint(xgrammar::GrammarMatcher matcher, int32_t vocab_size,
                     std::shared_ptr<const Utf8TokenMasks> utf8, const Tokenizer* tokenizer,
                     std::vector<uint8_t> states = {Utf8TokenMasks::Start})
      : matcher_(std::move(matcher)),
        vocab_size_(vocab_size),
        words_(xgrammar::GetBitmaskSize(vocab_size)),
        utf8_(std::move(utf8)),
        tokenizer_(tokenizer),
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
    return std::make_unique<XGrammarConstraint>(matcher_.Fork(), vocab_size_, utf8_, tokenizer_,
                                                states_);
  }

  bool jumps_forward() const override { return tokenizer_ != nullptr; }

  // Whether the output may end after `text` (a stop token may follow it).
  bool completed_after(const std::string& text) {
    if (!matcher_.AcceptString(text)) return false;
    const bool completed = matcher_.IsCompleted();
    matcher_.Rollback(1);  // AcceptString is one step
    return completed;
  }

  // The forced string as the tokenizer cuts it on its own: the model usually
  // cuts it the same way (its training text was tokenised so), except at the
  // end, where the forced text's last token would merge with what follows
  // (a key's closing quote with its `:`): that token is left out unless
  // the output may end there. Where the model cuts it otherwise (a shorter token
  // it prefers), the verifier settles it. Only the tokens that spell the
  // string exactly are kept (a tokenizer that adds a leading space, a string
  // cut inside a character).
  void forced_tokens(int32_t max_tokens, std::vector<int32_t>& out) override {
    out.clear();
    if (tokenizer_ == nullptr || max_tokens <= 0 || matcher_.IsTerminated()) return;
    const int32_t max_bytes = kForcedBytesPerToken * max_tokens;
    const std::string forced = matcher_.FindJumpForwardString(max_bytes);
    if (forced.empty()) return;
    out = tokenizer_->encode(forced, /*add_special=*/false, /*parse_special=*/true);
    size_t spelled = 0, kept = 0;
    for (; kept < out.size(); ++kept) {
      const std::string bytes = tokenizer_->token_bytes(out[kept], false);
      if (bytes.empty() || forced.compare(spelled, bytes.size(), bytes) != 0) break;
      spelled += bytes.size();
    }
    out.resize(kept);
    if (out.empty()) return;
    if (int64_t(out.size()) > max_tokens) {
      out.resize(size_t(max_tokens));
    } else if (spelled < forced.size() || int64_t(forced.size()) >= max_bytes ||
               !completed_after(forced)) {
      out.pop_back();
    }
  }

 private:
  xgrammar::GrammarMatcher matcher_;
  int32_t vocab_size_;
  int64_t words_;
  std::shared_ptr<const Utf8TokenMasks> utf8_;
  const Tokenizer* tokenizer_;   // null: no jump-forward
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
                                                     std::shared_ptr<const Utf8TokenMasks> utf8,
                                                     const Tokenizer* tokenizer)
    : grammar_(std::move(grammar)),
      description_(std::move(description)),
      utf8_(std::move(utf8)),
      tokenizer_(tokenizer) {}

std::unique_ptr<TokenConstraint> XGrammarConstraintFactory::make() const {
  return std::make_unique<XGrammarConstraint>(xgrammar::GrammarMatcher(grammar_),
                                              grammar_.GetTokenizerInfo().GetVocabSize(), utf8_,
                                              tokenizer_);
}

}  // namespace loom::structured
