// Draft-model proposer (proposer_draft.h).
#include "engine/proposer_draft.h"

#include <algorithm>
#include <unordered_map>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/sequence.h"
#include "model/model_runner.h"

namespace loom {
namespace {

class DraftProposer final : public Proposer {
 public:
  DraftProposer(Transformer& draft, int64_t target_vocab, int32_t max_step_tokens)
      : runner_(draft), max_step_tokens_(std::max(1, max_step_tokens)) {
    const int64_t vocab = runner_.config().vocab_size;
    if (vocab > target_vocab)
      LOOM_THROW("the draft model's vocabulary ({} tokens) is larger than the target's ({}): a draft model must "
                 "share the target's tokenizer",
                 vocab, target_vocab);
  }

  int64_t kv_cache_bytes_per_block(int64_t block_size, DType dtype) const override {
    return runner_.kv_cache_bytes_per_block(block_size, dtype);
  }

  void allocate_kv_cache(int64_t num_blocks, int64_t block_size, DType dtype) override {
    cache_ = runner_.allocate_kv_cache(num_blocks, block_size, dtype);
    block_size_ = block_size;
    states_.clear();
    free_.clear();
    for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
  }

  void retain(std::span<const uint64_t> running) override {
    for (auto it = states_.begin(); it != states_.end();) {
      if (std::binary_search(running.begin(), running.end(), it->first)) {
        ++it;
      } else {
        release(it->second);
        it = states_.erase(it);
      }
    }
  }

  void propose(std::span<const Sequence* const> seqs, std::span<const int32_t> max_tokens,
               std::vector<Proposal>& drafts) override {
    LOOM_CHECK(block_size_ > 0, "the draft model's KV cache is not allocated");
    drafts.assign(seqs.size(), {});
    ++tick_;
    active_.clear();
    for (size_t i = 0; i < seqs.size(); ++i)
      if (max_tokens[i] > 0) active_.push_back(seqs[i]->id);
    std::sort(active_.begin(), active_.end());
    try {
      run(seqs, max_tokens, drafts);
    } catch (...) {
      // What the failed pass wrote is unknown: forget these sequences.
      for (const Sequence* s : seqs)
        if (auto it = states_.find(s->id); it != states_.end()) {
          release(it->second);
          states_.erase(it);
        }
      throw;
    }
  }

 private:
  struct State {
    std::vector<int32_t> fed;     // the tokens whose K/V the draft's cache holds
    std::vector<int32_t> blocks;  // the draft cache's blocks for them
    uint64_t used = 0;            // the propose() call that last used it
  };
  // Tokens one sequence feeds in a draft pass, from position `start`.
  struct Feed {
    size_t seq = 0;  // index into propose()'s seqs
    State* state = nullptr;
    int32_t start = 0;
    std::vector<int32_t> tokens;
    bool sample = false;  // its last token's logits give the next draft token
  };

  void release(State& st) {
    free_.insert(free_.end(), st.blocks.begin(), st.blocks.end());
    st.blocks.clear();
    st.fed.clear();
  }

  void shrink(State& st, size_t keep) {
    st.fed.resize(keep);
    const size_t need = (keep + size_t(block_size_) - 1) / size_t(block_size_);
    while (st.blocks.size() > need) {
      free_.push_back(st.blocks.back());
      st.blocks.pop_back();
    }
  }

  // Blocks for `tokens` positions of `st`, evicting the least recently used
  // sequences outside this call when the cache is full. False: no room.
  bool reserve(State& st, size_t tokens) {
    const size_t need = (tokens + size_t(block_size_) - 1) / size_t(block_size_);
    while (st.blocks.size() < need) {
      if (free_.empty() && !evict_one()) return false;
      st.blocks.push_back(free_.back());
      free_.pop_back();
    }
    return true;
  }

  bool evict_one() {
    auto victim = states_.end();
    for (auto it = states_.begin(); it != states_.end(); ++it) {
      if (it->second.blocks.empty() || std::binary_search(active_.begin(), active_.end(), it->first)) continue;
      if (victim == states_.end() || it->second.used < victim->second.used) victim = it;
    }
    if (victim == states_.end()) return false;
    release(victim->second);
    states_.erase(victim);
    return true;
  }

