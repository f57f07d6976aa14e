// Scheduler: admission, per-step batching with chunked prefill, preemption by
// recompute, anti-starvation aging and weighted fair share between tenants.
// See scheduler.h and engine/README.md.
#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_set>

#include "core/error.h"

namespace loom {

void SchedulerConfig::validate() const {
  if (max_num_batched_tokens < 1) LOOM_THROW("max_num_batched_tokens must be >= 1");
  if (max_num_seqs < 1) LOOM_THROW("max_num_seqs must be >= 1");
  if (max_num_seqs > max_num_batched_tokens)
    LOOM_THROW("max_num_seqs ({}) must not exceed max_num_batched_tokens ({})", max_num_seqs,
               max_num_batched_tokens);
  if (max_waiting_requests < 0 || max_waiting_tokens < 0)
    LOOM_THROW("waiting-queue bounds must be non-negative");
  if (max_model_len < 0) LOOM_THROW("max_model_len must be >= 0");
  if (starvation_steps < 0) LOOM_THROW("starvation_steps must be >= 0");
}

Scheduler::Scheduler(SchedulerConfig config, KvManager& kv, const Tokenizer* tokenizer,
                     std::vector<int32_t> eos_ids)
    : config_(config), kv_(kv), tokenizer_(tokenizer), eos_ids_(std::move(eos_ids)) {
  config_.validate();
  capacity_tokens_ =
      int32_t(std::min<int64_t>(int64_t(kv_.num_blocks()) * kv_.block_size(), INT32_MAX));
}

Scheduler::~Scheduler() = default;

Sequence& Scheduler::at(SeqId id) {
  auto it = seqs_.find(id);
  LOOM_CHECK(it != seqs_.end(), "unknown sequence {}", id);
  return *it->second;
}

const Sequence* Scheduler::find(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

const Sequence& Scheduler::get(SeqId id) const {
  const Sequence* s = find(id);
  LOOM_CHECK(s != nullptr, "unknown sequence {}", id);
  return *s;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s = stats_;
  s.waiting = waiting_by_arrival_.size();
  s.running = running_.size();
  return s;
}

bool Scheduler::aged(const Sequence& s) const {
  return config_.starvation_steps > 0 &&
         step_ - s.arrival_step >= uint64_t(config_.starvation_steps);
}

int32_t Scheduler::effective_priority(const Sequence& s) const {
  return aged(s) ? live_priorities_.begin()->first : s.priority;
}

bool Scheduler::ranks_before(const Sequence& a, const Sequence& b) const {
  const int32_t pa = effective_priority(a), pb = effective_priority(b);
  if (pa != pb) return pa < pb;
  if (a.tenant != b.tenant) {
    const double sa = tenant_of(a).served, sb = tenant_of(b).served;
    if (sa != sb) return sa < sb;
  }
  if (a.arrival != b.arrival) return a.arrival < b.arrival;
  if (a.index != b.index) return a.index < b.index;
  return a.id < b.id;
}

Scheduler::TenantState& Scheduler::tenant_of(const Sequence& s) {
  auto it = tenants_.find(s.tenant);
  LOOM_CHECK(it != tenants_.end(), "sequence {} has no tenant state", s.id);
  return it->second;
}

const Scheduler::TenantState& Scheduler::tenant_of(const Sequence& s) const {
  auto it = tenants_.find(s.tenant);
  LOOM_CHECK(it != tenants_.end(), "sequence {} has no tenant state", s.id);
  return it->second;
}

void Scheduler::charge(const Sequence& s, int32_t tokens) {
  TenantState& t = tenant_of(s);
  t.served += double(tokens) / double(t.weight);
}

std::optional<double> Scheduler::min_active_service(const TenantState* except) const {
  std::optional<double> least;
  for (const auto& [name, t] : tenants_)
    if (&t != except && t.live > 0 && (!least || t.served < *least)) least = t.served;
  return least;
}

void Scheduler::retire_tenant_if_idle(const std::string& name) {
  auto it = tenants_.find(name);
  if (it == tenants_.end() || it->second.live > 0) return;
  // Dropping the state is the same as keeping it when its service is at or
  // below every active tenant's: it would be lifted to that on return.
  const std::optional<double> least = min_active_service(nullptr);
  if (!least) {
    tenants_.clear();  // nothing is active: every account starts afresh
    return;
  }
  if (it->second.served <= *least) tenants_.erase(it);
}

double Scheduler::tenant_virtual_service(const std::string& tenant) const {
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? 0.0 : it->second.served;
}

void Scheduler::add_waiting(Sequence& s) {
  s.status = SeqStatus::Waiting;
  TenantState& t = tenant_of(s);
  t.waiting.insert(RankKey{s.priority, s.arrival, s.index, s.id});
  t.waiting_by_arrival.insert(ArrivalKey{s.arrival, s.index, s.id});
  waiting_by_arrival_.insert(ArrivalKey{s.arrival, s.index, s.id});
}

void Scheduler::remove_waiting(Sequence& s) {
  TenantState& t = tenant_of(s);
  t.waiting.erase(RankKey{s.priority, s.arrival, s.index, s.id});
  t.waiting_by_arrival.erase(ArrivalKey{s.arrival, s.index, s.id});
  waiting_by_arrival_.erase(ArrivalKey{s.arrival, s.index, s.id});
}

Sequence* Scheduler::next_waiting() {
  Sequence* best = nullptr;
  int32_t best_priority = 0;
  double best_served = 0;
  for (auto& [name, t] : tenants_) {
    if (t.waiting.empty()) continue;
    // The tenant's first in rank order. Aged sequences form a prefix of its
    // arrival order (arrival_step grows with arrival) and rank at the top
    // priority, before every younger sequence of that priority.
    Sequence* c = &at(t.waiting_by_arrival.begin()->id);
    if (!aged(*c)) c = &at(t.waiting.begin()->id);
    const int32_t priority = effective_priority(*c);
    const bool before_best =
        best == nullptr || priority < best_priority ||
        (priority == best_priority &&
         (t.served < best_served ||
          (t.served == best_served && c->arrival < best->arrival)));  // tenants: never equal
    if (before_best) {
      best = c;
      best_priority = priority;
      best_served = t.served;
    }
  }
  return best;
}

void Scheduler::remove_running(SeqId id) {
  auto it = std::find(running_.begin(), running_.end(), id);
  LOOM_CHECK(it != running_.end(), "sequence {} is not running", id);
  running_.erase(it);
  running_seats_ -= seats(at(id));
}

void Scheduler::erase(SeqId id) {
  Sequence& s = at(id);
  const std::string tenant = s.tenant;
  if (s.status == SeqStatus::Waiting) {
    remove_waiting(s);
    if (!s.first_scheduled_step) {
      --waiting_new_requests_;
      waiting_new_tokens_ -= s.prompt_len;
    }
  } else {
    remove_running(id);
  }
  if (s.deadline) deadlines_.erase(DeadlineKey{*s.deadline, id});
  s.blocks.reset();
  auto req = by_request_.find(s.request_id);
  if (req != by_request_.end()) {
    auto& ids = req->second;
    ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
    if (ids.empty()) by_request_.erase(req);
  }
  --tenant_of(s).live;
  if (--live_priorities_[s.priority] == 0) live_priorities_.erase(s.priority);
  seqs_.erase(id);
  retire_tenant_if_idle(tenant);
}

AdmitStatus Scheduler::add_request(RequestId id, const Request& request, SeqId* first_seq) {
  auto state = std::make_shared<RequestState>();
  state->id = id;
  state->request = request;
  return add_request(std::move(state), first_seq);
}

AdmitStatus Scheduler::add_request(std::shared_ptr<RequestState> state, SeqId* first_seq) {
  LOOM_CHECK(state != nullptr, "add_request without a request");
  const RequestId id = state->id;
  const Request& request = state->request;
  const SamplingParams& p = request.params;
  const bool pooling = request.pooling.has_value();
  const int32_t min_tokens = p.prompt_logprobs && p.n == 1 ? 0 : 1;  // 0: prompt scoring only
  if (request.prompt_ids.empty() || p.n < 1 || (!pooling && p.max_tokens < min_tokens) ||
      by_request_.count(id) != 0 || !std::isfinite(request.tenant_weight) ||
      !(request.tenant_weight > 0.0f) ||
      (pooling && (p.n != 1 || p.prompt_logprobs || request.constraint))) {
    ++stats_.rejected_requests;
    return AdmitStatus::Invalid;
  }
  const int32_t max_tokens = pooling ? 0 : p.max_tokens;  // pooling: the prompt alone
  int64_t limit = capacity_tokens_;
  if (config_.max_model_len > 0) limit = std::min<int64_t>(limit, config_.max_model_len);
  if (!config_.enable_chunked_prefill)
    limit = std::min<int64_t>(limit, config_.max_num_batched_tokens);
  const int64_t total = int64_t(request.prompt_ids.size()) + max_tokens;
  if (total > limit || p.n > config_.max_num_seqs) {
    ++stats_.rejected_requests;
    return AdmitStatus::TooLong;
  }
  if (waiting_new_requests_ >= size_t(config_.max_waiting_requests) ||
      waiting_new_tokens_ + int64_t(request.prompt_ids.size()) > config_.max_waiting_tokens) {
    ++stats_.rejected_requests;
    return AdmitStatus::QueueFull;
  }
  auto seq = std::make_unique<Sequence>();
  Sequence& s = *seq;
  s.id = next_seq_id_++;
  s.request_id = id;
  s.index = 0;
  s.priority = request.priority;
  s.arrival = next_arrival_++;
  s.arrival_step = step_;
  s.deadline = request.deadline;
  s.cache_salt = hash_cache_salt(request.cache_salt);
  s.tenant = request.tenant;
  s.tokens = request.prompt_ids;
  s.prompt_len = int32_t(request.prompt_ids.size());
  s.max_tokens = max_tokens;
  s.pending_forks = p.n - 1;
  if (pooling) s.pooled.emplace(*request.pooling, s.prompt_len);
  state->done.assign(size_t(p.n), false);
  state->num_done = 0;
  state->forked = p.n == 1;
  s.request = std::move(state);
  attach_output(s);
  if (request.constraint) {
    s.constraint = request.constraint->make();
    LOOM_CHECK(s.constraint != nullptr, "the {} constraint made nothing", request.constraint->describe());
  }
  TenantState& t = tenants_[s.tenant];
  if (t.live == 0) {  // (re)activated: no credit for the time it was idle
    if (auto least = min_active_service(&t)) t.served = std::max(t.served, *least);
  }
  t.weight = request.tenant_weight;
  ++t.live;
  ++live_priorities_[s.priority];
  seqs_.emplace(s.id, std::move(seq));
  by_request_[id].push_back(s.id);
  add_waiting(s);
  if (s.deadline) deadlines_.insert(DeadlineKey{*s.deadline, s.id});
  ++waiting_new_requests_;
  waiting_new_tokens_ += s.prompt_len;
  ++stats_.admitted_requests;
  if (first_seq) *first_seq = s.id;
  return AdmitStatus::Admitted;
}

StepPlan Scheduler::schedule(Clock::time_point now) {
  StepPlan plan;
  plan.step = ++step_;
  ++stats_.steps;

  while (!deadlines_.empty() && deadlines_.begin()->when <= now) {
    const SeqId id = deadlines_.begin()->id;
    plan.expired.push_back(id);
    end_sequence(id, FinishReason::Abort, EngineErrorKind::None, "deadline exceeded");
    ++stats_.expired;
  }

  std::vector<StepEntry>& entries = step_entries_;
  entries.clear();
  int32_t budget = config_.max_num_batched_tokens;

  auto preempt = [&](Sequence& v) {
    // Its entry, if it has one (at most one is live: a sequence is placed
    // once per step, and a step that preempts admits nothing).
    for (auto e = entries.rbegin(); e != entries.rend(); ++e) {
      if (!e->live || e->id != v.id) continue;
      e->live = false;
      budget += e->n;
      charge(v, -e->n);
      break;
    }
    remove_running(v.id);
    v.blocks.reset();
    v.num_computed = 0;
    v.draft.clear();
    ++v.num_preemptions;
    ++stats_.preemptions;
    add_waiting(v);
    plan.preempted.push_back(v.id);
  };
  // Reserves n more tokens for a running sequence, preempting lower-ranked
  // running sequences while blocks are short. False when s itself was preempted.
  auto place = [&](Sequence& s, int32_t n) -> bool {
    for (;;) {
      std::vector<BlockCopy> copies;
      if (kv_.reserve(s.blocks, s.num_computed + n, &copies)) {
        entries.push_back(StepEntry{s.id, s.num_computed, n, std::move(copies), true});
        budget -= n;
        charge(s, n);
        return true;
      }
      Sequence* victim = nullptr;
      for (SeqId id : running_) {
        if (id == s.id) continue;
        Sequence& v = at(id);
        if (victim == nullptr || ranks_before(*victim, v)) victim = &v;
      }
      if (victim == nullptr || ranks_before(*victim, s)) {
        preempt(s);
        return false;
      }
      preempt(*victim);
    }
  };

  std::vector<SeqId>& order = step_order_;
  order.assign(running_.begin(), running_.end());
  std::sort(order.begin(), order.end(),
            [&](SeqId a, SeqId b) { return ranks_before(at(a), at(b)); });
  // Running decodes first, then running partial prefills, in rank order.
  for (int phase = 0; phase < 2; ++phase) {
    for (SeqId id : order) {
      if (budget <= 0) break;
      auto it = seqs_.find(id);
      if (it == seqs_.end()) continue;
      Sequence& s = *it->second;
      if (s.status != SeqStatus::Running) continue;  // preempted earlier in this step
      // At its length limit (async scheduling: its last token is in flight):
      // it ends with that token, whose KV is never needed.
      if (s.num_computed >= s.prompt_len && s.num_output_tokens() >= s.max_tokens) continue;
      const int32_t pending = s.num_pending();
      if (phase == 0 ? pending != 1 : pending <= 1) continue;
      // A decode verifies its draft too, as far as the budget goes.
      const int32_t want = phase == 0 ? pending + int32_t(s.draft.size()) : pending;
      const int32_t n = std::min(want, budget);
      if (place(s, n) && phase == 0) entries.back().draft = n - pending;
    }
  }

  // Waiting sequences (new, or preempted earlier) in next_waiting() order; not
  // in a step that preempted (blocks are short), and head-of-line: the first
  // that does not fit stops admission so large requests are not overtaken
  // forever.
  if (plan.preempted.empty()) {
    auto try_admit = [&](Sequence& s) -> bool {
      if (budget <= 0 || running_seats_ + seats(s) > config_.max_num_seqs) return false;
      LOOM_CHECK(s.blocks.empty() && s.num_computed == 0, "waiting sequence {} holds KV", s.id);
      // Cached blocks never cover the last token: its logits must be computed.
      // Prompt logprobs need every prompt position computed: no cache hits.
      // Pooling needs the positions it has not pooled yet computed.
      const bool scoring = s.request && s.params().prompt_logprobs.has_value();
      int32_t cacheable = scoring ? 0 : s.num_tokens() - 1;
      if (s.pooled) cacheable = std::min(cacheable, s.pooled->next());
      const int32_t hit =
          cacheable > 0 ? kv_.acquire_cached_prefix(s.blocks, s.tokens, s.cache_salt, cacheable)
                        : 0;
      s.num_computed = hit;
      const int32_t pending = s.num_pending();
      const int32_t n = std::min(pending, budget);
      std::vector<BlockCopy> copies;
      if ((!config_.enable_chunked_prefill && n < pending) ||
          !kv_.reserve(s.blocks, s.num_computed + n, &copies)) {
        s.blocks.reset();
        s.num_computed = 0;
        return false;
      }
      kv_.note_prefix_lookup(s.num_tokens(), hit);
      plan.num_cached_tokens += hit;
      stats_.cached_prompt_tokens += uint64_t(hit);
      entries.push_back(StepEntry{s.id, s.num_computed, n, std::move(copies), true});
      budget -= n;
      charge(s, n);
      remove_waiting(s);
      s.status = SeqStatus::Running;
      running_.push_back(s.id);
      running_seats_ += seats(s);
      if (!s.first_scheduled_step) {
        s.first_scheduled_step = step_;
        s.first_scheduled_time = now;
        --waiting_new_requests_;
        waiting_new_tokens_ -= s.prompt_len;
      }
      return true;
    };
    while (Sequence* s = next_waiting())
      if (!try_admit(*s)) break;
  }

  plan.seqs.reserve(entries.size());
  for (StepEntry& e : entries) {
    if (!e.live) continue;
    const Sequence& s = at(e.id);
    const bool sample = e.start + e.n - e.draft == s.num_tokens();
    plan.seqs.push_back(ScheduledSeq{e.id, e.start, e.n, e.draft, sample});
    plan.num_tokens += e.n;
    if (e.n - e.draft == 1 && e.start >= s.prompt_len) plan.num_decode_tokens += 1;
    plan.copies.insert(plan.copies.end(), e.copies.begin(), e.copies.end());
  }
  return plan;
}

void Scheduler::complete_step(const StepPlan& plan) {
  for (const ScheduledSeq& e : plan.seqs) {
    auto it = seqs_.find(e.seq);
    if (it == seqs_.end()) continue;  // finished or aborted since the plan was made
    Sequence& s = *it->second;
    LOOM_CHECK(s.status == SeqStatus::Running && s.num_computed == e.start,
               "sequence {} changed under step {} (computed {}, planned start {})", s.id, plan.step,
               s.num_computed, e.start);
    if (e.start < s.prompt_len)
      stats_.prompt_tokens_computed += uint64_t(std::min(e.num_tokens, s.prompt_len - e.start));
    // Draft tokens count as computed only once accepted (update_from_output).
    s.num_computed += e.num_tokens - e.num_draft;
    LOOM_CHECK(s.num_computed <= s.blocks.num_tokens(), "sequence {} computed past its blocks",
               s.id);
    kv_.commit(s.blocks, s.tokens, s.num_computed, s.cache_salt);
  }
}

void Scheduler::check_invariants() const {
  size_t waiting = 0;
  int32_t seats_sum = 0;
  size_t new_waiting = 0;
  int64_t new_tokens = 0;
  std::map<BlockId, int32_t> refs;
  std::map<std::string, int32_t> live_by_tenant;
  std::map<int32_t, int32_t> priorities;
  for (const auto& [id, ptr] : seqs_) {
    const Sequence& s = *ptr;
    LOOM_CHECK(s.id == id, "sequence key {} holds id {}", id, s.id);
    LOOM_CHECK(s.num_computed >= 0 && s.num_computed <= s.num_tokens(),
               "sequence {} computed {} of {}", id, s.num_computed, s.num_tokens());
    if (s.status == SeqStatus::Waiting) {
      ++waiting;
      LOOM_CHECK(s.blocks.empty() && s.num_computed == 0, "waiting sequence {} holds KV", id);
      const TenantState& t = tenant_of(s);
      LOOM_CHECK(t.waiting.count(RankKey{s.priority, s.arrival, s.index, s.id}) == 1 &&
                     t.waiting_by_arrival.count(ArrivalKey{s.arrival, s.index, s.id}) == 1 &&
                     waiting_by_arrival_.count(ArrivalKey{s.arrival, s.index, s.id}) == 1,
                 "waiting sequence {} not queued", id);
      if (!s.first_scheduled_step) {
        ++new_waiting;
        new_tokens += s.prompt_len;
      }
    } else {
      LOOM_CHECK(std::count(running_.begin(), running_.end(), id) == 1,
                 "running sequence {} not listed once", id);
      LOOM_CHECK(s.blocks.num_tokens() >= s.num_computed, "sequence {} lacks blocks", id);
      seats_sum += seats(s);
    }
    for (BlockId b : s.blocks.blocks()) ++refs[b];
    ++live_by_tenant[s.tenant];
    ++priorities[s.priority];
  }
  LOOM_CHECK(priorities == live_priorities_, "live priority counts disagree");
  size_t tenant_waiting = 0;
  for (const auto& [name, t] : tenants_) {
    auto it = live_by_tenant.find(name);
    const int32_t live = it == live_by_tenant.end() ? 0 : it->second;
    LOOM_CHECK(t.live == live, "tenant '{}' counts {} sequences, holds {}", name, t.live, live);
    LOOM_CHECK(t.waiting.size() == t.waiting_by_arrival.size() && t.waiting.size() <= size_t(live),
               "tenant '{}' queues {} / {} of {} sequences", name, t.waiting.size(),
               t.waiting_by_arrival.size(), live);
    LOOM_CHECK(std::isfinite(t.weight) && t.weight > 0 && std::isfinite(t.served),
               "tenant '{}' weight {} service {}", name, t.weight, t.served);
    tenant_waiting += t.waiting.size();
  }
  for (const auto& [name, live] : live_by_tenant)
    LOOM_CHECK(tenants_.count(name) == 1, "no state for tenant '{}' of {} sequences", name, live);
  LOOM_CHECK(waiting == tenant_waiting && waiting == waiting_by_arrival_.size(),
             "waiting sets {} / {} vs {} sequences", tenant_waiting, waiting_by_arrival_.size(),
             waiting);
  LOOM_CHECK(running_.size() + waiting == seqs_.size(), "running {} + waiting {} != {}",
             running_.size(), waiting, seqs_.size());
  LOOM_CHECK(seats_sum == running_seats_, "seats {} != {}", seats_sum, running_seats_);
  LOOM_CHECK(new_waiting == waiting_new_requests_ && new_tokens == waiting_new_tokens_,
             "admission counters {} / {} vs {} / {}", waiting_new_requests_, waiting_new_tokens_,
             new_waiting, new_tokens);
  kv_.check_invariants();
  int32_t used = 0;
  for (BlockId b = 0; b < kv_.num_blocks(); ++b) {
    auto it = refs.find(b);
    const int32_t expected = it == refs.end() ? 0 : it->second;
    LOOM_CHECK(kv_.ref_count(b) == expected, "block {} ref {} but {} tables hold it", b,
               kv_.ref_count(b), expected);
    used += expected > 0;
  }
  LOOM_CHECK(used == kv_.num_used_blocks(), "used blocks {} != {}", used, kv_.num_used_blocks());
}

}  // namespace loom
