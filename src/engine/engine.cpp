// Engine: the engine thread's loop (inbox -> schedule -> forward -> sample ->
// stream), request/sequence bookkeeping and the synchronous generate().
#include "engine/engine.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/logging.h"
#include "engine/sequence_output.h"

namespace loom {

// ---------------------------------------------------------------- EventQueue

void EventQueue::push(StreamEvent e) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    q_.push_back(std::move(e));
  }
  cv_.notify_one();
}

StreamEvent EventQueue::pop() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return !q_.empty(); });
  StreamEvent e = std::move(q_.front());
  q_.pop_front();
  return e;
}

std::optional<StreamEvent> EventQueue::try_pop() {
  std::lock_guard<std::mutex> lk(mu_);
  if (q_.empty()) return std::nullopt;
  StreamEvent e = std::move(q_.front());
  q_.pop_front();
  return e;
}

// -------------------------------------------------------------------- Engine

struct Engine::RequestState {
  RequestId id = 0;
  Request request;
  StreamCallback callback;
  std::vector<bool> done;  // per sequence index
  int32_t num_done = 0;
  bool forked = false;     // n > 1: siblings exist (or n == 1)
};

struct Engine::SeqState {
  SeqId id = 0;
  RequestState* request = nullptr;
  int32_t index = 0;
  SequenceOutput output;
  SeqState(SeqId id_, RequestState* r, int32_t idx, const Tokenizer* tok,
           const std::vector<int32_t>& eos)
      : id(id_), request(r), index(idx), output(tok, r->request.params, eos) {}
};

Engine::Engine(Transformer& model, const Tokenizer* tokenizer, EngineConfig config)
    : Engine(std::make_unique<ModelRunner>(model), nullptr, tokenizer, std::move(config)) {}

Engine::Engine(ModelRunner& runner, const Tokenizer* tokenizer, EngineConfig config)
    : Engine(nullptr, &runner, tokenizer, std::move(config)) {}

Engine::Engine(std::unique_ptr<ModelRunner> own_runner, ModelRunner* runner, const Tokenizer* tokenizer,
               EngineConfig config)
    : own_runner_(std::move(own_runner)),
      model_(runner ? *runner : *own_runner_),
      tokenizer_(tokenizer),
      config_(std::move(config)),
      sampler_(config_.seed) {
  eos_ids_ = config_.eos_ids;
  if (eos_ids_.empty() && tokenizer_ != nullptr) {
    eos_ids_ = tokenizer_->special().eos_ids;
    if (eos_ids_.empty() && tokenizer_->special().eos) eos_ids_.push_back(*tokenizer_->special().eos);
  }
  const int64_t bytes_per_block = model_.kv_cache_bytes_per_block(config_.block_size, config_.kv_dtype);
  const int32_t num_blocks =
      config_.num_kv_blocks > 0
          ? config_.num_kv_blocks
          : KvManager::num_blocks_for_budget(uint64_t(std::max<int64_t>(0, config_.kv_cache_bytes)),
                                             uint64_t(bytes_per_block));
  kv_ = std::make_unique<KvManager>(
      KvConfig{num_blocks, config_.block_size, config_.enable_prefix_caching});
  SchedulerConfig sc = config_.scheduler;
  const int64_t max_pos = model_.config().max_position;
  if (sc.max_model_len == 0 && max_pos > 0) sc.max_model_len = int32_t(std::min<int64_t>(max_pos, INT32_MAX));
  scheduler_ = std::make_unique<Scheduler>(sc, *kv_);
  cache_ = model_.allocate_kv_cache(num_blocks, config_.block_size, config_.kv_dtype);
  LOOM_LOG_INFO("engine: {} KV blocks of {} tokens ({} bytes each), prefix caching {}", num_blocks,
                config_.block_size, bytes_per_block, config_.enable_prefix_caching ? "on" : "off");
}

Engine::~Engine() {
  stop();
  drain_inbox();
  abort_all(EngineErrorKind::Shutdown, "engine shut down");
}

