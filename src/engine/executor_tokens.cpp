// StepExecutor: choosing a step's tokens from its logits. Constrained rows
// are masked first (on the backend). Then each row takes the cheapest path
// that gives the Sampler's exact token: the backend's argmax for plain greedy
// rows, the backend's sampler for sampled rows without logprobs, and the host
// Sampler (logits copied to the host) for the rest.
#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/executor_impl.h"

namespace loom {
namespace {

// Fewer constrained rows than this fill their masks on the engine thread
// alone (a parallel job's hand-off costs more than a few fills).
constexpr size_t kParallelMaskRows = 4;

// Whether Sampler::sample would return the plain argmax of the (masked)
// logits: greedy, no logprobs, no penalty, bias or ban changing any logit.
bool plain_greedy(const Sequence& s) {
  return s.params().argmax_only() && s.banned_now().empty();
}

SampleContext context_of(const Sequence& s, int32_t seq_index) {
  std::span<const int32_t> all(s.tokens);
  return SampleContext{&s.params(), all.first(size_t(s.prompt_len)), all.subspan(size_t(s.prompt_len)),
                       seq_index, s.banned_now()};
}

}  // namespace

void StepExecutor::Impl::apply_constraints(const std::vector<SeqId>& rows, const Scheduler& seqs,
                                           Tensor& logits) {
  const int64_t vocab = logits.dim(1);
  const size_t words = size_t((vocab + 31) / 32);
  mask_rows.clear();
  mask_todo.clear();
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r] == 0) continue;
    const Sequence& s = seqs.get(rows[r]);
    if (s.constraint) mask_todo.emplace_back(int32_t(r), s.constraint.get());
  }
  if (mask_todo.empty()) return;
  const size_t n = mask_todo.size();
  mask_words.assign(n * words, 0u);
  mask_filled.assign(n, 0);
  mask_seconds.assign(n, 0.0);
  // Each sequence's matcher is its own: masks of many rows fill in parallel
  // (each fill walks the grammar's stack and tokens; tens of us to ms). The
  // step's forward is already launched, so on a device this overlaps it.
  auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      mask_filled[size_t(i)] = mask_todo[size_t(i)].second->fill_next_token_bitmask(
          std::span<uint32_t>(mask_words.data() + size_t(i) * words, words));
      mask_seconds[size_t(i)] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  };
  if (n >= kParallelMaskRows)
    ThreadPool::global().parallel_for(int64_t(n), fill, 1);
  else
    fill(0, int64_t(n));
  // Compact: rows whose constraint allows every token carry no mask.
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    stats.mask_time.observe(mask_seconds[i]);
    if (!mask_filled[i]) continue;
    if (kept != i)
      std::copy_n(mask_words.begin() + std::ptrdiff_t(i * words), words,
                  mask_words.begin() + std::ptrdiff_t(kept * words));
    mask_rows.push_back(mask_todo[i].first);
    ++kept;
  }
  mask_words.resize(kept * words);
  if (mask_rows.empty()) return;
  model.backend().apply_token_bitmask(logits, mask_rows, mask_words);
  stats.masked_rows += mask_rows.size();
}

bool StepExecutor::Impl::can_run_async(const std::vector<SeqId>& rows, const Scheduler& seqs) const {
  if (!config.async_scheduling || model.distributed()) return false;
  // Speculation needs every token on the host to propose the next draft:
  // while the policy would let a row propose after this step, steps wait for
  // their tokens (a row resting one more step proposes after the next).
  // Jump-forward likewise, for the constrained rows that may force tokens.
  const SpeculativeConfig& sc = config.speculative;
  if (policy && (sc.max_batch == 0 || rows.size() <= size_t(sc.max_batch)))
    for (SeqId id : rows) {
      if (id == 0) continue;
      if (proposer && policy->proposes_soon(id)) return false;
      if (jumps_forward(seqs.get(id)) && policy->forced_soon(id)) return false;
    }
  const bool device_sampling = config.device_sampling && model.backend().has_device_sampler();
  bool any = false;
  for (SeqId id : rows) {
    if (id == 0) continue;
    const Sequence& s = seqs.get(id);
    const SamplingParams& p = s.params();
    if (s.pending_forks > 0 || p.logprobs) return false;
    const bool on_device = (config.greedy_fast_path && plain_greedy(s)) || (device_sampling && !p.greedy());
    if (!on_device) return false;
    any = true;
  }
  return any;
}

