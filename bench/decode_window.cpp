#include "decode_window.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace loom::bench {

DecodeWindow steady_decode_window(const std::vector<std::vector<double>>& token_s) {
  DecodeWindow w;
  if (token_s.empty()) return w;
  w.end_s = std::numeric_limits<double>::infinity();
  for (const auto& r : token_s) {
    if (r.size() < 2) return DecodeWindow{};
    w.start_s = std::max(w.start_s, r.front());
    w.end_s = std::min(w.end_s, r.back());
  }
  if (!(w.end_s > w.start_s)) return DecodeWindow{w.start_s, w.start_s, 0};
  for (const auto& r : token_s)
    for (double t : r) w.tokens += (t > w.start_s && t <= w.end_s);
  return w;
}

int32_t tokens_for_decode_window(int32_t batch, int32_t input_len, int32_t decode_steps,
                                 int32_t step_tokens) {
  LOOM_CHECK(batch >= 1 && input_len >= 1 && decode_steps >= 1 && step_tokens >= 1,
             "tokens_for_decode_window({}, {}, {}, {})", batch, input_len, decode_steps,
             step_tokens);
  // While prompts are prefilled, at most batch - 1 decodes share each step,
  // so every step prefills at least step_tokens - (batch - 1) prompt tokens
  // (at least one); a request's first token comes one step after its last
  // chunk at the latest.
  const int64_t per_step = std::max<int64_t>(1, int64_t(step_tokens) - (batch - 1));
  const int64_t prompt = int64_t(batch) * input_len;
  const int64_t prefill_steps = (prompt + per_step - 1) / per_step + batch + 1;
  const int64_t tokens = prefill_steps + decode_steps + 1;
  LOOM_CHECK(tokens <= std::numeric_limits<int32_t>::max(), "{} tokens per request", tokens);
  return int32_t(tokens);
}

}  // namespace loom::bench