void Engine::start() {
  std::lock_guard<std::mutex> lk(mu_);
  if (thread_.joinable()) return;
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
}

RequestId Engine::submit(Request request, StreamCallback callback) {
  const int64_t vocab = model_.config().vocab_size;
  request.params.validate(vocab);
  if (request.prompt_ids.empty()) LOOM_THROW("the prompt is empty");
  for (int32_t t : request.prompt_ids)
    if (t < 0 || t >= vocab) LOOM_THROW("prompt token {} is outside the vocabulary ({})", t, vocab);
  const RequestId id = next_request_id_++;
  {
    std::lock_guard<std::mutex> lk(mu_);
    inbox_.submits.emplace_back(id, std::move(request));
    inbox_.callbacks.push_back(std::move(callback));
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
    const bool idle = scheduler_->idle();
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] {
        return stopping_ || !idle || !inbox_.submits.empty() || !inbox_.aborts.empty();
      });
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
  for (size_t i = 0; i < in.submits.size(); ++i)
    admit(in.submits[i].first, std::move(in.submits[i].second), std::move(in.callbacks[i]));
  for (RequestId id : in.aborts) {
    if (requests_.count(id) == 0) continue;
    for (SeqId s : scheduler_->abort_request(id))
      end_sequence(s, FinishReason::Abort, EngineErrorKind::None, "", false);
  }
}

void Engine::admit(RequestId id, Request request, StreamCallback callback) {
  auto rs = std::make_unique<RequestState>();
  rs->id = id;
  rs->request = std::move(request);
  rs->callback = std::move(callback);
  rs->done.assign(size_t(rs->request.params.n), false);
  rs->forked = rs->request.params.n == 1;
  SeqId first = 0;
  const AdmitStatus st = scheduler_->add_request(id, rs->request, &first);
  if (st != AdmitStatus::Admitted) {
    StreamEvent e;
    e.request_id = id;
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
    if (rs->callback) rs->callback(e);
    return;
  }
  RequestState* r = rs.get();
  requests_.emplace(id, std::move(rs));
  seqs_.emplace(first, std::make_unique<SeqState>(first, r, 0, tokenizer_, eos_ids_));
}

bool Engine::run_step() {
  drain_inbox();
  const bool in_flight = in_flight_.download != nullptr;
  if (scheduler_->idle() && !in_flight) {
    publish_stats();
    return false;
  }
  const StepPlan plan = scheduler_->schedule(Clock::now());
  for (SeqId s : plan.expired)
    end_sequence(s, FinishReason::Abort, EngineErrorKind::None, "deadline exceeded", false);
  try {
    if (!plan.empty())
      execute(plan);
    else if (in_flight)
      finish_in_flight();  // e.g. every running sequence waits for its final token
  } catch (const std::exception& err) {
    LOOM_LOG_ERROR("engine: step {} failed: {}", plan.step, err.what());
    std::vector<RequestId> failed;
    auto fail = [&](SeqId seq) {
      if (auto it = seqs_.find(seq); it != seqs_.end()) failed.push_back(it->second->request->id);
    };
    for (const auto& e : plan.seqs) fail(e.seq);
    for (SeqId seq : in_flight_.rows) fail(seq);
    in_flight_ = InFlight{};
    std::sort(failed.begin(), failed.end());
    failed.erase(std::unique(failed.begin(), failed.end()), failed.end());
    for (RequestId id : failed) end_request_with_error(id, EngineErrorKind::Internal, err.what());
  }
  counters_.steps++;
#ifndef NDEBUG
  scheduler_->check_invariants();  // O(blocks + sequences): debug builds only
#endif
  publish_stats();
  return !plan.empty() || !plan.expired.empty() || in_flight;
}

void Engine::apply_copies(const std::vector<BlockCopy>& copies) {
  if (copies.empty()) return;
  std::vector<KvBlockCopy> blocks;
  blocks.reserve(copies.size());
  for (const BlockCopy& c : copies) blocks.push_back({c.src, c.dst});
  model_.copy_blocks(blocks, cache_);
}

