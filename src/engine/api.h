// The engine's public face: what a front end (the HTTP server, `loom
// generate`, the benchmarks) hands in and gets back. A Request goes in through
// EngineApi::submit with a StreamCallback; StreamEvents come back, one per
// sequence per step, on an engine-owned delivery thread (never the thread
// that runs the model). Nothing here names the model, the backend or the KV
// cache: a front end that includes only this header cannot reach them.
#pragma once

#include <boost/container/small_vector.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/step_profile.h"

namespace loom {

enum class EngineErrorKind : uint8_t { None, QueueFull, TooLong, Invalid, Internal, Shutdown };

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// One chosen token, with its logprobs when the request asked for them.
struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;           // raw log-softmax of the chosen token (when logprobs asked)
  std::vector<TokenLogprob> top;  // params.logprobs best raw alternatives, best first
  int32_t rank = 0;               // 1 + tokens with a larger raw logit (when logprobs asked)
};

// One update of one sequence.
struct StreamEvent {
  RequestId request_id = 0;
  int32_t seq_index = 0;
  // New tokens (usually one per step; none on errors), held inline up to 4.
  boost::container::small_vector<int32_t, 4> token_ids;
  std::string text;                    // new text that became safe to stream
  std::vector<SampleResult> logprobs;  // per new token, when the request asked
  // SamplingParams::prompt_logprobs: the logprobs of prompt tokens 1, 2, ...
  // (token 0 has none), all on sequence 0's first event.
  std::vector<SampleResult> prompt_logprobs;
  // Request::pooling: the pooled vector (hidden size floats), on the
  // request's one successful event.
  std::vector<float> embedding;
  FinishReason finish = FinishReason::None;  // set on the sequence's last event
  EngineErrorKind error = EngineErrorKind::None;
  std::string error_message;
  bool request_done = false;           // the request's last event
  // Speculative decoding, on the request's last event: draft tokens
  // verified for it and how many were accepted.
  int32_t spec_draft_tokens = 0;
  int32_t spec_accepted_tokens = 0;
  // On the request's last event: the engine's host time turning its tokens
  // into text (detokenisation and stop-string checks), over its sequences.
  double detokenize_seconds = 0;
  // When the sequence was first scheduled (token events; for queue time).
  std::optional<Clock::time_point> first_scheduled;
};

// Called for every event of one request, in order, never concurrently for
// one request. Runs on the engine's delivery thread (or, for an engine driven
// by run_step() on the caller's thread, on that thread). It may format and
// write responses and may call EngineApi::abort, but must not wait for the
// engine's progress.
using StreamCallback = std::function<void(const StreamEvent&)>;

// A thread-safe unbounded queue of events (a StreamCallback pushes, another
// thread pops): push never blocks the engine.
class EventQueue {
 public:
  void push(StreamEvent e);
  StreamEvent pop();  // blocks until an event is there
  std::optional<StreamEvent> try_pop();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> q_;
};

// The KV pool's occupancy (blocks of block_size token slots).
struct KvCacheStats {
  int32_t num_blocks = 0;
  int32_t used_blocks = 0;    // held by a sequence
  int32_t free_blocks = 0;    // not held (includes cached_free_blocks)
  int32_t cached_blocks = 0;  // registered in the prefix cache (used or free)
  int32_t cached_free_blocks = 0;
  int64_t allocated_slots = 0;  // used_blocks * block_size
  int64_t filled_slots = 0;     // of those, slots holding (or about to hold) a token
  int64_t prefix_queried_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t evictions = 0;
  double kv_waste() const {  // allocated slots not holding a token / allocated slots
    return allocated_slots == 0 ? 0.0 : double(allocated_slots - filled_slots) / double(allocated_slots);
  }
  double prefix_hit_rate() const {
    return prefix_queried_tokens == 0 ? 0.0 : double(prefix_hit_tokens) / double(prefix_queried_tokens);
  }
};

// The KV pool's use over the engine's life, at the end of every step (exact,
// not sampled): the step that held the most blocks, and slots summed over
// every step (so an interval's slot-weighted waste is a difference of sums).
struct KvUsageHistory {
  int32_t peak_used_blocks = 0;
  int64_t peak_allocated_slots = 0;   // at the peak: used_blocks * block_size
  int64_t peak_filled_slots = 0;      // at the peak: tokens stored (or about to be)
  uint64_t allocated_slot_steps = 0;  // sum over steps of allocated_slots
  uint64_t filled_slot_steps = 0;     // sum over steps of filled_slots
  double peak_waste() const {
    return peak_allocated_slots == 0
               ? 0.0
               : double(peak_allocated_slots - peak_filled_slots) / double(peak_allocated_slots);
  }
};

// Host time of TokenConstraint::fill_next_token_bitmask per sequence per
// token (one logits row's mask), in log-spaced buckets: bucket i counts
// times in (bound(i-1), bound(i)] (not cumulative); the last counts the rest.
struct MaskTimeHistogram {
  static constexpr int kNumBounds = 36;  // 1 us * sqrt(2)^i: 1 us .. ~185 ms
  static double bound_seconds(int i);
  std::vector<uint64_t> counts = std::vector<uint64_t>(kNumBounds + 1, 0);
  uint64_t count = 0;
  double sum_seconds = 0;
  void observe(double seconds);
};

struct EngineStats {
  uint64_t steps = 0;
  uint64_t prompt_tokens_computed = 0;
  uint64_t generated_tokens = 0;
  uint64_t argmax_tokens = 0;          // of generated_tokens: argmax taken on the backend
  uint64_t device_sampled_tokens = 0;  // of generated_tokens: drawn by the backend's sampler
  uint64_t async_steps = 0;            // steps whose tokens the next step took on the device
  uint64_t masked_rows = 0;            // logits rows restricted by a TokenConstraint
  MaskTimeHistogram mask_time;         // per masked row
  uint64_t spec_draft_tokens = 0;      // speculative tokens verified
  uint64_t spec_accepted_tokens = 0;   // of those, accepted
  std::vector<uint64_t> spec_accepted_lengths;  // [a]: verify steps that accepted a tokens
  // Jump-forward (in spec_*'s counts too): forced tokens verified, accepted.
  uint64_t jump_forward_tokens = 0;
  uint64_t jump_forward_accepted_tokens = 0;
  uint64_t cached_prompt_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t finished_requests = 0;
  size_t running = 0;
  size_t waiting = 0;
  // A step is being planned or run (published when it starts, so a step that
  // never ends is visible), and since when.
  bool step_in_progress = false;
  std::optional<Clock::time_point> step_started;
  KvCacheStats kv;
  KvUsageHistory kv_history;
  // EngineConfig::profile_steps: where the steps' time went (enabled false when off).
  StepProfile profile;
};

// What a front end calls. Every method may be called from any thread.
class EngineApi {
 public:
  virtual ~EngineApi() = default;
  // Validates the request (throws loom::Error for bad fields) and queues it;
  // admission (queue bounds, context length) happens on the engine thread and
  // a rejection arrives as one event with `error` set and `request_done`.
  virtual RequestId submit(Request request, StreamCallback callback) = 0;
  // Ends the request with finish reason abort; unknown or finished ids are ignored.
  virtual void abort(RequestId id) = 0;
  virtual EngineStats stats() const = 0;
};

}  // namespace loom
