// StepExecutor: a plan's model input, the forward pass, and the step left in
// flight by async scheduling. Token choice on the logits: executor_tokens.cpp.
#include "engine/executor_impl.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace loom {

StepExecutor::Impl::Impl(std::unique_ptr<ModelRunner> own, ModelRunner& runner, ExecutorConfig cfg)
    : own_runner(std::move(own)), model(runner), config(std::move(cfg)), sampler(config.seed) {
  if (config.profile_steps) {
    profiler = std::make_unique<StepProfiler>(model.backend());
    model.model().set_forward_timing(true);
  }
  const SpeculativeConfig& sc = config.speculative;
  const JumpForwardConfig& jf = config.jump_forward;
  const bool jump_forward = jf.enabled && jf.max_tokens > 0;
  if (!sc.enabled() && !jump_forward) return;
  if (sc.enabled()) {
    if (sc.custom) {
      proposer = sc.custom;
    } else if (sc.method == SpeculativeConfig::Method::Ngram) {
      proposer = make_ngram_proposer(sc.ngram_min, sc.ngram_max);
    } else {
      LOOM_THROW(
          "speculative decoding with a draft model needs the draft model loaded "
          "(make_draft_proposer as SpeculativeConfig::custom)");
    }
  }
  SpecPolicyConfig pc;
  pc.max_tokens = proposer ? sc.num_tokens : std::max(1, jf.max_tokens);
  pc.max_forced_tokens = jump_forward ? jf.max_tokens : 0;
  pc.free_proposals = proposer ? proposer->free_proposals() : true;
  pc.fixed_step_seconds = sc.fixed_step_seconds;
  pc.always = sc.always;
  policy = std::make_unique<SpecPolicy>(std::move(pc));
}

StepExecutor::StepExecutor(ModelRunner& runner, ExecutorConfig config)
    : impl_(std::make_unique<Impl>(nullptr, runner, config)) {}

StepExecutor::StepExecutor(Transformer& model, ExecutorConfig config) {
  auto own = std::make_unique<ModelRunner>(model);
  ModelRunner& runner = *own;
  impl_ = std::make_unique<Impl>(std::move(own), runner, config);
}

StepExecutor::~StepExecutor() = default;

int64_t StepExecutor::vocab_size() const { return impl_->model.config().vocab_size; }
int64_t StepExecutor::max_position() const { return impl_->model.config().max_position; }

int64_t StepExecutor::kv_cache_bytes_per_block(int64_t block_size, DType dtype) const {
  const int64_t draft = impl_->proposer ? impl_->proposer->kv_cache_bytes_per_block(block_size, dtype) : 0;
  return impl_->model.kv_cache_bytes_per_block(block_size, dtype) + draft;
}

void StepExecutor::allocate_kv_cache(int64_t num_blocks, int64_t block_size, DType dtype) {
  impl_->cache = impl_->model.allocate_kv_cache(num_blocks, block_size, dtype);
  if (impl_->proposer) impl_->proposer->allocate_kv_cache(num_blocks, block_size, dtype);
}

bool StepExecutor::has_in_flight() const { return impl_->in_flight.download != nullptr; }
const ExecutorStats& StepExecutor::stats() const { return impl_->stats; }
StepProfiler* StepExecutor::profiler() {
  return impl_->profiler.get();
}
std::optional<StepOutput> StepExecutor::finish_in_flight() { return impl_->finish_in_flight(); }

