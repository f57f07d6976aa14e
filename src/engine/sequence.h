// Sequence: the scheduling state of one generated stream (a Request with n > 1
// has n of them, forked when its prompt is done). Owned by the Scheduler and
// touched only by the engine thread. Token i's KV lives at
// blocks.blocks()[i / block_size], offset i % block_size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "kv/kv_manager.h"

namespace loom {

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
  BlockTable blocks;
  SeqStatus status = SeqStatus::Waiting;
  int32_t num_preemptions = 0;
  std::optional<uint64_t> first_scheduled_step;
  std::optional<Clock::time_point> first_scheduled_time;  // the `now` of that step

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_output_tokens() const { return num_tokens() - prompt_len; }
  // Tokens known but not yet in the cache (1 for a decode, more for a prefill).
  int32_t num_pending() const { return num_tokens() - num_computed; }
};

}  // namespace loom
