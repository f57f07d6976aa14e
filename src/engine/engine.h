// Engine: continuous batching of many requests over one model. One engine
// thread owns every Sequence, the Scheduler, the KvManager, the KV cache and
// the model; other threads talk to it only through submit()/abort() (a locked
// inbox) and get results through callbacks run on the engine thread. Life
// cycle, invariants and threads: engine/README.md.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "kv/kv_manager.h"
#include "model/model_runner.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"

namespace loom {

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
  // Async scheduling: a step whose tokens are all chosen on the device
  // (argmax or device sampling; no logprobs, no n > 1 fork) leaves them
  // there; the next step is planned and launched with those tokens as its
  // inputs (placeholders resolved on the device) before the host reads them,
  // so the host's scheduling and streaming overlap the GPU's work. A sequence
  // that stops on that token has computed one token more than needed (its
  // blocks are freed then). Same tokens either way. Off: every step waits for
  // its tokens. Never used for a model over several ranks.
  bool async_scheduling = true;
};

enum class EngineErrorKind : uint8_t { None, QueueFull, TooLong, Invalid, Internal, Shutdown };

// One update of one sequence, delivered on the engine thread.
struct StreamEvent {
  RequestId request_id = 0;
  int32_t seq_index = 0;
  std::vector<int32_t> token_ids;      // new tokens (one per step; none on errors)
  std::string text;                    // new text that became safe to stream
  std::vector<SampleResult> logprobs;  // per new token, when the request asked
  FinishReason finish = FinishReason::None;  // set on the sequence's last event
  EngineErrorKind error = EngineErrorKind::None;
  std::string error_message;
  bool request_done = false;           // the request's last event
  // When the sequence was first scheduled (token events; for queue time).
  std::optional<Clock::time_point> first_scheduled;
};

// Runs on the engine thread; must not block (push to the requester's queue,
// e.g. an EventQueue) and must not call back into the engine except abort().
using StreamCallback = std::function<void(const StreamEvent&)>;

// A thread-safe unbounded queue of events: push never blocks the engine.
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

struct SequenceResult {
  int32_t index = 0;
  std::vector<int32_t> output_ids;
  std::string text;
  FinishReason finish_reason = FinishReason::None;
  std::vector<SampleResult> logprobs;
};

struct Result {
  RequestId id = 0;
  std::string external_id;
  int32_t prompt_tokens = 0;
  std::vector<SequenceResult> sequences;  // by index
  EngineErrorKind error = EngineErrorKind::None;
  std::string error_message;
};

struct EngineStats {
  uint64_t steps = 0;
  uint64_t prompt_tokens_computed = 0;
  uint64_t generated_tokens = 0;
  uint64_t argmax_tokens = 0;     // of generated_tokens: taken from Backend::argmax_rows
  uint64_t device_sampled_tokens = 0;  // of generated_tokens: drawn by Backend::sample_rows
  uint64_t async_steps = 0;       // steps whose tokens the next step took on the device
  uint64_t cached_prompt_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t finished_requests = 0;
  size_t running = 0;
  size_t waiting = 0;
  KvStats kv;
};

class Engine {
 public:
  // model (and tokenizer, which may be null: no text) must outlive the engine.
  Engine(Transformer& model, const Tokenizer* tokenizer, EngineConfig config);
  // Runs the model through `runner` (tensor parallelism: rank 0's runner,
  // which broadcasts every step to the other ranks). It must outlive the engine.
  Engine(ModelRunner& runner, const Tokenizer* tokenizer, EngineConfig config);
  ~Engine();  // stops the engine thread; unfinished requests end with abort
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Starts / stops the engine thread. Without it, generate() and run_step()
  // drive the engine on the caller's thread.
  void start();
  void stop();

  // Any thread. Validates the request (throws loom::Error for bad fields);
  // admission (queue bounds) happens on the engine thread and a rejection
  // arrives as one event with error set.
  RequestId submit(Request request, StreamCallback callback);
  void abort(RequestId id);  // any thread; unknown or finished ids are ignored

