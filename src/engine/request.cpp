// Request-level validation and names.
#include "engine/request.h"

#include <cmath>

#include "core/error.h"

namespace loom {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::None: return "none";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Abort: return "abort";
    case FinishReason::Error: return "error";
  }
  return "unknown";
}

void SamplingParams::validate(int64_t vocab_size) const {
  auto finite = [](float x) { return std::isfinite(x); };
  if (n < 1 || n > 128) LOOM_THROW("n must be in [1, 128], got {}", n);
  if (!finite(temperature) || temperature < 0.0f || temperature > 100.0f)
    LOOM_THROW("temperature must be in [0, 100], got {}", temperature);
  if (top_k < -1) LOOM_THROW("top_k must be -1, 0 (disabled) or positive, got {}", top_k);
  if (!finite(top_p) || top_p < 0.0f || top_p > 1.0f)
    LOOM_THROW("top_p must be in [0, 1], got {}", top_p);
  if (!finite(min_p) || min_p < 0.0f || min_p > 1.0f)
    LOOM_THROW("min_p must be in [0, 1], got {}", min_p);
  if (!finite(repetition_penalty) || repetition_penalty <= 0.0f || repetition_penalty > 100.0f)
    LOOM_THROW("repetition_penalty must be in (0, 100], got {}", repetition_penalty);
  if (!finite(presence_penalty) || std::fabs(presence_penalty) > 2.0f)
    LOOM_THROW("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  if (!finite(frequency_penalty) || std::fabs(frequency_penalty) > 2.0f)
    LOOM_THROW("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  for (const auto& [tok, bias] : logit_bias) {
    if (tok < 0 || tok >= vocab_size) LOOM_THROW("logit_bias token {} out of vocabulary", tok);
    if (!finite(bias) || std::fabs(bias) > 100.0f)
      LOOM_THROW("logit_bias for token {} must be in [-100, 100], got {}", tok, bias);
  }
  for (int32_t tok : stop_token_ids)
    if (tok < 0 || tok >= vocab_size) LOOM_THROW("stop token {} out of vocabulary", tok);
  for (const auto& s : stop)
    if (s.empty()) LOOM_THROW("stop strings must not be empty");
  if (stop.size() > 16) LOOM_THROW("at most 16 stop strings, got {}", stop.size());
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > 20))
    LOOM_THROW("prompt_logprobs must be in [0, 20], got {}", *prompt_logprobs);
  if (max_tokens < (prompt_logprobs ? 0 : 1))
    LOOM_THROW("max_tokens must be at least {}, got {}", prompt_logprobs ? 0 : 1, max_tokens);
  if (max_tokens == 0 && n != 1) LOOM_THROW("max_tokens 0 (prompt scoring) needs n = 1, got n = {}", n);
  if (min_tokens < 0 || min_tokens > max_tokens)
    LOOM_THROW("min_tokens must be in [0, max_tokens], got {}", min_tokens);
  if (logprobs && (*logprobs < 0 || *logprobs > 20))
    LOOM_THROW("logprobs must be in [0, 20], got {}", *logprobs);
}

}  // namespace loom
