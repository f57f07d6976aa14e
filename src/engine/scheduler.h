// Scheduler: admission policy and per-step batcher. Pure logic (no I/O, no
// kernels, time comes in as an argument): it owns the Sequences and decides
// each step which of them run and how many tokens each computes, reserving
// KV blocks through the KvManager. Single-threaded: only the engine thread (or
// a test) calls it. Invariants and life cycle: engine/README.md.
//
// Per step: expired deadlines are dropped; running sequences with one pending
// token (decodes) go first, then running partial prefills, then waiting
// sequences (chunked prefill), all in rank order and within the token budget
// and sequence cap. When blocks run out, the lowest-ranked running sequence is
// preempted by recompute (blocks freed, back to waiting).
//
// Rank: lower priority value first; a request older than starvation_steps
// steps ranks at the best priority of any live sequence (so no request waits
// unboundedly). Within a priority, weighted fair share between tenants: a
// tenant's virtual service is the tokens scheduled for it divided by its
// weight, and the tenant with the least goes first; within a tenant, older
// first. A tenant that becomes active starts at the least virtual service of
// the active tenants, so idle time is not banked. Preemption takes the
// lowest-ranked running sequence: worst priority, most-served tenant, newest.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/api.h"
#include "engine/request.h"
#include "engine/sequence.h"
#include "engine/step_output.h"
#include "kv/kv_manager.h"

namespace loom {

struct SchedulerConfig {
  int32_t max_num_batched_tokens = 2048;          // tokens computed per step
  int32_t max_num_seqs = 256;                     // sequences running at once
  int32_t max_waiting_requests = 4096;            // admission bound (new requests waiting)
  int64_t max_waiting_tokens = int64_t(1) << 24;  // admission bound (their prompt tokens)
  int32_t max_model_len = 0;           // prompt + max_tokens limit; 0: the pool's capacity
  bool enable_chunked_prefill = true;  // false: a prompt is prefilled in one step
  int64_t starvation_steps = 1000;     // age (steps) after which a request is served FCFS first
  void validate() const;
};

enum class AdmitStatus : uint8_t { Admitted, QueueFull, TooLong, Invalid };

struct ScheduledSeq {
  SeqId seq = 0;
  int32_t start = 0;       // position of the first token computed (== num_computed before)
  // Tokens computed this step: tokens[start, start + num_tokens - num_draft),
  // then draft[0, num_draft) (speculative decoding: proposed tokens verified
  // in this step; only the accepted ones stay).
  int32_t num_tokens = 0;
  int32_t num_draft = 0;
  bool sample = false;     // the step computes the last known token: sample the next
};

struct StepPlan {
  uint64_t step = 0;
  std::vector<ScheduledSeq> seqs;  // decodes first, then prefill chunks
  std::vector<BlockCopy> copies;   // copy-on-write: copy KV src -> dst before the step
  std::vector<SeqId> preempted;    // moved back to waiting, blocks freed (recomputed later)
  std::vector<SeqId> expired;      // deadline passed: removed, blocks freed (finish: abort)
  int32_t num_tokens = 0;          // sum of seqs[i].num_tokens
  int32_t num_decode_tokens = 0;
  int32_t num_cached_tokens = 0;  // prompt tokens skipped thanks to prefix-cache hits
  bool empty() const { return seqs.empty(); }
};

struct SchedulerStats {
  uint64_t steps = 0;
  uint64_t prompt_tokens_computed = 0;
  uint64_t cached_prompt_tokens = 0;  // prompt tokens skipped thanks to prefix-cache hits
  uint64_t generated_tokens = 0;
  uint64_t finished_requests = 0;
  uint64_t draft_tokens = 0;     // speculative tokens verified
  uint64_t accepted_tokens = 0;  // of those, accepted
  std::vector<uint64_t> accepted_lengths;  // [a]: verify steps that accepted a drafts
  uint64_t preemptions = 0;
  uint64_t expired = 0;
  uint64_t admitted_requests = 0;
  uint64_t rejected_requests = 0;
  size_t waiting = 0;
  size_t running = 0;
};

// An event for a request's callback, made on the engine thread and delivered
// by the engine (Scheduler::take_events).
struct SequenceEvent {
  std::shared_ptr<RequestState> request;
  StreamEvent event;
};

class Scheduler {
 public:
  // kv (and tokenizer, which may be null: no output text) must outlive the
  // scheduler; eos_ids end generation (SequenceOutput).
  Scheduler(SchedulerConfig config, KvManager& kv, const Tokenizer* tokenizer = nullptr,
            std::vector<int32_t> eos_ids = {});
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Admission: queues the request's first sequence (id returned through
  // *first_seq; siblings are forked later). Rejects when the waiting queue is
  // full (count or tokens), or when prompt + max_tokens can never fit; a
  // rejected request leaves no trace (the caller reports it).
  AdmitStatus add_request(std::shared_ptr<RequestState> request, SeqId* first_seq = nullptr);
  // The same for a request without a callback (tests, tools).
  AdmitStatus add_request(RequestId id, const Request& request, SeqId* first_seq = nullptr);
  // Ends every sequence of the request with `reason` (an event each, with the
  // text held back; siblings not yet forked end too), freeing their blocks;
  // returns their ids (none for an unknown or finished request).
  std::vector<SeqId> abort_request(RequestId id, FinishReason reason = FinishReason::Abort,
                                   EngineErrorKind error = EngineErrorKind::None,
                                   const std::string& message = "");
  // abort_request for every live request, in id order.
  void abort_all(FinishReason reason, EngineErrorKind error, const std::string& message);