StepInput StepExecutor::Impl::build_input(const StepPlan& plan, const Scheduler& seqs) {
  const int32_t bs = seqs.block_size();
  StepInput step;
  AttentionMetadata& m = step.attn;
  m.num_seqs = int32_t(plan.seqs.size());
  int32_t max_blocks = 0;
  for (const auto& e : plan.seqs) max_blocks = std::max(max_blocks, seqs.get(e.seq).blocks.num_blocks());
  m.max_blocks_per_seq = max_blocks;
  step.tokens.reserve(size_t(plan.num_tokens));
  step.positions.reserve(size_t(plan.num_tokens));
  m.slot_mapping.reserve(size_t(plan.num_tokens));
  m.block_tables.reserve(plan.seqs.size() * size_t(max_blocks));
  m.query_start.reserve(plan.seqs.size() + 1);
  m.context_lens.reserve(plan.seqs.size());
  step.logit_rows.reserve(plan.seqs.size());
  m.query_start.push_back(0);
  layout.clear();
  extra_rows = false;
  for (const auto& e : plan.seqs) {
    const Sequence& s = seqs.get(e.seq);
    const auto& blocks = s.blocks.blocks();
    const int32_t first = int32_t(step.tokens.size());
    const int32_t known_end = e.start + e.num_tokens - e.num_draft;  // then the draft's tokens
    LOOM_CHECK(e.num_draft <= int32_t(s.draft.size()), "sequence {} verifies {} of {} draft tokens", e.seq,
               e.num_draft, s.draft.size());
    for (int32_t p = e.start; p < e.start + e.num_tokens; ++p) {
      step.tokens.push_back(p < known_end ? s.tokens[size_t(p)] : s.draft[size_t(p - known_end)]);
      step.positions.push_back(p);
      m.slot_mapping.push_back(int64_t(blocks[size_t(p / bs)]) * bs + p % bs);
    }
    m.query_start.push_back(int32_t(step.tokens.size()));
    m.context_lens.push_back(e.start + e.num_tokens);
    for (int32_t b = 0; b < max_blocks; ++b)
      m.block_tables.push_back(b < int32_t(blocks.size()) ? blocks[size_t(b)] : 0);
    RowLayout row;
    row.seq = e.seq;
    row.prompt_row = int32_t(step.logit_rows.size());
    if (s.params().prompt_logprobs) {
      // Position p's logits score prompt token p + 1; the owed ones only (a
      // preempted sequence recomputes positions it already scored).
      const int32_t from = std::max(e.start, s.prompt_logprobs_next - 1);
      const int32_t to = std::min(e.start + e.num_tokens, s.prompt_len - 1);
      row.prompt_pos = from;
      for (int32_t p = from; p < to; ++p) step.logit_rows.push_back(first + (p - e.start));
      row.prompt_rows = std::max(0, to - from);
      extra_rows = extra_rows || row.prompt_rows > 0;
    }
    if (s.pooled) {
      // The positions of this chunk it has not pooled yet.
      const int32_t from = std::max(e.start, s.pooled->next());
      const int32_t to = std::min(e.start + e.num_tokens, s.pooled->range().end);
      row.pool_row = int32_t(step.hidden_rows.size());
      row.pool_pos = from;
      row.pool_rows = std::max(0, to - from);
      for (int32_t p = from; p < to; ++p) step.hidden_rows.push_back(first + (p - e.start));
    }
    if (e.sample && !s.pooled) {
      // The last known token's row, then one row per draft token.
      row.sample_row = int32_t(step.logit_rows.size());
      row.draft_rows = e.num_draft;
      for (int32_t i = 0; i <= e.num_draft; ++i)
        step.logit_rows.push_back(int32_t(step.tokens.size()) - 1 - e.num_draft + i);
      extra_rows = extra_rows || e.num_draft > 0;
    }
    layout.push_back(row);
  }
  // The model always returns at least one row; a step of prefill chunks only
  // asks for one and ignores it.
  if (step.logit_rows.empty()) step.logit_rows.push_back(int32_t(step.tokens.size()) - 1);
  // Placeholders name rows of the step in flight; every other token is known.
  if (in_flight.download) step.token_source = &in_flight.ids;
  return step;
}

void StepExecutor::Impl::score_prompts(const Tensor& logits, const Scheduler& seqs, StepOutput& out) {
  std::vector<int32_t> rows;
  for (const RowLayout& r : layout)
    for (int32_t i = 0; i < r.prompt_rows; ++i) rows.push_back(r.prompt_row + i);
  if (rows.empty()) return;
  Backend& be = model.backend();
  const int64_t vocab = logits.dim(1);
  const Tensor dst = gather_rows_kept(be, logits, rows, prompt_rows);
  copy_to_host_f32(be, dst, prompt_host);
  size_t at = 0;
  for (const RowLayout& r : layout) {
    if (r.prompt_rows == 0) continue;
    const Sequence* s = seqs.find(r.seq);
    PromptLogprobs p;
    p.seq = r.seq;
    p.first = r.prompt_pos + 1;
    for (int32_t i = 0; i < r.prompt_rows; ++i, ++at) {
      if (s == nullptr) continue;
      std::span<const float> row(prompt_host.data() + at * size_t(vocab), size_t(vocab));
      const int32_t token = s->tokens[size_t(r.prompt_pos + i + 1)];
      p.entries.push_back(sampler.logprobs_of(row, token, *s->params().prompt_logprobs));
    }
    if (s != nullptr) out.prompt_logprobs.push_back(std::move(p));
  }
}

Tensor StepExecutor::Impl::sample_rows_only(const Tensor& logits, int64_t num_sampled) {
  std::vector<int32_t> rows;
  for (const RowLayout& r : layout)
    if (r.sample_row >= 0 && r.draft_rows == 0) rows.push_back(r.sample_row);
  LOOM_CHECK(int64_t(rows.size()) == num_sampled, "{} sample rows for {} sampled sequences", rows.size(),
             num_sampled);
  return gather_rows_kept(model.backend(), logits, rows, compact_logits);
}