void StepExecutor::Impl::add_device_specs(int32_t r, const Sequence& s, int64_t vocab) {
  const SamplingParams& p = s.params();
  SampleContext ctx = context_of(s, s.index);
  const int32_t edits_begin = int32_t(logit_edits.size());
  Sampler::logit_edits(ctx, int32_t(vocab), logit_edits);
  // One draw per sibling (n > 1 forks sample their first token here).
  for (int32_t i = 0; i <= s.pending_forks; ++i) {
    ctx.seq_index = s.index + i;
    SampleSpec spec;
    spec.row = r;
    spec.temperature = p.temperature;
    spec.top_k = p.top_k;
    spec.top_p = p.top_p;
    spec.min_p = p.min_p;
    spec.uniform = sampler.draw_uniform(ctx);
    spec.edits_begin = edits_begin;
    spec.edits_end = int32_t(logit_edits.size());
    sample_specs.push_back(spec);
  }
}

StepExecutor::Impl::Selection StepExecutor::Impl::select(const std::vector<SeqId>& rows, const Scheduler& seqs,
                                             const Tensor& logits) {
  Selection out;
  Backend& be = model.backend();
  const int64_t vocab = logits.dim(1);
  std::vector<int32_t> slow;  // logits rows the Sampler needs on the host
  size_t device = 0;          // rows drawn on the device
  sample_specs.clear();
  logit_edits.clear();
  const bool device_sampling = config.device_sampling && be.has_device_sampler();
  out.rows.assign(rows.size(), RowSource{});
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r] == 0) continue;  // ended by the step before (async scheduling): argmax, unused
    const Sequence& s = seqs.get(rows[r]);
    const SamplingParams& p = s.params();
    if (config.greedy_fast_path && plain_greedy(s)) continue;
    if (device_sampling && !p.greedy() && !p.logprobs) {
      out.rows[r].device_first = int32_t(sample_specs.size());
      add_device_specs(int32_t(r), s, vocab);
      ++device;
      continue;
    }
    out.rows[r].host_row = int32_t(slow.size());
    slow.push_back(int32_t(r));
  }
  if (!sample_specs.empty())
    LOOM_CHECK(be.sample_rows(logits, sample_specs, logit_edits, out.device_tokens) &&
                   out.device_tokens.size() == sample_specs.size(),
               "the backend's device sampler failed");
  if (slow.size() + device < rows.size()) be.argmax_rows(logits, out.argmax);
  if (slow.empty()) return out;
  if (slow.size() == rows.size()) {
    copy_to_host_f32(be, logits, logits_host);  // every row (bf16 on GPU)
    return out;
  }
  // Only the rows the Sampler needs: gathered on the device, then copied.
  copy_to_host_f32(be, gather_rows_kept(be, logits, slow, sample_logits), logits_host);
  return out;
}

StepOutput StepExecutor::Impl::choose_tokens(const std::vector<SeqId>& rows, const Scheduler& seqs, const Tensor& logits) {
  const int64_t vocab = logits.dim(1);
  const Selection sel = select(rows, seqs, logits);
  StepOutput out;
  out.kind = StepOutput::Kind::Tokens;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r] == 0) continue;
    const Sequence& s = seqs.get(rows[r]);
    const int32_t n = 1 + s.pending_forks;  // n > 1: siblings sample their first token here
    SequenceTokens t;
    t.seq = rows[r];
    const RowSource src = sel.rows[r];
    if (src.device_first >= 0) {
      for (int32_t i = 0; i < n; ++i)
        t.tokens.push_back(SampleResult{sel.device_tokens[size_t(src.device_first + i)], 0.0f, {}});
      stats.device_sampled_tokens += uint64_t(n);
    } else if (src.host_row < 0) {
      // Plain greedy: every sibling gets the argmax.
      t.tokens.assign(size_t(n), SampleResult{sel.argmax[r], 0.0f, {}});
      stats.argmax_tokens += uint64_t(n);
    } else {
      std::span<const float> row(logits_host.data() + size_t(src.host_row) * size_t(vocab), size_t(vocab));
      for (int32_t i = 0; i < n; ++i) t.tokens.push_back(sampler.sample(row, context_of(s, s.index + i)));
    }
    out.rows.push_back(std::move(t));
  }
  return out;
}

}  // namespace loom
