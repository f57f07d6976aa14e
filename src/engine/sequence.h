// Sequence: the one record of one generated stream (a Request with n > 1 has
// n of them, forked when its prompt is done): its scheduling state, its KV
// blocks, its output text and stop state, and its token constraint. Owned by
// the Scheduler and touched only by the engine thread. Token i's KV lives at
// blocks.blocks()[i / block_size], offset i % block_size.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/api.h"
#include "engine/request.h"
#include "engine/sequence_output.h"
#include "engine/token_constraint.h"
#include "kv/kv_manager.h"

namespace loom {

// What a request's sequences share: the request as submitted, where its
// events go, and which of its n sequences have ended. Kept alive by its
// sequences and by the events in delivery.
struct RequestState {
  RequestId id = 0;
  Request request;
  StreamCallback callback;
  std::vector<bool> done;  // per sequence index
  int32_t num_done = 0;
  bool forked = false;     // n > 1: the siblings exist (always true for n == 1)
  int32_t draft_tokens = 0;     // speculative decoding: tokens proposed, over all sequences
  int32_t accepted_tokens = 0;  // of those, accepted
  double detokenize_s = 0;      // host time of its sequences' SequenceOutput::append
  bool all_done() const { return num_done == int32_t(done.size()); }
};

enum class SeqStatus : uint8_t { Waiting, Running };

struct Sequence {
  SeqId id = 0;
  RequestId request_id = 0;
  int32_t index = 0;       // 0..n-1 within its request; keys the seeded RNG stream
  int32_t priority = 0;    // lower is served first
  uint64_t arrival = 0;    // admission order of the request (siblings share it)
  uint64_t arrival_step = 0;  // scheduler step at admission (for anti-starvation)
  std::optional<Clock::time_point> deadline;
  uint64_t cache_salt = 0;
  std::string tenant;           // the request's tenant (fair-share accounting)
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t prompt_len = 0;
  int32_t max_tokens = 0;       // generated tokens allowed (for admission checks)
  int32_t num_computed = 0;     // tokens whose KV is in the cache
  int32_t pending_forks = 0;    // siblings still to fork when the prompt finishes
  // Speculative decoding: tokens proposed to follow `tokens` (Scheduler::
  // set_draft), verified by its next step (the policy's own per-sequence
  // state lives with the executor's SpecPolicy).
  std::vector<int32_t> draft;
  // SamplingParams::prompt_logprobs: the next prompt token to score, and the
  // scores so far (handed over on the sequence's first event).
  int32_t prompt_logprobs_next = 1;
  std::vector<SampleResult> prompt_scores;
  // Request::pooling: what the prompt's steps pooled so far.
  std::optional<PooledState> pooled;
  BlockTable blocks;
  SeqStatus status = SeqStatus::Waiting;
  int32_t num_preemptions = 0;
  std::optional<uint64_t> first_scheduled_step;
  std::optional<Clock::time_point> first_scheduled_time;  // the `now` of that step
  // Declared before `output`, which reads the request's parameters.
  std::shared_ptr<RequestState> request;
  std::unique_ptr<SequenceOutput> output;          // text, stop tokens / strings, lengths
  std::unique_ptr<TokenConstraint> constraint;     // null: any token may come next

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_output_tokens() const { return num_tokens() - prompt_len; }
  // Tokens known but not yet in the cache (1 for a decode, more for a prefill).
  int32_t num_pending() const { return num_tokens() - num_computed; }
  const SamplingParams& params() const { return request->request.params; }
  // Tokens banned now: eos / stop ids while the output is shorter than min_tokens.
  std::span<const int32_t> banned_now() const {
    if (num_output_tokens() >= params().min_tokens) return {};
    return output->min_tokens_bans();
  }
};

}  // namespace loom
