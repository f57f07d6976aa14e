// SequenceOutput: detokenisation, stop strings and stop tokens for one sequence.
#include "engine/sequence_output.h"

#include <algorithm>

namespace loom {

SequenceOutput::SequenceOutput(const Tokenizer* tokenizer, const SamplingParams& params,
                               std::span<const int32_t> eos_ids)
    : params_(params), eos_ids_(eos_ids.begin(), eos_ids.end()) {
  if (tokenizer) decoder_ = std::make_unique<IncrementalDecoder>(*tokenizer, params.skip_special_tokens);
  for (const auto& s : params.stop) max_stop_len_ = std::max(max_stop_len_, s.size());
  if (!params.ignore_eos) bans_ = eos_ids_;
  bans_.insert(bans_.end(), params.stop_token_ids.begin(), params.stop_token_ids.end());
}

bool SequenceOutput::is_stop_token(int32_t token) const {
  if (std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(), token) !=
      params_.stop_token_ids.end())
    return true;
  return !params_.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
}

// Releases text_[emitted_, end) (all) or up to the hold-back point, never
// splitting a UTF-8 character.
std::string SequenceOutput::take_safe(bool all) {
  size_t end = text_.size();
  if (!all && max_stop_len_ > 1) {
    end = end >= max_stop_len_ - 1 ? end - (max_stop_len_ - 1) : 0;
    while (end > emitted_ && end < text_.size() &&
           (static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80)
      --end;
  }
  if (end <= emitted_) return {};
  std::string out = text_.substr(emitted_, end - emitted_);
  emitted_ = end;
  return out;
}

std::string SequenceOutput::append(int32_t token, int32_t num_output, FinishReason* finish) {
  *finish = FinishReason::None;
  if (finished_) return {};
  // Below min_tokens the sampler bans stop tokens; they cannot end it here either.
  if (is_stop_token(token) && num_output > params_.min_tokens) {
    *finish = FinishReason::Stop;
    finished_ = true;
    if (decoder_) text_ += decoder_->flush();
    return take_safe(true);
  }
  const size_t before = text_.size();
  if (decoder_) text_ += decoder_->push(token);
  if (!params_.stop.empty() && num_output >= params_.min_tokens) {
    const size_t from = before >= max_stop_len_ - 1 ? before - (max_stop_len_ - 1) : 0;
    size_t best = std::string::npos, best_len = 0;
    for (const auto& s : params_.stop) {
      const size_t at = text_.find(s, from);
      if (at != std::string::npos && at < best) {
        best = at;
        best_len = s.size();
      }
    }
    if (best != std::string::npos) {
      text_.resize(params_.include_stop_str_in_output ? best + best_len : best);
      emitted_ = std::min(emitted_, text_.size());
      *finish = FinishReason::Stop;
      finished_ = true;
      return take_safe(true);
    }
  }
  if (num_output >= params_.max_tokens) {
    *finish = FinishReason::Length;
    finished_ = true;
    if (decoder_) text_ += decoder_->flush();
    return take_safe(true);
  }
  return take_safe(false);
}

std::string SequenceOutput::flush() {
  if (!finished_ && decoder_) text_ += decoder_->flush();
  finished_ = true;
  return take_safe(true);
}

}  // namespace loom
