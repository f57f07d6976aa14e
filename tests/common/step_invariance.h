// Batch invariance of a whole forward pass, shared by the fixture models'
// test (tests/model/test_step_invariance.cpp) and the real GGUF models'
// (tests/model/test_real_step_invariance.cpp): a prompt's logits are the same
// bits whether it is prefilled in one step, in chunks (as after a prefix-cache
// hit or with chunked prefill), one token per step (decode), or together with
// other sequences in one step. Greedy decoding could otherwise pick another
// token for a streamed request than for the same request sent alone. The
// prompt is longer than attention's key chunk (64) and than the fixtures'
// sliding windows, so chunk and window edges fall in different places in each
// schedule. With a reference model (the same weights, run another way: e.g.
// without piecewise steps), the whole-prompt logits every schedule is
// compared with come from it, on its own cache.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/transformer.h"
#include "paged_step.h"

namespace loom::testing {

class StepInvarianceCheck {
 public:
  static constexpr int64_t kBlockSize = 4;
  static constexpr int64_t kNumBlocks = 160;
  static constexpr size_t kPromptLen = 90;

  StepInvarianceCheck(Transformer& model, Backend& backend, int64_t vocab,
                      Transformer* reference = nullptr)
      : model_(model),
        backend_(backend),
        cache_(model.allocate_kv_cache(kNumBlocks, kBlockSize, DType::F32)),
        reference_(reference) {
    for (size_t i = 0; i < kPromptLen; ++i) {
      prompt_.push_back(static_cast<int32_t>((i * 7919u + 13u) % static_cast<uint64_t>(vocab)));
      other_.push_back(static_cast<int32_t>((i * 104729u + 5u) % static_cast<uint64_t>(vocab)));
    }
  }

  void run() {
    PagedSequence whole;
    Rows one;
    if (reference_) {
      KvCache cache = reference_->allocate_kv_cache(kNumBlocks, kBlockSize, DType::F32);
      one = logits_to_rows(backend_, reference_->forward(
                                         make_paged_step({{&whole, prompt_}}, pool_, kBlockSize), cache));
    } else {
      one = step({{&whole, prompt_}}, 0);
    }

    // Two chunks, the second as after a prefix-cache hit on the first.
    PagedSequence chunked;
    step({{&chunked, slice(prompt_, 0, 37)}}, 0);
    expect_same_bits(step({{&chunked, slice(prompt_, 37, kPromptLen)}}, 0), one, 37,
                     "second chunk");

    // Token by token for the last positions (decode steps: one row).
    PagedSequence decode;
    step({{&decode, slice(prompt_, 0, 70)}}, 0);
    for (size_t i = 70; i < kPromptLen; ++i)
      expect_same_bits(step({{&decode, {prompt_[i]}}}, 0), one, i, "decode step");

    // Mixed step: another sequence decoding before it and one prefilling after;
    // then a two-row batch.
    PagedSequence a, b, c;
    step({{&a, slice(other_, 0, 20)}}, 0);
    expect_same_bits(
        step({{&a, {other_[20]}}, {&b, slice(prompt_, 0, 50)}, {&c, slice(other_, 0, 9)}}, 1), one,
        0, "mixed step");
    expect_same_bits(step({{&c, slice(other_, 9, 12)}, {&b, slice(prompt_, 50, 52)}}, 1), one, 50,
                     "two-row batch");
  }

 private:
  using Rows = std::vector<std::vector<float>>;

  // Runs one step of (sequence, new tokens) parts; the logits of part `keep`.
  Rows step(std::vector<std::pair<PagedSequence*, std::vector<int32_t>>> parts, size_t keep) {
    size_t first = 0;
    for (size_t p = 0; p < keep; ++p) first += parts[p].second.size();
    const size_t count = parts[keep].second.size();
    Rows rows =
        logits_to_rows(backend_, model_.forward(make_paged_step(parts, pool_, kBlockSize), cache_));
    return Rows(rows.begin() + static_cast<long>(first),
                rows.begin() + static_cast<long>(first + count));
  }

  static std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t b, size_t e) {
    return std::vector<int32_t>(v.begin() + static_cast<long>(b), v.begin() + static_cast<long>(e));
  }

  static void expect_same_bits(const Rows& got, const Rows& want, size_t first, const char* what) {
    ASSERT_LE(got.size() + first, want.size()) << what;
    for (size_t r = 0; r < got.size(); ++r) {
      ASSERT_EQ(got[r].size(), want[first + r].size());
      if (std::memcmp(got[r].data(), want[first + r].data(), got[r].size() * 4) == 0) continue;
      size_t j = 0;
      while (std::memcmp(&got[r][j], &want[first + r][j], 4) == 0) ++j;
      ADD_FAILURE() << what << ": position " << first + r << " logit " << j << " = " << got[r][j]
                    << ", one step gives " << want[first + r][j];
      return;
    }
  }

  Transformer& model_;
  Backend& backend_;
  KvCache cache_;
  Transformer* reference_;
  ShuffledBlockPool pool_{kNumBlocks, 7};
  std::vector<int32_t> prompt_, other_;
};

}  // namespace loom::testing