namespace {

// Whether Sampler::sample would return the plain argmax of the raw logits:
// greedy, no logprobs, no penalty, bias or ban changing any logit.
bool plain_greedy(const SamplingParams& p, bool banned_now) {
  return p.greedy() && !p.logprobs && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f && p.logit_bias.empty() && !banned_now;
}

}  // namespace

Engine::SampledLogits Engine::fetch_logits(const StepPlan& plan, const Tensor& logits) {
  SampledLogits out;
  Backend& be = model_.backend();
  const int64_t vocab = logits.dim(1);
  std::vector<int32_t> slow;    // logits rows the Sampler needs on the host
  std::vector<int32_t> device;  // rows drawn on the device
  sample_specs_.clear();
  logit_edits_.clear();
  const bool device_sampling = config_.device_sampling && be.has_device_sampler();
  for (const auto& e : plan.seqs) {
    if (!e.sample) continue;
    const int32_t r = int32_t(out.host_row.size());
    out.host_row.push_back(-1);
    out.device_first.push_back(-1);
    if (!alive(e.seq)) continue;  // ended by the step before (async scheduling): argmax, unused
    const Sequence& s = scheduler_->get(e.seq);
    SeqState& st = *seqs_.at(e.seq);
    const SamplingParams& p = st.request->request.params;
    const bool banned = s.num_output_tokens() < p.min_tokens && !st.output.min_tokens_bans().empty();
    if (config_.greedy_fast_path && plain_greedy(p, banned)) continue;
    if (device_sampling && !p.greedy() && !p.logprobs) {
      out.device_first[size_t(r)] = int32_t(sample_specs_.size());
      add_device_specs(r, e.seq, vocab);
      device.push_back(r);
      continue;
    }
    out.host_row[size_t(r)] = int32_t(slow.size());
    slow.push_back(r);
  }
  const size_t rows = out.host_row.size();
  LOOM_CHECK(rows == 0 || int64_t(rows) == logits.dim(0), "{} logits rows for {} sampled sequences",
             logits.dim(0), rows);
  if (!sample_specs_.empty())
    LOOM_CHECK(be.sample_rows(logits, sample_specs_, logit_edits_, out.device_tokens) &&
                   out.device_tokens.size() == sample_specs_.size(),
               "the backend's device sampler failed");
  if (slow.size() + device.size() < rows) be.argmax_rows(logits, out.argmax);
  if (slow.empty()) return out;
  if (slow.size() == rows) {
    copy_to_host_f32(be, logits, logits_host_);  // every row (bf16 on GPU)
    return out;
  }
  // Only the rows the Sampler needs: gathered on the device, then copied.
  const int64_t n = int64_t(slow.size());
  if (sample_logits_.data() == nullptr || sample_logits_.dtype() != logits.dtype() ||
      sample_logits_.cols() != vocab || sample_logits_.rows() < n)
    sample_logits_ =
        be.alloc(logits.dtype(), {std::min(logits.dim(0), std::max<int64_t>(n, 2 * sample_logits_.rows())), vocab});
  Tensor dst = sample_logits_.slice_rows(0, n);
  be.gather_rows(logits, slow, dst);
  copy_to_host_f32(be, dst, logits_host_);
  return out;
}

bool Engine::alive(SeqId seq) const { return seqs_.count(seq) != 0 && scheduler_->find(seq) != nullptr; }

