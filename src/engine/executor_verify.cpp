// StepExecutor, speculative decoding: proposing drafts between steps, and
// verifying them from the k + 1 logits rows a verify step computes for a
// sequence (its last known token's row, then one per draft token). Row i
// sees the sequence followed by the draft's first i tokens, and its token is
// chosen exactly as a step without speculation would choose it there (the
// same path: argmax, the backend's sampler or the host Sampler; the same
// penalties, bans and masks; the same seeded uniform for that output step).
// Draft token i is accepted while it equals row i's token; the first that
// differs is replaced by row i's token, and if all are accepted row k adds
// one more. So a verify step yields 1 to k + 1 tokens, and they are exactly
// the tokens decoding without speculation gives (for greedy and for seeded
// sampling; an unseeded request's draws differ, its distribution does not):
// a point-mass proposal accepted iff it equals the sampled token is accepted
// with probability p(draft), as rejection sampling accepts it.
#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "engine/executor_impl.h"

namespace loom {
namespace {

// Whether every draft token can be checked by argmax alone: greedy with no
// logprobs, penalties, bias or min_tokens bans (the rows need no host work).
bool argmax_verifiable(const Sequence& s, int32_t num_draft) {
  return s.params().argmax_only() &&
         (s.num_output_tokens() + num_draft >= s.params().min_tokens || s.output->min_tokens_bans().empty());
}

}  // namespace

void StepExecutor::Impl::mask_draft_rows(const RowLayout& r, const Sequence& s, int32_t vocab,
                                         std::vector<int32_t>& rows, std::vector<uint32_t>& words) {
  const size_t w = size_t((vocab + 31) / 32);
  int32_t accepted = 0;
  for (int32_t i = 0; i <= r.draft_rows; ++i) {
    const size_t at = words.size();
    words.resize(at + w, 0u);
    const auto t0 = std::chrono::steady_clock::now();
    const bool masked =
        s.constraint->fill_next_token_bitmask(std::span<uint32_t>(words.data() + at, w));
    stats.mask_time.observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (masked) {
      rows.push_back(r.sample_row + i);
    } else {
      words.resize(at);
    }
    // Row i + 1 follows draft token i: only if the constraint takes it (else
    // row i refuses it and the later rows are never read).
    if (i == r.draft_rows || !s.constraint->accept_token(s.draft[size_t(i)])) break;
    ++accepted;
  }
  s.constraint->rollback(accepted);
}

void StepExecutor::Impl::verify_drafts(Tensor& logits, const Scheduler& seqs, StepOutput& out) {
  Backend& be = model.backend();
  const int32_t vocab = int32_t(logits.dim(1));
  // Masks first, on every verify row of a constrained sequence.
  mask_rows.clear();
  mask_words.clear();
  struct Verify {
    const Sequence* s;
    const RowLayout* r;
    std::vector<int32_t> history;  // tokens, then the draft
    enum class Path : uint8_t { Argmax, Device, Host } path;
    size_t first = 0;  // its first row in its path's gathered rows
  };
  std::vector<Verify> vs;
  for (const RowLayout& r : layout) {
    if (r.draft_rows == 0) continue;
    const Sequence* s = seqs.find(r.seq);
    if (s == nullptr) continue;
    if (s->constraint) mask_draft_rows(r, *s, vocab, mask_rows, mask_words);
    Verify v{s, &r, {}, Verify::Path::Host};
    v.history.assign(s->tokens.begin(), s->tokens.end());
    v.history.insert(v.history.end(), s->draft.begin(), s->draft.begin() + r.draft_rows);
    vs.push_back(std::move(v));
  }
  if (vs.empty()) return;
  if (!mask_rows.empty()) {
    be.apply_token_bitmask(logits, mask_rows, mask_words);
    stats.masked_rows += mask_rows.size();
  }
  // Each sequence's rows take the path a plain step would give them.
  const bool device_sampling = config.device_sampling && be.has_device_sampler();
  std::vector<int32_t> rows_of[3];
  for (Verify& v : vs) {
    const SamplingParams& p = v.s->params();
    if (config.greedy_fast_path && argmax_verifiable(*v.s, v.r->draft_rows))
      v.path = Verify::Path::Argmax;
    else if (device_sampling && !p.greedy() && !p.logprobs)
      v.path = Verify::Path::Device;
    auto& rows = rows_of[int(v.path)];
    v.first = rows.size();
    for (int32_t i = 0; i <= v.r->draft_rows; ++i) rows.push_back(v.r->sample_row + i);
  }
  auto gather = [&](Verify::Path path) {
    return gather_rows_kept(be, logits, rows_of[int(path)], verify_rows[int(path)]);
  };
  // The context row i of v sees: the draft's first i tokens as output.
  auto context = [](const Verify& v, int32_t i) {
    const std::span<const int32_t> all(v.history);
    const SamplingParams& p = v.s->params();
    const auto output = all.subspan(size_t(v.s->prompt_len), size_t(v.s->num_output_tokens() + i));
    const std::span<const int32_t> banned = int32_t(output.size()) < p.min_tokens
                                                ? std::span<const int32_t>(v.s->output->min_tokens_bans())
                                                : std::span<const int32_t>();
    return SampleContext{&p, all.first(size_t(v.s->prompt_len)), output, v.s->index, banned};
  };
  std::vector<int32_t> argmax_ids, device_ids;
  if (!rows_of[0].empty()) be.argmax_rows(gather(Verify::Path::Argmax), argmax_ids);
  if (!rows_of[1].empty()) {
    sample_specs.clear();
    logit_edits.clear();
    for (const Verify& v : vs) {
      if (v.path != Verify::Path::Device) continue;
      const SamplingParams& p = v.s->params();
      for (int32_t i = 0; i <= v.r->draft_rows; ++i) {
        const SampleContext ctx = context(v, i);
        SampleSpec spec;
        spec.row = int32_t(v.first) + i;
        spec.temperature = p.temperature;
        spec.top_k = p.top_k;
        spec.top_p = p.top_p;
        spec.min_p = p.min_p;
        spec.edits_begin = int32_t(logit_edits.size());
        Sampler::logit_edits(ctx, vocab, logit_edits);
        spec.edits_end = int32_t(logit_edits.size());
        spec.uniform = sampler.draw_uniform(ctx);
        sample_specs.push_back(spec);
      }
    }
    LOOM_CHECK(be.sample_rows(gather(Verify::Path::Device), sample_specs, logit_edits, device_ids) &&
                   device_ids.size() == sample_specs.size(),
               "the backend's device sampler failed");
  }
  if (!rows_of[2].empty()) copy_to_host_f32(be, gather(Verify::Path::Host), verify_host);
  for (const Verify& v : vs) {
    SequenceTokens t;
    t.seq = v.s->id;
    for (int32_t i = 0; i <= v.r->draft_rows; ++i) {
      SampleResult chosen;
      const size_t at = v.first + size_t(i);
      if (v.path == Verify::Path::Argmax) {
        chosen.token = argmax_ids[at];
        ++stats.argmax_tokens;
      } else if (v.path == Verify::Path::Device) {
        chosen.token = device_ids[at];
        ++stats.device_sampled_tokens;
      } else {
        const std::span<const float> row(verify_host.data() + at * size_t(vocab), size_t(vocab));
        chosen = sampler.sample(row, context(v, i));
      }
      t.tokens.push_back(std::move(chosen));
      if (i == v.r->draft_rows || t.tokens.back().token != v.s->draft[size_t(i)]) break;
    }
    const int32_t accepted = int32_t(t.tokens.size()) - 1;
    if (policy) policy->observe_verify(v.s->id, v.r->draft_rows, accepted);
    if (std::binary_search(forced_drafts.begin(), forced_drafts.end(), v.s->id)) {
      stats.jump_forward_tokens += uint64_t(v.r->draft_rows);
      stats.jump_forward_accepted_tokens += uint64_t(accepted);
    }
    out.rows.push_back(std::move(t));
  }
}

std::vector<std::pair<SeqId, std::vector<int32_t>>> StepExecutor::propose(const Scheduler& seqs) {
  Impl& x = *impl_;
  std::vector<std::pair<SeqId, std::vector<int32_t>>> out;
  x.forced_drafts.clear();
  if (!x.policy) return out;
  SpecPolicy& policy = *x.policy;
  const SpeculativeConfig& sc = x.config.speculative;
  std::vector<uint64_t> running(seqs.running().begin(), seqs.running().end());
  std::sort(running.begin(), running.end());
  if (x.proposer) x.proposer->retain(running);
  policy.retain(running);
  // Decoding sequences; those whose tokens are all on the host may propose.
  // Without a proposer only those that may force tokens are looked at (the
  // others get no policy state and no draft).
  struct Candidate {
    const Sequence* s;
    bool forced;  // jump-forward may propose for it
  };
  std::vector<Candidate> cands;
  int32_t decoding = 0;
  const bool free_proposals = x.proposer && x.proposer->free_proposals();
  for (SeqId id : seqs.running()) {
    const Sequence& s = seqs.get(id);
    if (s.num_pending() != 1) continue;
    ++decoding;
    const bool forced = x.jumps_forward(s);
    if (!x.proposer && !forced) continue;
    policy.step(s.id);
    // An unverified proposal is checked against the tokens known now (an
    // async step's last token is still on its way).
    const bool known = s.tokens.back() >= 0;
    if (free_proposals || forced)
      policy.check_shadow(
          s.id, std::span<const int32_t>(s.tokens).first(s.tokens.size() - (known ? 0 : 1)));
    if (known && s.pending_forks == 0 && s.max_tokens > 0) cands.push_back({&s, forced});
  }
  if (sc.max_batch > 0 && decoding > sc.max_batch) cands.clear();
  policy.begin_step(decoding);
  // Forced tokens first (host work bounded by their count); the proposer
  // asked for the others.
  std::vector<Proposal> drafts;
  std::vector<const Sequence*> asked;  // drafts[i] is asked[i]'s, candidate asked_cand[i]
  std::vector<size_t> asked_cand;
  std::vector<const Sequence*> proposer_asked;
  std::vector<size_t> proposer_cand;
  std::vector<int32_t> max_tokens;
  std::vector<int32_t> forced;
  for (size_t ci = 0; ci < cands.size(); ++ci) {
    const Candidate& c = cands[ci];
    if (c.forced && policy.forced_ready(c.s->id)) {
      c.s->constraint->forced_tokens(x.config.jump_forward.max_tokens, forced);
      if (!forced.empty()) {
        asked.push_back(c.s);
        asked_cand.push_back(ci);
        drafts.push_back(Proposal{forced, SpecPolicy::kForced});
        continue;
      }
      policy.no_forced(c.s->id);
    }
    if (!x.proposer || !policy.ready(c.s->id)) continue;
    const int32_t k = policy.request(c.s->id);
    if (k == 0) continue;
    proposer_asked.push_back(c.s);
    proposer_cand.push_back(ci);
    max_tokens.push_back(k);
  }
  if (!proposer_asked.empty()) {
    std::vector<Proposal> proposed;
    const auto t0 = std::chrono::steady_clock::now();
    x.proposer->propose(proposer_asked, max_tokens, proposed);
    if (!free_proposals)
      policy.observe_proposal(
          *std::max_element(max_tokens.begin(), max_tokens.end()),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (size_t i = 0; i < proposer_asked.size(); ++i) {
      std::vector<int32_t>& d = proposed[i].tokens;
      if (d.size() > size_t(max_tokens[i])) d.resize(size_t(max_tokens[i]));
      asked.push_back(proposer_asked[i]);
      asked_cand.push_back(proposer_cand[i]);
      drafts.push_back(std::move(proposed[i]));
    }
  }
  const int64_t vocab = vocab_size();
  std::vector<size_t> order(asked.size());
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
    std::vector<int32_t>& d = drafts[i].tokens;
    d.erase(std::find_if(d.begin(), d.end(), [&](int32_t t) { return t < 0 || t >= vocab; }),
            d.end());
  }
  // The likeliest drafts first: each verified draft makes the step dearer
  // for the next.
  std::vector<double> likely(asked.size());
  for (size_t i = 0; i < asked.size(); ++i)
    likely[i] = policy.acceptance(asked[i]->id, drafts[i].quality);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return likely[a] > likely[b]; });
  for (size_t i : order) {
    const Sequence& s = *asked[i];
    std::vector<int32_t>& d = drafts[i].tokens;
    if (s.constraint) {  // a draft stops at the first token the constraint refuses
      size_t ok = 0;
      while (ok < d.size() && s.constraint->accept_token(d[ok])) ++ok;
      s.constraint->rollback(int32_t(ok));
      d.resize(ok);
    }
    d.resize(size_t(policy.choose(s.id, drafts[i].quality, d, s.num_tokens())));
    if (drafts[i].quality == SpecPolicy::kForced && !d.empty()) x.forced_drafts.push_back(s.id);
  }
  std::sort(x.forced_drafts.begin(), x.forced_drafts.end());
  // Every candidate gets its draft, empty or not (an older one is replaced).
  out.reserve(cands.size());
  for (const Candidate& c : cands) out.emplace_back(c.s->id, std::vector<int32_t>{});
  for (size_t i = 0; i < asked.size(); ++i) out[asked_cand[i]].second = std::move(drafts[i].tokens);
  return out;
}

}  // namespace loom
