// StepExecutor: a plan's model input, the forward pass, and the step left in
// flight by async scheduling. Token choice on the logits: executor_tokens.cpp.
#include "engine/executor.h"

#include <algorithm>

#include "core/error.h"

namespace loom {

StepExecutor::StepExecutor(ModelRunner& model, int64_t num_blocks, int64_t block_size, DType kv_dtype,
                           ExecutorConfig config)
    : model_(model), config_(config), sampler_(config.seed) {
  cache_ = model_.allocate_kv_cache(num_blocks, block_size, kv_dtype);
}

StepExecutor::~StepExecutor() = default;

StepInput StepExecutor::build_input(const StepPlan& plan, const Scheduler& seqs) const {
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
  m.query_start.push_back(0);
  for (const auto& e : plan.seqs) {
    const Sequence& s = seqs.get(e.seq);
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
  }
  // The model always returns at least one row; a step of prefill chunks only
  // asks for one and ignores it.
  if (step.logit_rows.empty()) step.logit_rows.push_back(int32_t(step.tokens.size()) - 1);
  // Placeholders name rows of the step in flight; every other token is known.
  if (in_flight_.download) step.token_source = &in_flight_.ids;
  return step;
}

std::vector<SeqId> StepExecutor::sampled_rows(const StepPlan& plan, const Scheduler& seqs) {
  std::vector<SeqId> rows;
  for (const auto& e : plan.seqs)
    if (e.sample) rows.push_back(seqs.find(e.seq) != nullptr ? e.seq : 0);
  return rows;
}

StepOutput StepExecutor::execute(const StepPlan& plan, const Scheduler& seqs, const Deliver& deliver_previous) {
  LOOM_CHECK(!plan.empty(), "execute of an empty plan");
  if (!plan.copies.empty()) {
    std::vector<KvBlockCopy> blocks;
    blocks.reserve(plan.copies.size());
    for (const BlockCopy& c : plan.copies) blocks.push_back({c.src, c.dst});
    model_.copy_blocks(blocks, cache_);
  }
  const StepInput step = build_input(plan, seqs);
  Tensor logits = model_.forward(step, cache_);
  // The device runs this step while the host delivers the previous one's
  // tokens (which may end sequences of this plan: their rows are ignored).
  if (auto previous = finish_in_flight()) deliver_previous(*previous);
  const std::vector<SeqId> rows = sampled_rows(plan, seqs);
  const bool any_row = std::any_of(rows.begin(), rows.end(), [](SeqId s) { return s != 0; });
  if (rows.empty() || !any_row) return StepOutput{};
  LOOM_CHECK(int64_t(rows.size()) == logits.dim(0), "{} logits rows for {} sampled sequences", logits.dim(0),
             rows.size());
  apply_constraints(rows, seqs, logits);
  if (can_run_async(rows, seqs)) return launch_async(rows, seqs, logits);
  return choose_tokens(rows, seqs, logits);
}

std::optional<StepOutput> StepExecutor::finish_in_flight() {
  if (!in_flight_.download) return std::nullopt;
  InFlight f = std::move(in_flight_);
  in_flight_ = InFlight{};
  // Until the ids are back, every row of the step counts as lost if it fails.
  failed_ = f.rows;
  const std::vector<int32_t>& ids = f.download->wait();
  LOOM_CHECK(ids.size() == f.rows.size(), "{} tokens back for {} rows", ids.size(), f.rows.size());
  failed_.clear();
  StepOutput out;
  out.kind = StepOutput::Kind::Resolutions;
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
  std::vector<SeqId> out = std::move(failed_);
  failed_.clear();
  for (SeqId s : in_flight_.rows) out.push_back(s);
  in_flight_ = InFlight{};
  out.erase(std::remove(out.begin(), out.end(), SeqId{0}), out.end());
  return out;
}

StepOutput StepExecutor::launch_async(const std::vector<SeqId>& rows, const Scheduler& seqs, const Tensor& logits) {
  Backend& be = model_.backend();
  const int64_t vocab = logits.dim(1);
  const auto n = static_cast<int64_t>(rows.size());
  InFlight next;
  next.rows = rows;
  Tensor& buf = step_ids_[step_ids_next_];
  step_ids_next_ ^= 1;
  if (buf.data() == nullptr || buf.numel() < n) buf = be.alloc(DType::I32, {std::max<int64_t>(n, 2 * buf.numel())});
  next.ids = buf.slice_rows(0, n);
  be.argmax_rows_to(logits, next.ids);
  sample_specs_.clear();
  logit_edits_.clear();
  const bool device_sampling = config_.device_sampling && be.has_device_sampler();
  StepOutput out;
  out.kind = StepOutput::Kind::Placeholders;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r] == 0) continue;
    const Sequence& s = seqs.get(rows[r]);
    if (device_sampling && !s.params().greedy()) {
      add_device_specs(int32_t(r), s, vocab);
      stats_.device_sampled_tokens++;
    } else {
      stats_.argmax_tokens++;
    }
    SequenceTokens t;
    t.seq = rows[r];
    t.tokens.push_back(SampleResult{-int32_t(r) - 1, 0.0f, {}});
    out.rows.push_back(std::move(t));
  }
  if (!sample_specs_.empty())
    LOOM_CHECK(be.sample_rows_to(logits, sample_specs_, logit_edits_, next.ids), "the backend's device sampler failed");
  next.download = be.download_tokens(next.ids, n);
  stats_.async_steps++;
  in_flight_ = std::move(next);
  return out;
}

}  // namespace loom