void Engine::add_device_specs(int32_t r, SeqId seq, int64_t vocab) {
  const Sequence& s = scheduler_->get(seq);
  const SeqState& st = *seqs_.at(seq);
  const SamplingParams& p = st.request->request.params;
  const bool banned = s.num_output_tokens() < p.min_tokens && !st.output.min_tokens_bans().empty();
  // One draw per sibling (n > 1 forks sample their first token here).
  std::span<const int32_t> all(s.tokens);
  SampleContext ctx{&p, all.first(size_t(s.prompt_len)), all.subspan(size_t(s.prompt_len)), s.index,
                    banned ? st.output.min_tokens_bans() : std::span<const int32_t>()};
  const int32_t edits_begin = int32_t(logit_edits_.size());
  Sampler::logit_edits(ctx, int32_t(vocab), logit_edits_);
  for (int32_t i = 0; i <= s.pending_forks; ++i) {
    ctx.seq_index = s.index + i;
    SampleSpec spec;
    spec.row = r;
    spec.temperature = p.temperature;
    spec.top_k = p.top_k;
    spec.top_p = p.top_p;
    spec.min_p = p.min_p;
    spec.uniform = sampler_.draw_uniform(ctx);
    spec.edits_begin = edits_begin;
    spec.edits_end = int32_t(logit_edits_.size());
    sample_specs_.push_back(spec);
  }
}

bool Engine::can_run_async(const StepPlan& plan) const {
  if (!config_.async_scheduling || model_.distributed()) return false;
  const bool device_sampling = config_.device_sampling && model_.backend().has_device_sampler();
  bool any = false;
  for (const auto& e : plan.seqs) {
    if (!e.sample || !alive(e.seq)) continue;
    const Sequence& s = scheduler_->get(e.seq);
    const SeqState& st = *seqs_.at(e.seq);
    const SamplingParams& p = st.request->request.params;
    if (s.pending_forks > 0 || p.logprobs) return false;
    const bool banned = s.num_output_tokens() < p.min_tokens && !st.output.min_tokens_bans().empty();
    const bool on_device =
        (config_.greedy_fast_path && plain_greedy(p, banned)) || (device_sampling && !p.greedy());
    if (!on_device) return false;
    any = true;
  }
  return any;
}

void Engine::launch_sampling(const StepPlan& plan, const Tensor& logits) {
  Backend& be = model_.backend();
  const int64_t vocab = logits.dim(1);
  InFlight next;
  for (const auto& e : plan.seqs)
    if (e.sample) next.rows.push_back(alive(e.seq) ? e.seq : 0);
  const auto rows = static_cast<int64_t>(next.rows.size());
  LOOM_CHECK(rows == logits.dim(0), "{} logits rows for {} sampled sequences", logits.dim(0), rows);
  Tensor& buf = step_ids_[step_ids_next_];
  step_ids_next_ ^= 1;
  if (buf.data() == nullptr || buf.numel() < rows) buf = be.alloc(DType::I32, {std::max<int64_t>(rows, 2 * buf.numel())});
  next.ids = buf.slice_rows(0, rows);
  be.argmax_rows_to(logits, next.ids);
  sample_specs_.clear();
  logit_edits_.clear();
  const bool device_sampling = config_.device_sampling && be.has_device_sampler();
  for (size_t r = 0; r < next.rows.size(); ++r) {
    const SeqId seq = next.rows[r];
    if (seq == 0) continue;
    const SamplingParams& p = seqs_.at(seq)->request->request.params;
    if (device_sampling && !p.greedy()) {
      add_device_specs(int32_t(r), seq, vocab);
      counters_.device_sampled_tokens++;
    } else {
      counters_.argmax_tokens++;
    }
  }
  if (!sample_specs_.empty())
    LOOM_CHECK(be.sample_rows_to(logits, sample_specs_, logit_edits_, next.ids),
               "the backend's device sampler failed");
  next.download = be.download_tokens(next.ids, rows);
  counters_.async_steps++;
  scheduler_->complete_step(plan);
  for (size_t r = 0; r < next.rows.size(); ++r)
    if (next.rows[r] != 0) scheduler_->append_token(next.rows[r], -int32_t(r) - 1);
  in_flight_ = std::move(next);
}