  // Plans one step (sequences past their deadline end first, with abort).
  // The caller runs it, then applies its output with update_from_output().
  StepPlan schedule(Clock::time_point now);
  // Applies the output of `plan`'s step (Kind Tokens or Placeholders):
  // complete_step(plan), pooled rows added to their sequences (a pooling
  // sequence whose prompt is done ends with its vector, blocks freed), then
  // each sampled sequence that is still live takes
  // its tokens (n > 1: the siblings are forked first). Real tokens go through
  // the sequence's output (text, stop tokens / strings, lengths) and its
  // constraint; a sequence that finishes is removed. Placeholders are only
  // appended (append_token). Events for every applied token: take_events().
  void update_from_output(const StepPlan& plan, const StepOutput& output);
  // Applies Kind Resolutions: the real tokens of earlier placeholders.
  void update_from_output(const StepOutput& resolutions);
  // The events made since the last call, in order.
  std::vector<SequenceEvent> take_events();
  // The step's KV is written: advances num_computed, registers full blocks in
  // the prefix cache.
  void complete_step(const StepPlan& plan);
  // Speculative decoding: tokens proposed to follow a running sequence whose
  // tokens are all known and computed but the last (a decode); verified by
  // the next step that schedules it. Cut to what its max_tokens and the
  // context leave; replaced by the next call; dropped on preemption.
  void set_draft(SeqId seq, std::vector<int32_t> draft);
  // Appends the token sampled for a sequence whose entry had sample == true.
  // Async scheduling: a token < 0 is a placeholder for a token still being
  // sampled on the device (StepInput::token_source); it is replaced by
  // resolve_token() before the next complete_step() and never enters a
  // prefix-cache hash (full blocks are hashed at complete_step over computed
  // tokens, and cached prefixes never cover the last token).
  void append_token(SeqId seq, int32_t token);
  // Replaces the last token's placeholder (running or preempted sequences).
  // A sequence whose placeholder is its max_tokens-th output token is not
  // scheduled again: the caller finishes it once the token is known.
  void resolve_token(SeqId seq, int32_t token);
  // n > 1: creates `count` siblings of `parent` (all its tokens computed,
  // nothing sampled yet) sharing its blocks; returns their ids (index 1..).
  std::vector<SeqId> fork(SeqId parent, int32_t count);
  // Removes a finished sequence and frees its blocks (no event).
  void finish(SeqId seq);

  const Sequence* find(SeqId seq) const;
  const Sequence& get(SeqId seq) const;
  size_t num_waiting() const { return waiting_by_arrival_.size(); }
  size_t num_running() const { return running_.size(); }
  const std::vector<SeqId>& running() const { return running_; }
  bool idle() const { return seqs_.empty(); }
  int32_t block_size() const { return kv_.block_size(); }
  SchedulerStats stats() const;
  const SchedulerConfig& config() const { return config_; }
  // Tokens scheduled for the tenant divided by its weight, counted since it
  // last became active (after the lift described above); 0 for an unknown or
  // retired tenant. For tests and diagnostics.
  double tenant_virtual_service(const std::string& tenant) const;
  KvManager& kv() { return kv_; }