  void run(std::span<const Sequence* const> seqs, std::span<const int32_t> max_tokens,
           std::vector<Proposal>& drafts) {
    // The first pass: each sequence's unseen tokens (within the pass's token
    // cap); those that reach their last token give their first draft token.
    std::vector<Feed> feeds;
    int64_t budget = max_step_tokens_;
    for (size_t i = 0; i < seqs.size() && budget > 0; ++i) {
      if (max_tokens[i] <= 0) continue;
      const std::vector<int32_t>& tokens = seqs[i]->tokens;
      State& st = states_[seqs[i]->id];
      st.used = tick_;
      // Keep the longest prefix the cache still matches, short of the last
      // token (its logits are needed).
      const size_t limit = std::min(st.fed.size(), tokens.size() - 1);
      size_t keep = 0;
      while (keep < limit && st.fed[keep] == tokens[keep]) ++keep;
      shrink(st, keep);
      const auto unseen = int64_t(tokens.size() - keep);
      const int64_t take = std::min(unseen, budget);
      const bool sample = take == unseen;
      // Room for what this pass feeds and the draft tokens fed after it.
      if (!reserve(st, keep + size_t(take) + (sample ? size_t(max_tokens[i] - 1) : 0))) {
        shrink(st, keep);
        continue;
      }
      budget -= take;
      feeds.push_back(Feed{i, &st, int32_t(keep),
                           std::vector<int32_t>(tokens.begin() + int64_t(keep), tokens.begin() + int64_t(keep) + take),
                           sample});
    }
    forward(feeds, drafts);
    // Then one pass per further draft token, for the sequences still proposing.
    for (int32_t round = 1;; ++round) {
      std::vector<Feed> next;
      for (const Feed& f : feeds) {
        std::vector<int32_t>& d = drafts[f.seq].tokens;
        if (!f.sample || int32_t(d.size()) != round || max_tokens[f.seq] <= round) continue;
        next.push_back(Feed{f.seq, f.state, int32_t(f.state->fed.size()), {d.back()}, true});
      }
      if (next.empty()) break;
      forward(next, drafts);
      feeds = std::move(next);
    }
  }

  // One draft pass over `feeds`; each sampling feed's argmax token is
  // appended to its draft.
  void forward(const std::vector<Feed>& feeds, std::vector<Proposal>& drafts) {
    if (feeds.empty()) return;
    StepInput step;
    AttentionMetadata& m = step.attn;
    m.num_seqs = int32_t(feeds.size());
    int32_t max_blocks = 0;
    for (const Feed& f : feeds) max_blocks = std::max(max_blocks, int32_t(f.state->blocks.size()));
    m.max_blocks_per_seq = max_blocks;
    m.query_start.push_back(0);
    const auto bs = int32_t(block_size_);
    for (const Feed& f : feeds) {
      const std::vector<int32_t>& blocks = f.state->blocks;
      for (size_t j = 0; j < f.tokens.size(); ++j) {
        const int32_t p = f.start + int32_t(j);
        step.tokens.push_back(f.tokens[j]);
        step.positions.push_back(p);
        m.slot_mapping.push_back(int64_t(blocks[size_t(p / bs)]) * bs + p % bs);
      }
      m.query_start.push_back(int32_t(step.tokens.size()));
      m.context_lens.push_back(f.start + int32_t(f.tokens.size()));
      for (int32_t b = 0; b < max_blocks; ++b)
        m.block_tables.push_back(b < int32_t(blocks.size()) ? blocks[size_t(b)] : 0);
      if (f.sample) step.logit_rows.push_back(int32_t(step.tokens.size()) - 1);
    }
    const bool any_sample = !step.logit_rows.empty();
    if (!any_sample) step.logit_rows.push_back(int32_t(step.tokens.size()) - 1);  // the model returns a row
    const Tensor logits = runner_.forward(step, cache_);
    for (const Feed& f : feeds) f.state->fed.insert(f.state->fed.end(), f.tokens.begin(), f.tokens.end());
    if (!any_sample) return;
    runner_.backend().argmax_rows(logits, ids_);
    size_t row = 0;
    for (const Feed& f : feeds)
      if (f.sample) drafts[f.seq].tokens.push_back(ids_[row++]);
  }

  ModelRunner runner_;
  int32_t max_step_tokens_;
  KvCache cache_;
  int64_t block_size_ = 0;
  std::vector<int32_t> free_;
  std::unordered_map<uint64_t, State> states_;
  std::vector<uint64_t> active_;  // this call's sequences (sorted): never evicted by it
  uint64_t tick_ = 0;
  std::vector<int32_t> ids_;
};

}  // namespace

std::unique_ptr<Proposer> make_draft_proposer(Transformer& draft, int64_t target_vocab, int32_t max_step_tokens) {
  return std::make_unique<DraftProposer>(draft, target_vocab, max_step_tokens);
}

}  // namespace loom