void Engine::finish_in_flight() {
  InFlight f = std::move(in_flight_);
  in_flight_ = InFlight{};
  size_t r = 0;
  try {
    const std::vector<int32_t>& ids = f.download->wait();
    LOOM_CHECK(ids.size() == f.rows.size(), "{} tokens back for {} rows", ids.size(), f.rows.size());
    for (; r < f.rows.size(); ++r) {
      const SeqId seq = f.rows[r];
      if (seq == 0 || !alive(seq)) continue;  // aborted, expired or failed meanwhile
      SampleResult d;
      d.token = ids[r];
      on_token(seq, d.token, d, true);
    }
  } catch (...) {
    // The rows not delivered keep unresolved placeholders: run_step fails their requests.
    in_flight_.rows.assign(f.rows.begin() + static_cast<std::ptrdiff_t>(r), f.rows.end());
    throw;
  }
}

void Engine::execute(const StepPlan& plan) {
  apply_copies(plan.copies);
  const int32_t bs = kv_->block_size();
  StepInput step;
  AttentionMetadata& m = step.attn;
  m.num_seqs = int32_t(plan.seqs.size());
  int32_t max_blocks = 0;
  for (const auto& e : plan.seqs)
    max_blocks = std::max(max_blocks, scheduler_->get(e.seq).blocks.num_blocks());
  m.max_blocks_per_seq = max_blocks;
  m.query_start.push_back(0);
  for (const auto& e : plan.seqs) {
    const Sequence& s = scheduler_->get(e.seq);
    const auto& blocks = s.blocks.blocks();
    for (int32_t p = e.start; p < e.start + e.num_tokens; ++p) {
      step.tokens.push_back(s.tokens[size_t(p)]);
      step.positions.push_back(p);
      m.slot_mapping.push_back(int64_t(blocks[size_t(p / bs)]) * bs + p % bs);
    }
    m.query_start.push_back(int32_t(step.tokens.size()));
    m.context_lens.push_back(e.start + e.num_tokens);
    for (int32_t b = 0; b < max_blocks; ++b)
      m.block_tables.push_back(b < int32_t(blocks.size()) ? blocks[size_t(b)] : 0);
    if (e.sample) step.logit_rows.push_back(int32_t(step.tokens.size()) - 1);
    if (e.start < s.prompt_len) counters_.prompt_tokens_computed += uint64_t(std::min(e.num_tokens, s.prompt_len - e.start));
  }
  counters_.cached_prompt_tokens += uint64_t(plan.num_cached_tokens);
  // The model always returns at least one row; a step of prefill chunks only
  // asks for one and ignores it.
  if (step.logit_rows.empty()) step.logit_rows.push_back(int32_t(step.tokens.size()) - 1);
  // Placeholders name rows of the step in flight; every other token is known.
  if (in_flight_.download) step.token_source = &in_flight_.ids;
  const bool async = can_run_async(plan);
  const Tensor logits = model_.forward(step, cache_);
  // The device runs this step while the host delivers the previous one's
  // tokens (which may end sequences of this plan: their rows are ignored).
  if (in_flight_.download) finish_in_flight();
  if (async) {
    launch_sampling(plan, logits);
    counters_.preemptions += plan.preempted.size();
    return;
  }
  const int64_t vocab = logits.dim(1);
  const SampledLogits sampled = fetch_logits(plan, logits);
  scheduler_->complete_step(plan);

  size_t row = 0;
  for (const auto& e : plan.seqs) {
    if (!e.sample) continue;
    const size_t r = row++;
    if (!alive(e.seq)) continue;
    const Sequence& s = scheduler_->get(e.seq);
    SeqState& st = *seqs_.at(e.seq);
    const SamplingParams& p = st.request->request.params;
    const int32_t n = 1 + s.pending_forks;  // n > 1: siblings sample their first token here
    std::vector<SampleResult> samples;
    if (sampled.device_first[r] >= 0) {
      for (int32_t i = 0; i < n; ++i) {
        SampleResult d;
        d.token = sampled.device_tokens[size_t(sampled.device_first[r] + i)];
        samples.push_back(d);
      }
      counters_.device_sampled_tokens += uint64_t(n);
    } else if (sampled.host_row[r] < 0) {
      // Plain greedy: every sibling gets the argmax.
      SampleResult g;
      g.token = sampled.argmax[r];
      samples.assign(size_t(n), g);
      counters_.argmax_tokens += uint64_t(n);
    } else {
      std::span<const float> logit_row(logits_host_.data() + size_t(sampled.host_row[r]) * size_t(vocab),
                                       size_t(vocab));
      std::span<const int32_t> all(s.tokens);
      const auto prompt = all.first(size_t(s.prompt_len));
      const auto output = all.subspan(size_t(s.prompt_len));
      std::span<const int32_t> bans;
      if (int32_t(output.size()) < p.min_tokens) bans = st.output.min_tokens_bans();
      for (int32_t i = 0; i < n; ++i)
        samples.push_back(sampler_.sample(logit_row, {&p, prompt, output, s.index + i, bans}));
    }
    if (s.pending_forks > 0) {
      const std::vector<SeqId> kids = scheduler_->fork(e.seq, s.pending_forks);
      RequestState* rs = st.request;
      rs->forked = true;
      for (size_t k = 0; k < kids.size(); ++k)
        seqs_.emplace(kids[k], std::make_unique<SeqState>(kids[k], rs, scheduler_->get(kids[k]).index,
                                                          tokenizer_, eos_ids_));
      on_token(e.seq, samples[0].token, samples[0]);
      for (size_t k = 0; k < kids.size(); ++k) on_token(kids[k], samples[k + 1].token, samples[k + 1]);
    } else {
      on_token(e.seq, samples[0].token, samples[0]);
    }
  }
  counters_.preemptions += plan.preempted.size();
}

