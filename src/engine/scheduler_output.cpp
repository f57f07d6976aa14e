// Scheduler, output side: a step's tokens applied to its sequences (text,
// stop conditions, constraints, n > 1 forks, placeholders of async steps),
// sequences ended (finish, abort, deadline, error) and the events that tell
// their requests. See scheduler.h and engine/README.md.
#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "engine/scheduler.h"

namespace loom {

void Scheduler::attach_output(Sequence& s) {
  s.output = std::make_unique<SequenceOutput>(tokenizer_, s.request->request.params, eos_ids_);
}

std::vector<SequenceEvent> Scheduler::take_events() {
  std::vector<SequenceEvent> out;
  out.swap(events_);
  events_.reserve(out.size());  // the next step's events: one allocation
  return out;
}

void Scheduler::append_token(SeqId id, int32_t token) {
  Sequence& s = at(id);
  LOOM_CHECK(s.status == SeqStatus::Running && s.num_pending() == 0,
             "append to sequence {} with {} pending tokens", id, s.num_pending());
  s.tokens.push_back(token);
}

void Scheduler::resolve_token(SeqId id, int32_t token) {
  Sequence& s = at(id);
  LOOM_CHECK(!s.tokens.empty() && s.tokens.back() < 0 && token >= 0,
             "sequence {} has no placeholder to resolve (token {})", id, token);
  s.tokens.back() = token;
}

std::vector<SeqId> Scheduler::fork(SeqId parent, int32_t count) {
  Sequence& p = at(parent);
  LOOM_CHECK(p.status == SeqStatus::Running && p.num_pending() == 0,
             "fork of sequence {} needs all its tokens computed", parent);
  LOOM_CHECK(count == p.pending_forks, "fork of {} siblings, {} expected", count, p.pending_forks);
  std::vector<SeqId> ids;
  for (int32_t i = 1; i <= count; ++i) {
    auto seq = std::make_unique<Sequence>();
    Sequence& c = *seq;
    c.id = next_seq_id_++;
    c.request_id = p.request_id;
    c.index = p.index + i;
    c.priority = p.priority;
    c.arrival = p.arrival;
    c.arrival_step = p.arrival_step;
    c.deadline = p.deadline;
    c.cache_salt = p.cache_salt;
    c.tenant = p.tenant;
    c.tokens = p.tokens;
    c.prompt_len = p.prompt_len;
    c.max_tokens = p.max_tokens;
    c.num_computed = p.num_computed;
    c.blocks = kv_.fork(p.blocks);
    c.status = SeqStatus::Running;
    c.first_scheduled_step = p.first_scheduled_step;
    c.first_scheduled_time = p.first_scheduled_time;
    c.request = p.request;
    attach_output(c);
    if (p.constraint) c.constraint = p.constraint->clone();
    ids.push_back(c.id);
    running_.push_back(c.id);
    by_request_[c.request_id].push_back(c.id);
    if (c.deadline) deadlines_.insert(DeadlineKey{*c.deadline, c.id});
    ++tenant_of(c).live;
    ++live_priorities_[c.priority];
    seqs_.emplace(c.id, std::move(seq));
  }
  p.pending_forks = 0;  // the parent's reserved seats now belong to the siblings
  if (p.request) p.request->forked = true;
  return ids;
}

void Scheduler::finish(SeqId id) { erase(id); }

void Scheduler::set_draft(SeqId id, std::vector<int32_t> draft) {
  Sequence& s = at(id);
  LOOM_CHECK(s.status == SeqStatus::Running && s.num_pending() == 1 && s.tokens.back() >= 0,
             "a draft for sequence {} whose tokens are not all known and computed", id);
  // The verify step adds up to draft + 1 tokens: stay within max_tokens and the context.
  int64_t room = int64_t(s.max_tokens) - s.num_output_tokens() - 1;
  if (config_.max_model_len > 0) room = std::min<int64_t>(room, int64_t(config_.max_model_len) - s.num_tokens() - 1);
  room = std::min<int64_t>(room, int64_t(capacity_tokens_) - s.num_tokens() - 1);
  if (int64_t(draft.size()) > room) draft.resize(size_t(std::max<int64_t>(0, room)));
  s.draft = std::move(draft);
}

void Scheduler::update_from_output(const StepPlan& plan, const StepOutput& output) {
  LOOM_CHECK(output.kind != StepOutput::Kind::Resolutions, "resolutions applied as step {}'s output",
             plan.step);
  complete_step(plan);
  for (const PromptLogprobs& p : output.prompt_logprobs) {
    Sequence* s = find(p.seq) ? &at(p.seq) : nullptr;
    if (s == nullptr || p.entries.empty()) continue;
    LOOM_CHECK(p.first == s->prompt_logprobs_next, "prompt logprobs of sequence {} from token {}, {} owed",
               p.seq, p.first, s->prompt_logprobs_next);
    s->prompt_logprobs_next += int32_t(p.entries.size());
    s->prompt_scores.insert(s->prompt_scores.end(), p.entries.begin(), p.entries.end());
  }
  for (const PooledRows& p : output.pooled) {
    Sequence* s = find(p.seq) ? &at(p.seq) : nullptr;
    if (s != nullptr && s->pooled) s->pooled->add(p);
  }
  // Prompt scoring or pooling only (max_tokens 0): done once the prompt is computed.
  for (const ScheduledSeq& e : plan.seqs) {
    Sequence* s = find(e.seq) ? &at(e.seq) : nullptr;
    if (s == nullptr || s->max_tokens != 0 || s->num_computed < s->prompt_len) continue;
    if (s->pooled)
      finish_pooling(*s);
    else
      end_sequence(e.seq, FinishReason::Length, EngineErrorKind::None, "");
  }
  const bool placeholders = output.kind == StepOutput::Kind::Placeholders;
  std::unordered_map<SeqId, int32_t> drafts;  // verify entries: their draft tokens
  for (const ScheduledSeq& e : plan.seqs)
    if (e.num_draft > 0) drafts[e.seq] = e.num_draft;
  for (const SequenceTokens& row : output.rows) {
    Sequence* s = find(row.seq) ? &at(row.seq) : nullptr;
    if (s == nullptr) continue;  // ended while its step ran (abort, deadline, its previous token)
    LOOM_CHECK(!row.tokens.empty(), "no token for sequence {} in step {}", row.seq, plan.step);
    if (placeholders) {
      LOOM_CHECK(row.tokens.size() == 1 && row.tokens[0].token < 0 && s->pending_forks == 0,
                 "bad placeholder for sequence {}", row.seq);
      append_token(row.seq, row.tokens[0].token);
      continue;
    }
    if (auto d = drafts.find(row.seq); d != drafts.end()) {
      apply_verified(*s, d->second, {row.tokens.data(), row.tokens.size()});
      continue;
    }
    std::vector<SeqId> ids{row.seq};
    if (s->pending_forks > 0) {
      LOOM_CHECK(row.tokens.size() == size_t(1 + s->pending_forks), "{} tokens for {} siblings",
                 row.tokens.size(), 1 + s->pending_forks);
      const std::vector<SeqId> kids = fork(row.seq, s->pending_forks);
      ids.insert(ids.end(), kids.begin(), kids.end());
    }
    LOOM_CHECK(row.tokens.size() == ids.size(), "{} tokens for sequence {}", row.tokens.size(), row.seq);
    for (size_t i = 0; i < ids.size(); ++i) apply_token(ids[i], row.tokens[i], false);
  }
}

void Scheduler::apply_verified(Sequence& s, int32_t num_draft, std::span<const SampleResult> tokens) {
  const SeqId id = s.id;
  LOOM_CHECK(!tokens.empty() && tokens.size() <= size_t(num_draft) + 1 && num_draft <= int32_t(s.draft.size()),
             "{} tokens verify {} drafts of sequence {}", tokens.size(), num_draft, id);
  const int32_t accepted = int32_t(tokens.size()) - 1;
  for (int32_t i = 0; i < accepted; ++i)
    LOOM_CHECK(tokens[size_t(i)].token == s.draft[size_t(i)], "accepted token {} of sequence {} is not its draft",
               i, id);
  stats_.draft_tokens += uint64_t(num_draft);
  stats_.accepted_tokens += uint64_t(accepted);
  if (stats_.accepted_lengths.size() <= size_t(num_draft)) stats_.accepted_lengths.resize(size_t(num_draft) + 1);
  ++stats_.accepted_lengths[size_t(accepted)];
  if (s.request) {
    s.request->draft_tokens += num_draft;
    s.request->accepted_tokens += accepted;
  }
  s.draft.clear();
  // Accepted drafts were computed by this step (their KV is written); the
  // last token is new. A token that ends the sequence drops the rest.
  for (size_t i = 0; i < tokens.size(); ++i) {
    apply_token(id, tokens[i], false);
    Sequence* live = find(id) ? &at(id) : nullptr;
    if (live == nullptr) return;
    if (i + 1 < tokens.size()) ++live->num_computed;
  }
  // Rejected drafts' slots go back: the table holds exactly the computed tokens.
  kv_.truncate(s.blocks, s.num_computed);
  kv_.commit(s.blocks, s.tokens, s.num_computed, s.cache_salt);
}

void Scheduler::update_from_output(const StepOutput& resolutions) {
  LOOM_CHECK(resolutions.kind == StepOutput::Kind::Resolutions, "a step's output applied as resolutions");
  for (const SequenceTokens& row : resolutions.rows) {
    if (find(row.seq) == nullptr) continue;  // aborted, expired or failed meanwhile
    LOOM_CHECK(row.tokens.size() == 1, "{} tokens resolve one placeholder", row.tokens.size());
    apply_token(row.seq, row.tokens[0], true);
  }
}

void Scheduler::apply_token(SeqId id, const SampleResult& sample, bool resolve) {
  const int32_t token = sample.token;
  if (resolve)
    resolve_token(id, token);
  else
    append_token(id, token);
  Sequence& s = at(id);
  ++stats_.generated_tokens;
  StreamEvent e;
  e.request_id = s.request_id;
  e.seq_index = s.index;
  e.token_ids.push_back(token);
  e.first_scheduled = s.first_scheduled_time;
  const Clock::time_point detokenize_start = Clock::now();
  e.text = s.output->append(token, s.num_output_tokens(), &e.finish);
  if (s.request)
    s.request->detokenize_s +=
        std::chrono::duration<double>(Clock::now() - detokenize_start).count();
  if (s.params().logprobs) e.logprobs.push_back(sample);
  e.prompt_logprobs = std::move(s.prompt_scores);
  s.prompt_scores.clear();
  if (s.constraint && e.finish == FinishReason::None) {
    if (!s.constraint->accept_token(token)) {
      e.finish = FinishReason::Error;
      e.error = EngineErrorKind::Internal;
      e.error_message = fmt::format("token {} is not allowed by the request's {} constraint", token,
                                    s.request->request.constraint->describe());
      e.text += s.output->flush();
    } else if (s.constraint->is_terminated()) {
      e.finish = FinishReason::Stop;
      e.text += s.output->flush();
    }
  }
  if (e.finish == FinishReason::None) {
    events_.push_back(SequenceEvent{s.request, std::move(e)});
    return;
  }
  close_sequence(s, std::move(e));
}

void Scheduler::close_sequence(Sequence& s, StreamEvent e) {
  std::shared_ptr<RequestState> r = s.request;
  std::vector<StreamEvent> out;
  out.push_back(std::move(e));
  if (r) {
    r->done[size_t(s.index)] = true;
    ++r->num_done;
    if (!r->forked) {  // the parent ended before its siblings existed: they end with it
      r->forked = true;
      for (size_t i = 0; i < r->done.size(); ++i) {
        if (r->done[i]) continue;
        r->done[i] = true;
        ++r->num_done;
        StreamEvent sib;
        sib.request_id = r->id;
        sib.seq_index = int32_t(i);
        sib.finish = out[0].finish;
        sib.error = out[0].error;
        sib.error_message = out[0].error_message;
        out.push_back(std::move(sib));
      }
    }
    if (r->all_done()) {
      out.back().request_done = true;
      out.back().spec_draft_tokens = r->draft_tokens;
      out.back().spec_accepted_tokens = r->accepted_tokens;
      out.back().detokenize_seconds = r->detokenize_s;
      ++stats_.finished_requests;
    }
  }
  erase(s.id);
  for (StreamEvent& ev : out) events_.push_back(SequenceEvent{r, std::move(ev)});
}

void Scheduler::finish_pooling(Sequence& s) {
  StreamEvent e;
  e.request_id = s.request_id;
  e.seq_index = s.index;
  e.first_scheduled = s.first_scheduled_time;
  e.finish = FinishReason::Stop;
  e.embedding = s.pooled->finish();
  close_sequence(s, std::move(e));
}

void Scheduler::end_sequence(SeqId id, FinishReason reason, EngineErrorKind error, const std::string& message) {
  Sequence& s = at(id);
  StreamEvent e;
  e.request_id = s.request_id;
  e.seq_index = s.index;
  e.text = s.output->flush();
  e.finish = reason;
  e.error = error;
  e.error_message = message;
  e.prompt_logprobs = std::move(s.prompt_scores);
  close_sequence(s, std::move(e));
}

std::vector<SeqId> Scheduler::abort_request(RequestId id, FinishReason reason, EngineErrorKind error,
                                            const std::string& message) {
  auto it = by_request_.find(id);
  if (it == by_request_.end()) return {};
  const std::vector<SeqId> ids = it->second;  // end_sequence edits the list
  for (SeqId s : ids) end_sequence(s, reason, error, message);
  return ids;
}

void Scheduler::abort_all(FinishReason reason, EngineErrorKind error, const std::string& message) {
  std::vector<RequestId> ids;
  ids.reserve(by_request_.size());
  for (const auto& [id, seqs] : by_request_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (RequestId id : ids) abort_request(id, reason, error, message);
}

}  // namespace loom
