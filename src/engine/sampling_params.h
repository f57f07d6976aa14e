// SamplingParams: how one request's tokens are chosen and when its sequences
// stop. Field meanings follow the OpenAI / vLLM completions API. Immutable
// after validate(); shared by every Sequence of the request.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace loom {

struct SamplingParams {
  int32_t n = 1;                   // sequences generated for the request
  float temperature = 1.0f;        // 0: greedy
  int32_t top_k = 0;               // <= 0: disabled
  float top_p = 1.0f;              // 1: disabled
  float min_p = 0.0f;              // 0: disabled
  float repetition_penalty = 1.0f; // HF style, over prompt and output tokens; 1: disabled
  float presence_penalty = 0.0f;   // OpenAI style, over output tokens
  float frequency_penalty = 0.0f;  // OpenAI style, over output tokens
  std::map<int32_t, float> logit_bias;  // token -> bias added to the logit
  std::optional<uint64_t> seed;    // set: samples depend only on (seed, sequence index, step)
  std::vector<int32_t> stop_token_ids;  // besides the tokenizer's eos ids
  std::vector<std::string> stop;   // stop strings: output text is cut before them
  bool include_stop_str_in_output = false;
  int32_t max_tokens = 16;         // generated tokens per sequence
  int32_t min_tokens = 0;          // eos / stop ids are banned until this many
  bool ignore_eos = false;         // eos does not stop (stop_token_ids still do)
  std::optional<int32_t> logprobs; // return the chosen token's logprob and this many top ones
  // Score the prompt: each prompt token's logprob given the tokens before it
  // (none for the first) and this many top alternatives. With it, max_tokens
  // may be 0 (score only). Such requests never take prefix-cache hits (every
  // prompt position must be computed).
  std::optional<int32_t> prompt_logprobs;
  bool skip_special_tokens = true; // in the output text

  bool greedy() const { return temperature <= 0.0f; }
  // Greedy, and the token is the logits' own argmax: no logprobs, penalties
  // or bias edit them (min_tokens bans aside: they depend on the output).
  bool argmax_only() const {
    return greedy() && !logprobs && repetition_penalty == 1.0f && presence_penalty == 0.0f &&
           frequency_penalty == 0.0f && logit_bias.empty();
  }
  // Throws loom::Error (a bad request) when a field is out of range.
  void validate(int64_t vocab_size) const;
};

}  // namespace loom