void Engine::on_token(SeqId seq, int32_t token, const SampleResult& sample, bool resolve) {
  SeqState& st = *seqs_.at(seq);
  RequestState& r = *st.request;
  if (resolve)
    scheduler_->resolve_token(seq, token);
  else
    scheduler_->append_token(seq, token);
  counters_.generated_tokens++;
  const int32_t num_output = scheduler_->get(seq).num_output_tokens();
  StreamEvent e;
  e.request_id = r.id;
  e.seq_index = st.index;
  e.token_ids.push_back(token);
  e.first_scheduled = scheduler_->get(seq).first_scheduled_time;
  e.text = st.output.append(token, num_output, &e.finish);
  if (r.request.params.logprobs) e.logprobs.push_back(sample);
  if (e.finish != FinishReason::None) {
    scheduler_->finish(seq);
    r.done[size_t(st.index)] = true;
    ++r.num_done;
    seqs_.erase(seq);
    if (r.num_done == int32_t(r.done.size())) {
      e.request_done = true;
      counters_.finished_requests++;
      StreamCallback cb = std::move(r.callback);
      requests_.erase(r.id);
      if (cb) cb(e);
      return;
    }
  }
  if (r.callback) r.callback(e);
}

void Engine::end_sequence(SeqId seq, FinishReason reason, EngineErrorKind error,
                          const std::string& message, bool free_in_scheduler) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  SeqState& st = *it->second;
  RequestState& r = *st.request;
  if (free_in_scheduler && scheduler_->find(seq) != nullptr) scheduler_->finish(seq);
  std::vector<StreamEvent> events;
  StreamEvent e;
  e.request_id = r.id;
  e.seq_index = st.index;
  e.text = st.output.flush();
  e.finish = reason;
  e.error = error;
  e.error_message = message;
  r.done[size_t(st.index)] = true;
  ++r.num_done;
  events.push_back(std::move(e));
  seqs_.erase(it);
  if (!r.forked) {  // the parent ended before its siblings existed: they end with it
    r.forked = true;
    for (size_t i = 0; i < r.done.size(); ++i) {
      if (r.done[i]) continue;
      r.done[i] = true;
      ++r.num_done;
      StreamEvent s;
      s.request_id = r.id;
      s.seq_index = int32_t(i);
      s.finish = reason;
      s.error = error;
      s.error_message = message;
      events.push_back(std::move(s));
    }
  }
  StreamCallback cb = r.callback;
  const bool done = r.num_done == int32_t(r.done.size());
  if (done) {
    events.back().request_done = true;
    counters_.finished_requests++;
    requests_.erase(r.id);
  }
  if (cb)
    for (const auto& ev : events) cb(ev);
}

