// N-gram (prompt lookup) proposer: no weights, a scan of the sequence's own
// tokens. Code edits, summaries and answers that quote their input repeat
// long runs of the prompt, which this finds.
#include <algorithm>

#include "core/error.h"
#include "engine/proposer.h"
#include "engine/sequence.h"

namespace loom {

int32_t ngram_propose(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n,
                      int32_t max_tokens, std::vector<int32_t>& out) {
  out.clear();
  const auto len = static_cast<int64_t>(tokens.size());
  if (max_tokens <= 0) return 0;
  for (int32_t n = std::min<int64_t>(max_n, len - 1); n >= min_n; --n) {
    const std::span<const int32_t> tail = tokens.subspan(size_t(len - n));
    // The latest earlier occurrence whose continuation is known.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(tail.begin(), tail.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t count = std::min<int64_t>(max_tokens, len - from);
      out.assign(tokens.begin() + from, tokens.begin() + from + count);
      return n;
    }
  }
  return 0;
}

namespace {

class NgramProposer final : public Proposer {
 public:
  NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {
    LOOM_CHECK(min_n >= 1 && max_n >= min_n, "n-gram sizes [{}, {}]", min_n, max_n);
  }
  void propose(std::span<const Sequence* const> seqs, std::span<const int32_t> max_tokens,
               std::vector<Proposal>& drafts) override {
    drafts.resize(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i)
      drafts[i].quality =
          ngram_propose(seqs[i]->tokens, min_n_, max_n_, max_tokens[i], drafts[i].tokens);
  }
  bool free_proposals() const override { return true; }

 private:
  int32_t min_n_, max_n_;
};

}  // namespace

std::unique_ptr<Proposer> make_ngram_proposer(int32_t min_n, int32_t max_n) {
  return std::make_unique<NgramProposer>(min_n, max_n);
}

}  // namespace loom