std::vector<SeqId> StepExecutor::Impl::sampled_rows(const Scheduler& seqs) const {
  std::vector<SeqId> rows;
  rows.reserve(layout.size());
  for (const RowLayout& r : layout) {
    if (r.sample_row < 0) continue;
    const Sequence* s = seqs.find(r.seq);
    // Gone meanwhile, or scoring its prompt only (max_tokens 0): no token.
    rows.push_back(s != nullptr && s->max_tokens > 0 ? r.seq : 0);
  }
  return rows;
}

std::vector<PooledRows> StepExecutor::Impl::pool_hidden_states() {
  std::vector<PooledRows> out;
  const bool any =
      std::any_of(layout.begin(), layout.end(), [](const RowLayout& r) { return r.pool_rows > 0; });
  if (!any) return out;
  copy_to_host_f32(model.backend(), model.hidden_states(), pool_host);
  const size_t width = size_t(model.config().hidden_size);
  for (const RowLayout& r : layout) {
    if (r.pool_rows == 0) continue;
    PooledRows p;
    p.seq = r.seq;
    p.first = r.pool_pos;
    p.count = r.pool_rows;
    p.sum.assign(width, 0.0f);
    for (int32_t i = 0; i < r.pool_rows; ++i) {
      const float* row = pool_host.data() + size_t(r.pool_row + i) * width;
      for (size_t j = 0; j < width; ++j) p.sum[j] += row[j];
    }
    out.push_back(std::move(p));
  }
  return out;
}

