// Engine: the engine thread's loop (inbox -> schedule -> execute -> apply the
// output -> deliver events), admission and the synchronous generate().
#include "engine/engine.h"

#include <algorithm>

#include "core/error.h"
#include "core/logging.h"
#include "engine/event_delivery.h"
#include "engine/executor.h"
#include "engine/step_profiler.h"
#include "kv/kv_manager.h"
#include "tokenizer/tokenizer.h"

namespace loom {

namespace {
ExecutorConfig executor_config(const EngineConfig& c) {
  ExecutorConfig ec;
  ec.greedy_fast_path = c.greedy_fast_path;
  ec.device_sampling = c.device_sampling;
  ec.async_scheduling = c.async_scheduling;
  ec.seed = c.seed;
  ec.speculative = c.speculative;
  ec.jump_forward = c.jump_forward;
  ec.profile_steps = c.profile_steps;
  return ec;
}
}  // namespace

Engine::Engine(Transformer& model, const Tokenizer* tokenizer, EngineConfig config)
    : Engine(std::make_unique<StepExecutor>(model, executor_config(config)), tokenizer, config) {}

Engine::Engine(ModelRunner& runner, const Tokenizer* tokenizer, EngineConfig config)
    : Engine(std::make_unique<StepExecutor>(runner, executor_config(config)), tokenizer, config) {}

Engine::Engine(std::unique_ptr<StepExecutor> executor, const Tokenizer* tokenizer, EngineConfig config)
    : config_(std::move(config)), executor_(std::move(executor)) {
  std::vector<int32_t> eos_ids = config_.eos_ids;
  if (eos_ids.empty() && tokenizer != nullptr) {
    eos_ids = tokenizer->special().eos_ids;
    if (eos_ids.empty() && tokenizer->special().eos) eos_ids.push_back(*tokenizer->special().eos);
  }
  const int64_t bytes_per_block = executor_->kv_cache_bytes_per_block(config_.block_size, config_.kv_dtype);
  const int32_t num_blocks =
      config_.num_kv_blocks > 0
          ? config_.num_kv_blocks
          : KvManager::num_blocks_for_budget(uint64_t(std::max<int64_t>(0, config_.kv_cache_bytes)),
                                             uint64_t(bytes_per_block));
  kv_ = std::make_unique<KvManager>(KvConfig{num_blocks, config_.block_size, config_.enable_prefix_caching});
  SchedulerConfig sc = config_.scheduler;
  const int64_t max_pos = executor_->max_position();
  if (sc.max_model_len == 0 && max_pos > 0) sc.max_model_len = int32_t(std::min<int64_t>(max_pos, INT32_MAX));
  scheduler_ = std::make_unique<Scheduler>(sc, *kv_, tokenizer, std::move(eos_ids));
  executor_->allocate_kv_cache(num_blocks, config_.block_size, config_.kv_dtype);
  delivery_ = std::make_unique<EventDelivery>();
  delivery_->set_timed(config_.profile_steps);
  publish_stats(false);
  LOOM_LOG_INFO("engine: {} KV blocks of {} tokens ({} bytes each), prefix caching {}", num_blocks,
                config_.block_size, bytes_per_block, config_.enable_prefix_caching ? "on" : "off");
}

Engine::~Engine() {
  stop();
  drain_inbox();
  scheduler_->abort_all(FinishReason::Abort, EngineErrorKind::Shutdown, "engine shut down");
  deliver_events();
}

int32_t Engine::num_kv_blocks() const { return kv_->num_blocks(); }
int32_t Engine::block_size() const { return kv_->block_size(); }

void Engine::start() {
  std::lock_guard<std::mutex> lk(mu_);
  if (thread_.joinable()) return;
  delivery_->start();
  stopping_ = false;
  running_thread_ = true;
  thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  running_thread_ = false;
  delivery_->stop();  // delivers what the engine thread handed over
}

RequestId Engine::submit(Request request, StreamCallback callback) {
  const int64_t vocab = executor_->vocab_size();
  request.params.validate(vocab);
  if (request.prompt_ids.empty()) LOOM_THROW("the prompt is empty");
  if (request.pooling &&
      (request.params.n != 1 || request.params.prompt_logprobs || request.constraint))
    LOOM_THROW(
        "a pooling request samples nothing: n must be 1, without prompt_logprobs or a constraint");
  for (int32_t t : request.prompt_ids)
    if (t < 0 || t >= vocab) LOOM_THROW("prompt token {} is outside the vocabulary ({})", t, vocab);
  auto state = std::make_shared<RequestState>();
  state->id = next_request_id_++;
  state->request = std::move(request);
  state->callback = std::move(callback);
  const RequestId id = state->id;
  {
    std::lock_guard<std::mutex> lk(mu_);
    inbox_.submits.push_back(std::move(state));
  }
  cv_.notify_all();
  return id;
}

void Engine::abort(RequestId id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    inbox_.aborts.push_back(id);
  }
  cv_.notify_all();
}

