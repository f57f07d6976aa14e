// bench/decode_window: the steady decode window of `loom bench latency`, on
// token timings from a simulated chunked-prefill scheduler (decodes first,
// prompt chunks in the rest of each step's token budget, one second a step).
// At long prompts a batch's first requests finish before its last one starts
// unless each request generates tokens_for_decode_window tokens.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "decode_window.h"

namespace loom::bench {
namespace {

// Token arrival times (seconds) of `batch` requests of input_len prompt
// tokens and `output` generated tokens each, all submitted at t = 0.
std::vector<std::vector<double>> simulate(int32_t batch, int32_t input_len, int32_t output,
                                          int32_t budget) {
  std::vector<int32_t> prefilled(size_t(batch), 0);
  std::vector<std::vector<double>> tokens(static_cast<size_t>(batch));
  for (int step = 1;; ++step) {
    int32_t left = budget;
    bool busy = false;
    for (int32_t r = 0; r < batch; ++r)  // decodes first
      if (prefilled[size_t(r)] == input_len && !tokens[size_t(r)].empty() &&
          int32_t(tokens[size_t(r)].size()) < output && left > 0) {
        tokens[size_t(r)].push_back(step);
        --left;
        busy = true;
      }
    for (int32_t r = 0; r < batch && left > 0; ++r) {  // then prompt chunks
      const int32_t chunk = std::min(left, input_len - prefilled[size_t(r)]);
      if (chunk == 0) continue;
      prefilled[size_t(r)] += chunk;
      left -= chunk;
      busy = true;
      if (prefilled[size_t(r)] == input_len) tokens[size_t(r)].push_back(step);  // the first token
    }
    if (!busy) return tokens;
  }
}

TEST(DecodeWindow, EveryBatchSizeGetsAWindowAtLongPrompts) {
  const int32_t input_len = 7000, output_len = 64, budget = 2048;
  // The plain output length: batch 64's first requests end before its last
  // one starts, and the window is empty (the rate the old report gave: 0).
  const DecodeWindow lost = steady_decode_window(simulate(64, input_len, output_len, budget));
  EXPECT_EQ(lost.tokens, 0);
  EXPECT_EQ(lost.tokens_per_s(), 0.0);
  for (int32_t batch : {1, 4, 16, 64, 200}) {
    const int32_t n = tokens_for_decode_window(batch, input_len, output_len, budget);
    EXPECT_GE(n, output_len + 1);
    const DecodeWindow w = steady_decode_window(simulate(batch, input_len, n, budget));
    // At least output_len steps with every request decoding, one token each a step.
    EXPECT_GE(w.end_s - w.start_s, double(output_len)) << "batch " << batch;
    EXPECT_DOUBLE_EQ(w.tokens_per_s(), double(batch)) << "batch " << batch;
  }
}

TEST(DecodeWindow, WindowEdgesAndEmptyCases) {
  // Two requests: B starts at 2; A ends at 5. Tokens in (2, 5]: A 3, 4, 5; B 3, 4, 5.
  DecodeWindow w = steady_decode_window({{1, 2, 3, 4, 5}, {2, 3, 4, 5, 6, 7}});
  EXPECT_DOUBLE_EQ(w.start_s, 2);
  EXPECT_DOUBLE_EQ(w.end_s, 5);
  EXPECT_EQ(w.tokens, 6);
  EXPECT_DOUBLE_EQ(w.tokens_per_s(), 2.0);
  EXPECT_EQ(steady_decode_window({}).tokens_per_s(), 0.0);
  EXPECT_EQ(steady_decode_window({{1, 2}, {3}}).tokens_per_s(), 0.0);     // one token only
  EXPECT_EQ(steady_decode_window({{1, 2}, {3, 4}}).tokens_per_s(), 0.0);  // A done before B began
  EXPECT_THROW(tokens_for_decode_window(0, 10, 10, 10), Error);
  // The bound: prompts over budget - (batch - 1) tokens a step, a step per request, then the
  // window.
  EXPECT_EQ(tokens_for_decode_window(1, 100, 10, 50), 2 + 1 + 1 + 10 + 1);
}

}  // namespace
}  // namespace loom::bench
