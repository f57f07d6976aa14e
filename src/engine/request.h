// Request: what a user asked for, immutable once submitted (prompt tokens,
// sampling parameters, priority, deadline, cache salt). The engine turns it
// into one Sequence per requested sample (n); see engine/README.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/pooling.h"
#include "engine/sampling_params.h"
#include "engine/token_constraint.h"

namespace loom {

using RequestId = uint64_t;
using SeqId = uint64_t;
using Clock = std::chrono::steady_clock;

enum class FinishReason : uint8_t { None, Stop, Length, Abort, Error };
std::string_view finish_reason_name(FinishReason reason);  // "stop", "length", "abort", "error"

struct Request {
  std::string external_id;          // caller's id, for logs and outputs only
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  int32_t priority = 0;             // lower values are served first (as in vLLM)
  std::optional<Clock::time_point> deadline;  // not finished by then: aborted
  std::string cache_salt;           // isolates prefix-cache entries (tenant, API key)
  // Fair share: the scheduler splits token service between tenants in
  // proportion to their weights (finite, > 0). "" is a tenant like any other.
  std::string tenant;
  float tenant_weight = 1.0f;
  // Set: each of the request's sequences gets its own constraint from it
  // (structured output); only allowed tokens are ever chosen.
  std::shared_ptr<const TokenConstraintFactory> constraint;
  // Set: a pooling request (an embedding). Its prompt is prefilled, the
  // final-norm hidden states pooled (pooling.h), and it ends with one event
  // carrying the vector (StreamEvent::embedding, finish `stop`); nothing is
  // sampled and its KV blocks are freed in the step that completes the
  // prompt. `params` must keep n = 1 and no prompt_logprobs; the rest of
  // them are validated as usual but not used. No `constraint`.
  std::optional<PoolingParams> pooling;
};

}  // namespace loom