  // Throws when the scheduler's own invariants (sets vs statuses, seats,
  // KV ownership) are broken. O(sequences).
  void check_invariants() const;

 private:
  struct RankKey {
    int32_t priority;
    uint64_t arrival;
    int32_t index;
    SeqId id;
    auto operator<=>(const RankKey&) const = default;
  };
  struct ArrivalKey {
    uint64_t arrival;
    int32_t index;
    SeqId id;
    auto operator<=>(const ArrivalKey&) const = default;
  };
  struct DeadlineKey {
    Clock::time_point when;
    SeqId id;
    auto operator<=>(const DeadlineKey&) const = default;
  };

  // Per tenant: fair-share account and its waiting sequences. A tenant is
  // active while it has sequences (live > 0); inactive ones are kept only
  // while their virtual service is above every active tenant's.
  struct TenantState {
    double served = 0;  // virtual service: tokens scheduled / weight
    float weight = 1;
    int32_t live = 0;           // sequences, waiting or running
    std::set<RankKey> waiting;  // by rank (priority, arrival)
    std::set<ArrivalKey> waiting_by_arrival;
  };

  bool aged(const Sequence& s) const;
  int32_t effective_priority(const Sequence& s) const;            // aged: the best live priority
  bool ranks_before(const Sequence& a, const Sequence& b) const;  // a is served before b
  int32_t seats(const Sequence& s) const { return 1 + s.pending_forks; }
  void add_waiting(Sequence& s);
  void remove_waiting(Sequence& s);
  void remove_running(SeqId id);
  void erase(SeqId id);  // frees blocks, drops from every set
  Sequence& at(SeqId id);
  TenantState& tenant_of(const Sequence& s);
  const TenantState& tenant_of(const Sequence& s) const;
  void charge(const Sequence& s, int32_t tokens);  // tokens scheduled (< 0: taken back)
  // The least virtual service among active tenants other than `except`.
  std::optional<double> min_active_service(const TenantState* except) const;
  void retire_tenant_if_idle(const std::string& name);
  // Next waiting sequence to admit (aged first, then best priority; fair
  // between tenants; FIFO within one); null when nothing waits.
  Sequence* next_waiting();
  // Output side (scheduler_output.cpp).
  void attach_output(Sequence& s);
  void apply_token(SeqId id, const SampleResult& sample, bool resolve);
  // A verify step's tokens: accepted drafts, then the step's own token.
  void apply_verified(Sequence& s, int32_t num_draft, std::span<const SampleResult> tokens);
  // Marks s done in its request and removes it; the request's last sequence
  // sets e.request_done. Emits e.
  void close_sequence(Sequence& s, StreamEvent e);
  // A pooling sequence whose prompt is computed ends with its vector.
  void finish_pooling(Sequence& s);
  void end_sequence(SeqId id, FinishReason reason, EngineErrorKind error, const std::string& message);

  SchedulerConfig config_;
  KvManager& kv_;
  int32_t capacity_tokens_;
  std::unordered_map<SeqId, std::unique_ptr<Sequence>> seqs_;
  std::unordered_map<RequestId, std::vector<SeqId>> by_request_;
  std::set<ArrivalKey> waiting_by_arrival_;  // every waiting sequence
  std::map<std::string, TenantState, std::less<>> tenants_;
  std::map<int32_t, int32_t> live_priorities_;  // priority -> live sequences
  std::set<DeadlineKey> deadlines_;
  std::vector<SeqId> running_;
  // schedule()'s working lists, kept across steps: once grown, planning a
  // step allocates nothing per sequence.
  struct StepEntry {
    SeqId id;
    int32_t start;
    int32_t n;
    std::vector<BlockCopy> copies;
    bool live;
    int32_t draft = 0;  // of n, speculative tokens
  };
  std::vector<StepEntry> step_entries_;
  std::vector<SeqId> step_order_;
  int32_t running_seats_ = 0;
  size_t waiting_new_requests_ = 0;  // waiting, never scheduled (the admission bound)
  int64_t waiting_new_tokens_ = 0;
  uint64_t step_ = 0;
  uint64_t next_arrival_ = 0;
  SeqId next_seq_id_ = 1;
  SchedulerStats stats_;
  const Tokenizer* tokenizer_;
  std::vector<int32_t> eos_ids_;
  std::vector<SequenceEvent> events_;
};

}  // namespace loom