void Engine::loop() {
  for (;;) {
    const bool idle = scheduler_->idle() && !executor_->has_in_flight();
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !idle || !inbox_.submits.empty() || !inbox_.aborts.empty(); });
      if (stopping_) return;
    }
    if (!run_step() && !scheduler_->idle()) std::this_thread::yield();
  }
}

void Engine::drain_inbox() {
  Inbox in;
  {
    std::lock_guard<std::mutex> lk(mu_);
    std::swap(in, inbox_);
  }
  for (auto& r : in.submits) admit(std::move(r));
  for (RequestId id : in.aborts) scheduler_->abort_request(id);
}

void Engine::admit(std::shared_ptr<RequestState> request) {
  const AdmitStatus st = scheduler_->add_request(request);
  if (st == AdmitStatus::Admitted) return;
  StreamEvent e;
  e.request_id = request->id;
  e.finish = FinishReason::Error;
  e.request_done = true;
  switch (st) {
    case AdmitStatus::QueueFull:
      e.error = EngineErrorKind::QueueFull;
      e.error_message = "the engine's waiting queue is full";
      break;
    case AdmitStatus::TooLong:
      e.error = EngineErrorKind::TooLong;
      e.error_message = "prompt + max_tokens exceeds the model's context or the KV cache";
      break;
    default:
      e.error = EngineErrorKind::Invalid;
      e.error_message = "invalid request";
  }
  delivery_->deliver({SequenceEvent{std::move(request), std::move(e)}});
}

bool Engine::run_step() {
  StepProfiler* prof = executor_->profiler();
  if (prof) prof->begin_turn();
  {
    PhaseTimer t(prof, StepPhase::Schedule);
    drain_inbox();
  }
  const bool in_flight = executor_->has_in_flight();
  if (scheduler_->idle() && !in_flight) {
    deliver_events();
    if (prof) prof->idle();  // this turn ran nothing: not counted
    publish_stats(false);
    return false;
  }
  publish_stats(true);
  const StepPlan plan = [&] {
    PhaseTimer t(prof, StepPhase::Schedule);
    return scheduler_->schedule(Clock::now());
  }();
  try {
    if (!plan.empty()) {
      execute(plan);
    } else {
      std::optional<StepOutput> last;
      {
        PhaseTimer t(prof, StepPhase::Wait);
        last = executor_->finish_in_flight();
      }
      PhaseTimer t(prof, StepPhase::Apply);
      // e.g. every running sequence waits for its final token
      if (last) scheduler_->update_from_output(*last);
    }
  } catch (const std::exception& err) {
    fail_step(plan, err);
  }
  ++steps_;
#ifndef NDEBUG
  scheduler_->check_invariants();  // O(blocks + sequences): debug builds only
#endif
  {
    PhaseTimer t(prof, StepPhase::Apply);
    deliver_events();
  }
  if (prof) {
    prof->end_turn();
    // Nothing left: the device has done every step.
    if (scheduler_->idle() && !executor_->has_in_flight()) prof->idle();
  }
  publish_stats(false);
  return !plan.empty() || !plan.expired.empty() || in_flight;
}