void Engine::end_request_with_error(RequestId id, EngineErrorKind error, const std::string& message) {
  if (requests_.count(id) == 0) return;
  for (SeqId s : scheduler_->abort_request(id))
    end_sequence(s, FinishReason::Error, error, message, false);
}

void Engine::abort_all(EngineErrorKind error, const std::string& message) {
  std::vector<RequestId> ids;
  for (const auto& [id, r] : requests_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (RequestId id : ids) {
    for (SeqId s : scheduler_->abort_request(id))
      end_sequence(s, FinishReason::Abort, error, message, false);
  }
}

void Engine::publish_stats() {
  EngineStats s = counters_;
  const SchedulerStats ss = scheduler_->stats();
  s.preemptions = ss.preemptions;
  s.running = ss.running;
  s.waiting = ss.waiting;
  s.kv = kv_->stats();
  std::lock_guard<std::mutex> lk(mu_);
  published_ = s;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return published_;
}

std::vector<Result> Engine::generate(std::vector<Request> requests) {
  struct Collector {
    std::mutex mu;
    std::condition_variable cv;
    size_t remaining = 0;
  } col;
  std::vector<Result> results(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    Result& res = results[i];
    res.external_id = requests[i].external_id;
    res.prompt_tokens = int32_t(requests[i].prompt_ids.size());
    for (int32_t k = 0; k < std::max(1, requests[i].params.n); ++k)
    {
      SequenceResult sr;
      sr.index = k;
      res.sequences.push_back(std::move(sr));
    }
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    Result* res = &results[i];
    const bool want_logprobs = requests[i].params.logprobs.has_value();
    try {
      {
        std::lock_guard<std::mutex> lk(col.mu);
        ++col.remaining;
      }
      res->id = submit(std::move(requests[i]), [res, &col, want_logprobs](const StreamEvent& e) {
        std::lock_guard<std::mutex> lk(col.mu);
        if (e.error != EngineErrorKind::None && res->error == EngineErrorKind::None) {
          res->error = e.error;
          res->error_message = e.error_message;
        }
        if (size_t(e.seq_index) < res->sequences.size()) {
          SequenceResult& s = res->sequences[size_t(e.seq_index)];
          s.output_ids.insert(s.output_ids.end(), e.token_ids.begin(), e.token_ids.end());
          s.text += e.text;
          if (want_logprobs) s.logprobs.insert(s.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
          if (e.finish != FinishReason::None) s.finish_reason = e.finish;
        }
        if (e.request_done) {
          --col.remaining;
          col.cv.notify_all();
        }
      });
    } catch (const Error& err) {
      std::lock_guard<std::mutex> lk(col.mu);
      --col.remaining;
      res->error = EngineErrorKind::Invalid;
      res->error_message = err.what();
      for (auto& s : res->sequences) s.finish_reason = FinishReason::Error;
    }
  }
  if (running_thread_) {
    std::unique_lock<std::mutex> lk(col.mu);
    col.cv.wait(lk, [&] { return col.remaining == 0; });
  } else {
    for (;;) {
      {
        std::lock_guard<std::mutex> lk(col.mu);
        if (col.remaining == 0) break;
      }
      if (!run_step() && scheduler_->idle()) {
        std::lock_guard<std::mutex> lk(col.mu);
        LOOM_CHECK(col.remaining == 0, "engine idle with {} requests unfinished", col.remaining);
        break;
      }
    }
  }
  return results;
}

}  // namespace loom