StepOutput StepExecutor::execute(const StepPlan& plan, const Scheduler& seqs, const Deliver& deliver_previous) {
  Impl& x = *impl_;
  LOOM_CHECK(!plan.empty(), "execute of an empty plan");
  StepProfiler* prof = x.profiler.get();
  if (prof) {
    // Speculative drafts ride on decodes; everything else is prompt (or recompute).
    int32_t drafts = 0;
    for (const ScheduledSeq& e : plan.seqs) drafts += e.num_draft;
    const int32_t prompt_tokens = plan.num_tokens - plan.num_decode_tokens - drafts;
    prof->set_kind(prompt_tokens == 0            ? StepKind::Decode
                   : plan.num_decode_tokens == 0 ? StepKind::Prefill
                                                 : StepKind::Mixed);
    prof->mark_start();
  }
  std::optional<StepInput> step;
  std::chrono::steady_clock::time_point t0;  // the speculation policy's step cost starts here
  bool was_in_flight = false;
  {
    PhaseTimer t(prof, StepPhase::Prepare);
    if (!plan.copies.empty()) {
      std::vector<KvBlockCopy> blocks;
      blocks.reserve(plan.copies.size());
      for (const BlockCopy& c : plan.copies) blocks.push_back({c.src, c.dst});
      x.model.copy_blocks(blocks, x.cache);
    }
    t0 = std::chrono::steady_clock::now();
    was_in_flight = x.in_flight.download != nullptr;
    step = x.build_input(plan, seqs);
  }
  Tensor logits = x.model.forward(*step, x.cache);
  if (prof) {
    const Transformer::ForwardTiming& ft = x.model.model().last_forward_timing();
    prof->add(StepPhase::Upload, ft.upload_s);
    prof->add(StepPhase::Launch, ft.launch_s);
    prof->set_replayed(ft.replayed);
  }
  // The device runs this step while the host delivers the previous one's
  // tokens (which may end sequences of this plan: their rows are ignored).
  std::optional<StepOutput> previous;
  {
    PhaseTimer t(prof, StepPhase::Wait);
    previous = x.finish_in_flight();
  }
  if (previous) {
    PhaseTimer t(prof, StepPhase::Apply);
    deliver_previous(*previous);
  }
  // Tokens first: an async step's are then chosen on the device while the
  // host waits for the pooled hidden states.
  StepOutput out;
  {
    PhaseTimer t(prof, StepPhase::Sample);
    out = x.choose(seqs, logits);
    out.pooled = x.pool_hidden_states();
  }
  if (prof) prof->mark_end();
  // The speculation policy's cost of a decode-only step of this many query
  // tokens: the wall time of execute (an async step's includes waiting for
  // the previous step, so in a run of them it is one step's time). A step
  // that waited for an async one and then for its own tokens took both:
  // not a measurement.
  const bool decode_only = plan.num_decode_tokens == int32_t(plan.seqs.size());
  if (x.policy && decode_only && !(was_in_flight && x.in_flight.download == nullptr))
    x.policy->observe_step(
        plan.num_tokens,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return out;
}

StepOutput StepExecutor::Impl::choose(const Scheduler& seqs, Tensor& logits) {
  const std::vector<SeqId> rows = sampled_rows(seqs);
  const bool any_row = std::any_of(rows.begin(), rows.end(), [](SeqId s) { return s != 0; });
  if (!extra_rows) {
    if (rows.empty() || !any_row) return StepOutput{};
    LOOM_CHECK(int64_t(rows.size()) == logits.dim(0), "{} logits rows for {} sampled sequences", logits.dim(0),
               rows.size());
    apply_constraints(rows, seqs, logits);
    if (can_run_async(rows, seqs)) return launch_async(rows, seqs, logits);
    return choose_tokens(rows, seqs, logits);
  }
  // Rows beyond the sample rows (prompt logprobs, drafts): prompts scored
  // on the host, drafts verified, and the other sample rows go on alone,
  // synchronously.
  StepOutput scored;
  score_prompts(logits, seqs, scored);
  verify_drafts(logits, seqs, scored);
  std::vector<SeqId> plain;  // the sample rows of sequences without a draft
  for (const RowLayout& r : layout) {
    if (r.sample_row < 0 || r.draft_rows > 0) continue;
    const Sequence* s = seqs.find(r.seq);
    plain.push_back(s != nullptr && s->max_tokens > 0 ? r.seq : 0);
  }
  if (std::none_of(plain.begin(), plain.end(), [](SeqId s) { return s != 0; })) return scored;
  Tensor sampled = sample_rows_only(logits, int64_t(plain.size()));
  apply_constraints(plain, seqs, sampled);
  StepOutput out = choose_tokens(plain, seqs, sampled);
  out.prompt_logprobs = std::move(scored.prompt_logprobs);
  out.rows.insert(out.rows.end(), std::make_move_iterator(scored.rows.begin()),
                  std::make_move_iterator(scored.rows.end()));
  return out;
}

std::optional<StepOutput> StepExecutor::Impl::finish_in_flight() {
  if (!in_flight.download) return std::nullopt;
  InFlight f = std::move(in_flight);
  in_flight = InFlight{};
  // Until the ids are back, every row of the step counts as lost if it fails.
  failed = f.rows;
  const std::vector<int32_t>& ids = f.download->wait();
  LOOM_CHECK(ids.size() == f.rows.size(), "{} tokens back for {} rows", ids.size(), f.rows.size());
  failed.clear();
  StepOutput out;
  out.kind = StepOutput::Kind::Resolutions;
  out.rows.reserve(f.rows.size());
  for (size_t r = 0; r < f.rows.size(); ++r) {
    if (f.rows[r] == 0) continue;
    SequenceTokens t;
    t.seq = f.rows[r];
    t.tokens.push_back(SampleResult{ids[r], 0.0f, {}});
    out.rows.push_back(std::move(t));
  }
  return out;
}

std::vector<SeqId> StepExecutor::take_failed_in_flight() {
  Impl& x = *impl_;
  std::vector<SeqId> out = std::move(x.failed);
  x.failed.clear();
  for (SeqId s : x.in_flight.rows) out.push_back(s);
  x.in_flight = Impl::InFlight{};
  out.erase(std::remove(out.begin(), out.end(), SeqId{0}), out.end());
  return out;
}

StepOutput StepExecutor::Impl::launch_async(const std::vector<SeqId>& rows, const Scheduler& seqs, const Tensor& logits) {
  Backend& be = model.backend();
  const int64_t vocab = logits.dim(1);
  const auto n = static_cast<int64_t>(rows.size());
  InFlight next;
  next.rows = rows;
  Tensor& buf = step_ids[step_ids_next];
  step_ids_next ^= 1;
  if (buf.data() == nullptr || buf.numel() < n) buf = be.alloc(DType::I32, {std::max<int64_t>(n, 2 * buf.numel())});
  next.ids = buf.slice_rows(0, n);
  be.argmax_rows_to(logits, next.ids);
  sample_specs.clear();
  logit_edits.clear();
  const bool device_sampling = config.device_sampling && be.has_device_sampler();
  StepOutput out;
  out.kind = StepOutput::Kind::Placeholders;
  out.rows.reserve(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r] == 0) continue;
    const Sequence& s = seqs.get(rows[r]);
    if (device_sampling && !s.params().greedy()) {
      add_device_specs(int32_t(r), s, vocab);
      stats.device_sampled_tokens++;
    } else {
      stats.argmax_tokens++;
    }
    SequenceTokens t;
    t.seq = rows[r];
    t.tokens.push_back(SampleResult{-int32_t(r) - 1, 0.0f, {}});
    out.rows.push_back(std::move(t));
  }
  if (!sample_specs.empty())
    LOOM_CHECK(be.sample_rows_to(logits, sample_specs, logit_edits, next.ids), "the backend's device sampler failed");
  next.download = be.download_tokens(next.ids, n);
  stats.async_steps++;
  in_flight = std::move(next);
  return out;
}

}  // namespace loom
