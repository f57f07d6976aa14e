// Engine: continuous batching of many requests over one model. The engine
// loop ties three pieces together: the Scheduler plans a step and applies its
// output (it owns every Sequence: blocks, text, stop state), the StepExecutor
// runs the plan on the model and chooses its tokens (it owns the KV cache and
// every backend call), and EventDelivery hands the resulting StreamEvents to
// the requests' callbacks on a thread of its own. One engine thread runs the
// loop; other threads only submit()/abort() (a locked inbox) and read
// stats(). Life cycle, invariants and threads: engine/README.md.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "engine/api.h"
#include "engine/proposer.h"
#include "engine/scheduler.h"

namespace loom {

class EventDelivery;
class KvManager;
class ModelRunner;
class StepExecutor;
class Tokenizer;
class Transformer;

struct EngineConfig {
  int32_t block_size = 16;
  int32_t num_kv_blocks = 0;      // > 0: pool size in blocks; else from kv_cache_bytes
  int64_t kv_cache_bytes = int64_t(1) << 30;
  DType kv_dtype = DType::F32;
  bool enable_prefix_caching = true;
  SchedulerConfig scheduler;      // max_model_len 0: the model's max_position (and the pool)
  uint64_t seed = 0x10011;        // engine-wide generator for unseeded requests
  std::vector<int32_t> eos_ids;   // ids ending generation; empty: the tokenizer's eos_ids
  // Rows whose Sampler result would be the plain argmax (greedy, no logprobs,
  // penalties, bias or bans) take it from Backend::argmax_rows, and only the
  // other rows' logits are copied to the host. Off: every row is copied and
  // sampled on the host (same tokens; for tests and comparisons).
  bool greedy_fast_path = true;
  // Rows that sample (not greedy, no logprobs) draw on the device through
  // Backend::sample_rows when the backend has it; off: on the host.
  bool device_sampling = true;
  // Speculative decoding (proposer.h): off unless method and num_tokens are set.
  SpeculativeConfig speculative;
  // Jump-forward of a constraint's forced tokens (proposer.h): on by default.
  JumpForwardConfig jump_forward;
  // Async scheduling: a step whose tokens are all chosen on the device
  // (argmax or device sampling; no logprobs, no n > 1 fork) leaves them
  // there; the next step is planned and launched with those tokens as its
  // inputs (placeholders resolved on the device) before the host reads them,
  // so the host's scheduling and streaming overlap the GPU's work. A sequence
  // that stops on that token has computed one token more than needed (its
  // blocks are freed then). Same tokens either way. Off: every step waits for
  // its tokens. Never used for a model over several ranks.
  bool async_scheduling = true;
  // Collect the step profile (EngineStats::profile; engine/step_profile.h):
  // host phases of every loop turn, device spans and gaps from timing marks
  // on the backend's stream. Off: no clock readings and no marks.
  bool profile_steps = false;
};

struct SequenceResult {
  int32_t index = 0;
  std::vector<int32_t> output_ids;
  std::string text;
  FinishReason finish_reason = FinishReason::None;
  std::vector<SampleResult> logprobs;
  // SamplingParams::prompt_logprobs: prompt tokens 1.. (token 0 has none).
  std::vector<SampleResult> prompt_logprobs;
  std::vector<float> embedding;  // Request::pooling: the pooled vector
};

struct Result {
  RequestId id = 0;
  std::string external_id;
  int32_t prompt_tokens = 0;
  std::vector<SequenceResult> sequences;  // by index
  EngineErrorKind error = EngineErrorKind::None;
  std::string error_message;
};

class Engine final : public EngineApi {
 public:
  // model (and tokenizer, which may be null: no text) must outlive the engine.
  Engine(Transformer& model, const Tokenizer* tokenizer, EngineConfig config);
  // Runs the model through `runner` (tensor parallelism: rank 0's runner,
  // which broadcasts every step to the other ranks). It must outlive the engine.
  Engine(ModelRunner& runner, const Tokenizer* tokenizer, EngineConfig config);
  ~Engine() override;  // stops the engine thread; unfinished requests end with abort
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Starts / stops the engine thread and the delivery thread. Without them,
  // generate() and run_step() drive the engine on the caller's thread and
  // callbacks run there too.
  void start();
  void stop();

  RequestId submit(Request request, StreamCallback callback) override;
  void abort(RequestId id) override;
  EngineStats stats() const override;

  // Submits every request and waits for all results (in input order).
  // Uses the engine thread when started, else runs the loop on this thread.
  std::vector<Result> generate(std::vector<Request> requests);

  // Engine-thread API (or single-threaded use): handles the inbox and runs at
  // most one step; false when there was nothing to do.
  bool run_step();

  int32_t num_kv_blocks() const;
  int32_t block_size() const;

 private:
  struct Inbox {
    std::vector<std::shared_ptr<RequestState>> submits;
    std::vector<RequestId> aborts;
  };

  Engine(std::unique_ptr<StepExecutor> executor, const Tokenizer* tokenizer, EngineConfig config);
  void loop();
  void drain_inbox();
  void admit(std::shared_ptr<RequestState> request);
  // Runs the plan's step and applies its output (and the previous step's).
  void execute(const StepPlan& plan);
  // A failed step: the requests of its sequences and of the step in flight end with an error.
  void fail_step(const StepPlan& plan, const std::exception& err);
  void deliver_events();
  void publish_stats(bool step_in_progress);

  EngineConfig config_;
  std::unique_ptr<KvManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<StepExecutor> executor_;
  std::unique_ptr<EventDelivery> delivery_;
  uint64_t steps_ = 0;  // engine thread
  KvUsageHistory kv_history_;  // engine thread

  // Shared with other threads.
  std::atomic<RequestId> next_request_id_{1};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Inbox inbox_;
  bool stopping_ = false;
  EngineStats published_;
  std::thread thread_;
  std::atomic<bool> running_thread_{false};
};

}  // namespace loom