  // Submits every request and waits for all results (in input order).
  // Uses the engine thread when started, else runs the loop on this thread.
  std::vector<Result> generate(std::vector<Request> requests);

  // Engine-thread API (or single-threaded use): handles the inbox and runs at
  // most one step; false when there was nothing to do.
  bool run_step();

  EngineStats stats() const;  // any thread
  int32_t num_kv_blocks() const { return kv_->num_blocks(); }
  int32_t block_size() const { return kv_->block_size(); }

 private:
  struct SeqState;
  struct RequestState;
  struct Inbox {
    std::vector<std::pair<RequestId, Request>> submits;
    std::vector<StreamCallback> callbacks;
    std::vector<RequestId> aborts;
  };

  Engine(std::unique_ptr<ModelRunner> own_runner, ModelRunner* runner, const Tokenizer* tokenizer,
         EngineConfig config);
  void loop();
  void drain_inbox();
  void admit(RequestId id, Request request, StreamCallback callback);
  // Per sampled row of a step (plan order), where its tokens come from:
  // host_row[r] >= 0: the Sampler on row host_row[r] of logits_host_;
  // device_first[r] >= 0: device_tokens[device_first[r] + i] for draw i;
  // otherwise argmax[r].
  struct SampledLogits {
    std::vector<int32_t> argmax;
    std::vector<int32_t> host_row;
    std::vector<int32_t> device_first;
    std::vector<int32_t> device_tokens;
  };
  SampledLogits fetch_logits(const StepPlan& plan, const Tensor& logits);
  // Appends the device-sampler specs of the sampled row r for sequence `seq`
  // (one per sibling still to fork) to sample_specs_ / logit_edits_.
  void add_device_specs(int32_t r, SeqId seq, int64_t vocab);
  bool alive(SeqId seq) const;
  // Whether every sampled row of the plan gets its token on the device.
  bool can_run_async(const StepPlan& plan) const;
  void execute(const StepPlan& plan);
  // Async scheduling: issues the step's token choice on the device, marks
  // the sampled sequences' next tokens as placeholders and leaves the step
  // in flight; finish_in_flight() delivers its tokens.
  void launch_sampling(const StepPlan& plan, const Tensor& logits);
  void finish_in_flight();
  void apply_copies(const std::vector<BlockCopy>& copies);
  // resolve: the token replaces the sequence's placeholder; else it is appended.
  void on_token(SeqId seq, int32_t token, const SampleResult& sample, bool resolve = false);
  void end_sequence(SeqId seq, FinishReason reason, EngineErrorKind error,
                    const std::string& message, bool free_in_scheduler);
  void end_request_with_error(RequestId id, EngineErrorKind error, const std::string& message);
  void abort_all(EngineErrorKind error, const std::string& message);
  void publish_stats();

  std::unique_ptr<ModelRunner> own_runner_;  // when built from a Transformer
  ModelRunner& model_;
  const Tokenizer* tokenizer_;
  EngineConfig config_;
  std::vector<int32_t> eos_ids_;
  std::unique_ptr<KvManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  KvCache cache_;
  Sampler sampler_;
  std::unordered_map<RequestId, std::unique_ptr<RequestState>> requests_;
  std::unordered_map<SeqId, std::unique_ptr<SeqState>> seqs_;
  EngineStats counters_;  // engine thread
  std::vector<float> logits_host_;
  Tensor sample_logits_;  // device rows gathered for the host sampler (grown on demand)
  std::vector<SampleSpec> sample_specs_;
  std::vector<LogitEdit> logit_edits_;
  // The step in flight (async scheduling): the sequence of each sampled row
  // (0: none any more), its device ids (a view of step_ids_[k]) and their
  // copy to the host.
  struct InFlight {
    std::vector<SeqId> rows;
    Tensor ids;
    std::unique_ptr<Backend::TokenDownload> download;
  } in_flight_;
  Tensor step_ids_[2];  // alternate: one step writes while the next reads the other
  int step_ids_next_ = 0;

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