void Engine::execute(const StepPlan& plan) {
  const StepOutput out = executor_->execute(plan, *scheduler_, [&](const StepOutput& previous) {
    scheduler_->update_from_output(previous);
    deliver_events();  // the previous step's tokens go out while the device runs this one
  });
  StepProfiler* prof = executor_->profiler();
  {
    PhaseTimer t(prof, StepPhase::Apply);
    scheduler_->update_from_output(plan, out);
  }
  PhaseTimer t(prof, StepPhase::Propose);
  for (auto& [seq, draft] : executor_->propose(*scheduler_)) scheduler_->set_draft(seq, std::move(draft));
}

void Engine::fail_step(const StepPlan& plan, const std::exception& err) {
  LOOM_LOG_ERROR("engine: step {} failed: {}", plan.step, err.what());
  std::vector<RequestId> failed;
  auto fail = [&](SeqId seq) {
    if (const Sequence* s = scheduler_->find(seq)) failed.push_back(s->request_id);
  };
  for (const auto& e : plan.seqs) fail(e.seq);
  for (SeqId seq : executor_->take_failed_in_flight()) fail(seq);
  std::sort(failed.begin(), failed.end());
  failed.erase(std::unique(failed.begin(), failed.end()), failed.end());
  for (RequestId id : failed)
    scheduler_->abort_request(id, FinishReason::Error, EngineErrorKind::Internal, err.what());
}

void Engine::deliver_events() { delivery_->deliver(scheduler_->take_events()); }

void Engine::publish_stats(bool step_in_progress) {
  EngineStats s;
  const SchedulerStats ss = scheduler_->stats();
  const ExecutorStats& xs = executor_->stats();
  s.steps = steps_;
  s.prompt_tokens_computed = ss.prompt_tokens_computed;
  s.generated_tokens = ss.generated_tokens;
  s.argmax_tokens = xs.argmax_tokens;
  s.device_sampled_tokens = xs.device_sampled_tokens;
  s.async_steps = xs.async_steps;
  s.masked_rows = xs.masked_rows;
  s.mask_time = xs.mask_time;
  s.spec_draft_tokens = ss.draft_tokens;
  s.spec_accepted_tokens = ss.accepted_tokens;
  s.spec_accepted_lengths = ss.accepted_lengths;
  s.jump_forward_tokens = xs.jump_forward_tokens;
  s.jump_forward_accepted_tokens = xs.jump_forward_accepted_tokens;
  s.cached_prompt_tokens = ss.cached_prompt_tokens;
  s.preemptions = ss.preemptions;
  s.finished_requests = ss.finished_requests;
  s.running = ss.running;
  s.waiting = ss.waiting;
  s.step_in_progress = step_in_progress;
  if (step_in_progress) s.step_started = Clock::now();
  const KvStats k = kv_->stats();
  if (!step_in_progress) {  // a step's end (or idle)
    if (k.used_blocks > kv_history_.peak_used_blocks) {
      kv_history_.peak_used_blocks = k.used_blocks;
      kv_history_.peak_allocated_slots = k.allocated_slots;
      kv_history_.peak_filled_slots = k.filled_slots;
    }
    kv_history_.allocated_slot_steps += uint64_t(k.allocated_slots);
    kv_history_.filled_slot_steps += uint64_t(k.filled_slots);
  }
  s.kv_history = kv_history_;
  if (const StepProfiler* prof = executor_->profiler()) {
    s.profile = prof->profile();
    const EventDelivery::CallbackTime ct = delivery_->callback_time();
    s.profile.callback_batches = ct.batches;
    s.profile.callback_s = ct.seconds;
  }
  s.kv = KvCacheStats{k.num_blocks,      k.used_blocks,           k.free_blocks,       k.cached_blocks,
                      k.cached_free_blocks, k.allocated_slots,    k.filled_slots,      k.prefix_queried_tokens,
                      k.prefix_hit_tokens,  k.evictions};
  std::lock_guard<std::mutex> lk(mu_);
  published_ = s;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return published_;
}

}  // namespace loom
