// SequenceOutput: one sequence's generated tokens turned into text, and its
// stop conditions: stop token ids / eos, stop strings (matched in the decoded
// text, so also across token boundaries; the text is cut before the stop
// string), max_tokens. Streaming holds back the last (longest stop - 1) bytes
// so a stop string is never half-emitted, and only emits valid UTF-8.
// Engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/sampling_params.h"
#include "tokenizer/tokenizer.h"

namespace loom {

class SequenceOutput {
 public:
  // tokenizer may be null (no text); eos_ids: the tokenizer's/model's ids
  // that end generation. params must outlive this object.
  SequenceOutput(const Tokenizer* tokenizer, const SamplingParams& params,
                 std::span<const int32_t> eos_ids);

  // Adds a sampled token (output token count now num_output). Returns the text
  // that became safe to stream; sets finish when the sequence ends with it.
  std::string append(int32_t token, int32_t num_output, FinishReason* finish);
  // Text still held back, released when the sequence ends for another reason
  // (length via append already releases it; abort, error).
  std::string flush();

  const std::string& text() const { return text_; }
  // Tokens that must not be sampled while output is shorter than min_tokens.
  const std::vector<int32_t>& min_tokens_bans() const { return bans_; }

 private:
  bool is_stop_token(int32_t token) const;
  std::string take_safe(bool all);

  const SamplingParams& params_;
  std::unique_ptr<IncrementalDecoder> decoder_;
  std::vector<int32_t> eos_ids_;
  std::vector<int32_t> bans_;
  std::string text_;
  size_t emitted_ = 0;      // bytes of text_ already returned
  size_t max_stop_len_ = 0;
  bool finished_ = false;
};

}  // namespace loom
